# The Linux delegate on the emulated fabric (docs/delegation.md), for the guest pair:
#   cargo qemu linux --guests 2 --delegate --script qemu/tests/linux/delegate.sh
# Node 0 serves a scratch root with ibkern-delegate; node 1 connects to it with
# `ibkern-delegate check`, as an ibkern node would (Connect on the rendezvous QP, then RC),
# runs every op, writes, adds and reads a region one-sided, and expects the HCA to refuse a
# WRITE to a read-only region. Node 0 then checks what landed in its root.
# Linux cannot choose the rendezvous QPN, so node 0 hands its LID and QPN to node 1 over
# the guest link (an ibkern node is given them in its configuration instead).
if [ "$IBK_NODE" = 0 ]; then
    mkdir -p root
    ibkern-delegate --root root --idle-exit 20 --lease-max-s 30 > delegate.log 2>&1 &
    pid=$!
    where=
    for i in $(seq 1 150); do
        where=$(sed -n 's/.*listening on LID \(0x[0-9a-f]*\) rendezvous QPN \(0x[0-9a-f]*\).*/\1 \2/p' delegate.log)
        [ -n "$where" ] && break
        usleep 200000
    done
    echo "ibkern-linux: delegate at LID and QPN: ${where:-none}"
    if [ -z "$where" ]; then
        cat delegate.log
        IBK_FAILED=$((IBK_FAILED + 1))
    fi
    echo "$where" | timeout 120 busybox nc -l -p 7070
    for i in $(seq 1 "$IBK_TIMEOUT"); do
        kill -0 $pid 2>/dev/null || break
        sleep 1
    done
    kill $pid 2>/dev/null
    wait $pid
    rc=$?
    cat delegate.log
    echo "ibkern-linux: result rc=$rc: ibkern-delegate --root root"
    [ $rc = 0 ] || IBK_FAILED=$((IBK_FAILED + 1))
    size=$(cat root/check-*/data.bin 2>/dev/null | wc -c)
    head=$(head -c 13 root/check-*/data.bin 2>/dev/null)
    echo "ibkern-linux: delegate root: data.bin $size bytes, starting '$head'"
    [ "$size" = 60013 ] && [ "$head" = "inline bytes;" ] || IBK_FAILED=$((IBK_FAILED + 1))
else
    where=
    for i in $(seq 1 240); do
        where=$(timeout 2 busybox nc "$IBK_SERVER" 7070 2>/dev/null)
        [ -n "$where" ] && break
        usleep 500000
    done
    set -- $where
    ibk_run ibkern-delegate check --peer-lid "${1:-0}" --peer-qpn "${2:-0}" --timeout-s 60
fi
