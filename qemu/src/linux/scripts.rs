//! The guest's shell side: `/init` and the helpers guest scripts can use. The runner reads
//! the `ibkern-linux:` lines these print (see `super::run`).
//!
//! Kernel command line parameters (unknown to the kernel, so they reach init's environment):
//! `IBK_NODE` (0, 1, ...), `IBK_NODES`, `IBK_MSIX` (1 = MSI-X, 0 = `msi_x=0`, INTx),
//! `IBK_TIMEOUT` (seconds per test program).

/// `/init`: mount, load the modules, wait for the port, bring the link to the peer up, run
/// `/etc/ibkern/script`, report, power off.
pub const INIT: &str = r#"#!/bin/sh
# ibkern's Linux guest init (written by `cargo qemu linux-image`, docs/linux-guest.md).
export PATH=/usr/sbin:/usr/bin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp
# Boot is quiet; from here on every kernel message up to info reaches the console, so the
# runner sees each warning and error mlx4_core/mlx4_ib print.
echo 7 > /proc/sys/kernel/printk
IBK_NODE=${IBK_NODE:-0}
IBK_NODES=${IBK_NODES:-1}
IBK_TIMEOUT=${IBK_TIMEOUT:-120}
export IBK_NODE IBK_NODES IBK_TIMEOUT
echo "ibkern-linux: node $IBK_NODE of $IBK_NODES, Linux $(uname -r)"
ok=1
load() {
    if modprobe "$@"; then
        echo "ibkern-linux: modprobe $*: ok"
    else
        echo "ibkern-linux: modprobe $*: FAILED"
        ok=0
    fi
}
if [ "$IBK_MSIX" = 0 ]; then load mlx4_core msi_x=0; else load mlx4_core; fi
load mlx4_ib
load ib_uverbs
state=
for i in $(seq 1 100); do
    state=$(cat /sys/class/infiniband/mlx4_0/ports/1/state 2>/dev/null)
    case "$state" in *ACTIVE*) break ;; esac
    usleep 200000
done
echo "ibkern-linux: port 1 state: ${state:-none}, lid $(cat /sys/class/infiniband/mlx4_0/ports/1/lid 2>/dev/null)"
if [ "$IBK_NODES" -gt 1 ]; then
    load e1000
    ip link set lo up
    ip addr add 10.77.0.$((IBK_NODE + 1))/24 dev eth0
    ip link set eth0 up
    IBK_SERVER=10.77.0.1
    export IBK_SERVER
    # Wait (bounded) until the peer answers on the link, so the first rendezvous does not
    # race the e1000 link coming up (or an ARP failure from before it did).
    peer=10.77.0.$((2 - IBK_NODE))
    for i in $(seq 1 100); do
        [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" = 1 ] && break
        usleep 200000
    done
    sleep 1
    link=DOWN
    for i in $(seq 1 60); do
        if ping -c 1 -W 1 "$peer" >/dev/null 2>&1; then link=up; break; fi
    done
    echo "ibkern-linux: link to $peer $link"
fi
if [ $ok = 1 ]; then
    # The script runs in the scratch directory: its files and the helpers' are relative.
    (cd /tmp && sh -c '. /etc/ibkern/lib.sh; . /etc/ibkern/script; exit $IBK_FAILED')
    rc=$?
else
    rc=99
fi
echo "ibkern-linux: script exit $rc"
poweroff -f
"#;

/// `/etc/ibkern/lib.sh`: sourced before the script.
pub const LIB: &str = r#"# Helpers for ibkern Linux guest scripts (docs/linux-guest.md).
IBK_FAILED=0

# ibk_run CMD...: run a program (bounded by IBK_TIMEOUT), report its status, count failures.
ibk_run() {
    echo "ibkern-linux: run $*"
    timeout "$IBK_TIMEOUT" "$@"
    rc=$?
    echo "ibkern-linux: result rc=$rc: $*"
    [ $rc = 0 ] || IBK_FAILED=$((IBK_FAILED + 1))
    return $rc
}

# ibk_pair CMD...: a client/server pair (perftest, ibv_*_pingpong): node 0 serves, node 1
# connects to node 0 over the guest link, retrying while the server is not listening yet.
ibk_pair() {
    echo "ibkern-linux: run $*"
    if [ "$IBK_NODE" = 0 ]; then
        timeout "$IBK_TIMEOUT" "$@"
        rc=$?
    else
        # stdout goes straight to the console (line by line, so the runner sees each
        # perftest row as it is measured); only stderr, where perftest reports that it could
        # not connect, is kept to decide on a retry.
        n=0
        while :; do
            timeout "$IBK_TIMEOUT" "$@" "$IBK_SERVER" 2>ibk.err
            rc=$?
            cat ibk.err
            grep -q "Couldn't connect\|Unable to init the socket" ibk.err || break
            n=$((n + 1))
            [ $n -lt 60 ] || break
            usleep 500000
        done
    fi
    echo "ibkern-linux: result rc=$rc: $*"
    [ $rc = 0 ] || IBK_FAILED=$((IBK_FAILED + 1))
    return $rc
}
"#;

/// The script for one guest when none is given.
pub const DEFAULT_ONE: &str = "ibk_run ibv_devices\nibk_run ibv_devinfo -v\n";

/// The script for two guests when none is given: every perftest latency test the pair runs, data
/// checks on (perftest checks completions; the ping-pongs' -c validates the buffers).
pub const DEFAULT_PAIR: &str = "\
ibk_run ibv_devinfo
ibk_pair ib_send_lat -a -c UD -n 5
ibk_pair ib_send_lat -a -c UC -n 5
ibk_pair ib_write_lat -a -n 5
ibk_pair ibv_ud_pingpong -n 5 -s 1024 -c
ibk_pair ibv_uc_pingpong -n 5 -c
";
