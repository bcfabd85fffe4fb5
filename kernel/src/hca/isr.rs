//! The completion handler in the interrupt path (the bench's isr mode): while a bench loop
//! waits in [`wait`], the HCA's MSI-X handler ([`super::platform::msix_handler`]) calls the
//! handler installed here, which drains the HCA's event queue, takes the completions and
//! posts the replies itself (`bench::env::IsrHandler`).
//!
//! The handler is installed only for the duration of [`wait`], whose caller hands it the
//! exclusive use of everything it touches (the HCA, the run's state) and meanwhile reads
//! only the atomics of `IsrProgress`. One CPU takes every interrupt, and installing and
//! removing happen with interrupts disabled, so the handler never runs concurrently with
//! the code that owns that state outside the wait. The handler runs with interrupts
//! disabled (interrupt gate), takes no lock and allocates nothing.

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use bench::env::{IsrHandler, IsrProgress};
use x86_64::instructions::interrupts::without_interrupts;

/// The installed handler: a type-erased pointer to it and the function that calls it.
static HANDLER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());
static CALL: AtomicUsize = AtomicUsize::new(0);

/// Calls the handler `p` points to, as installed by [`wait`] with `H` its type.
///
/// # Safety
/// `p` must point to a live `H` that nothing else accesses during the call.
unsafe fn call<H: IsrHandler>(p: *mut ()) {
    // SAFETY: the caller's contract: `p` is the `&mut H` that `wait` was given, which it
    // does not use while the handler is installed.
    unsafe { (*p.cast::<H>()).on_interrupt() }
}

/// From the MSI-X handler: runs the installed completion handler, if any; false when none
/// is installed (the interrupt is then only recorded).
pub fn run_installed() -> bool {
    let p = HANDLER.load(Ordering::Acquire);
    if p.is_null() {
        return false;
    }
    let f = CALL.load(Ordering::Acquire);
    // SAFETY: CALL is stored before HANDLER (Release) by `wait`, and only a
    // `call::<H>` function pointer is ever stored there.
    let f = unsafe { core::mem::transmute::<usize, unsafe fn(*mut ())>(f) };
    // SAFETY: `p` is the handler `wait` installed; it stays valid and untouched by its
    // owner until `wait` removes it, which happens with interrupts disabled, so never in
    // the middle of this call (interrupts are disabled here too).
    unsafe { f(p) };
    true
}

/// Installs `handler`, delivers an MSI-X interrupt that came while none was installed,
/// then waits until `progress` is finished or has not moved for `idle_ns` (checked on
/// the TSC clock, so the wait is bounded even if no interrupt ever comes); removes the
/// handler before returning.
pub fn wait<H: IsrHandler>(handler: &mut H, progress: &IsrProgress, idle_ns: u64) {
    let p: *mut () = (handler as *mut H).cast();
    let f: unsafe fn(*mut ()) = call::<H>;
    without_interrupts(|| {
        CALL.store(f as usize, Ordering::Release);
        HANDLER.store(p, Ordering::Release);
        if super::platform::take_msix_fired() {
            // SAFETY: as in `run_installed`: interrupts are disabled and `handler` is not
            // used by this function until it is removed below.
            unsafe { call::<H>(p) };
        }
    });
    let mut seen = progress.count();
    let mut since = crate::now_ns();
    while !progress.finished() {
        let now = crate::now_ns();
        let count = progress.count();
        if count != seen {
            seen = count;
            since = now;
        } else if now.saturating_sub(since) > idle_ns {
            break;
        }
        core::hint::spin_loop();
    }
    without_interrupts(|| HANDLER.store(core::ptr::null_mut(), Ordering::Release));
    // The handler wrote through `p`; from here on only `handler` is used again.
    core::sync::atomic::fence(Ordering::SeqCst);
}
