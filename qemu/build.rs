//! The runner's build information: the same build script as the kernel's.

include!("../kernel/build.rs");
