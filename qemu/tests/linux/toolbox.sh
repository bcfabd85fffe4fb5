# Linux's verbs toolbox on the emulated fabric, unmodified (docs/linux-guest.md, "Toolbox"):
# infiniband-diags, rdma-core's examples and perftest on a guest pair, one boot.
# Run: cargo qemu linux --guests 2 --script qemu/tests/linux/toolbox.sh
# The peer's LID follows the fabric's subnet manager: node 0 has LID 2, node 1 LID 4.
peer=$((2 + 2 * (1 - IBK_NODE)))
lid=$(($(cat /sys/class/infiniband/mlx4_0/ports/1/lid)))

# infiniband-diags (user-space MADs through ib_umad) and rdma-core's device query.
ibk_run modprobe ib_umad
ibk_run ibv_devinfo -v
ibk_run ibstat
ibk_run ibaddr
ibk_run smpquery nodeinfo "$lid"
ibk_run smpquery portinfo "$lid"
ibk_run smpquery nodeinfo "$peer"
ibk_run perfquery "$peer" 1
# A barrier: the peer's queries of this port are over before the counted part starts.
ibk_pair ibv_rc_pingpong -n 1

# perfquery around known traffic: two reads back to back give the cost of a read itself,
# then 5 UD messages of 1024 bytes each way (the test checks the counts).
echo "ibkern-toolbox: counters before"
ibk_run perfquery -x
ibk_run perfquery -x
ibk_pair ibv_ud_pingpong -n 5 -s 1024 -c
echo "ibkern-toolbox: counters after"
ibk_run perfquery -x
ibk_run perfquery

# rdma-core's examples with their data checks.
ibk_pair ibv_rc_pingpong -n 5 -s 8192 -c
ibk_pair ibv_uc_pingpong -n 5 -s 4096 -c
ibk_pair ibv_ud_pingpong -n 5 -s 2048 -c
# 16 RC QPs taking their receives from one SRQ of 32, refilled as it drains (no -c here).
ibk_pair ibv_srq_pingpong -n 64 -s 1024 -r 32

# ibv_asyncwatch while node 1 takes its port down and back up (ibportstate through the
# local SMA): it must report PORT_ERR then PORT_ACTIVE.
if [ "$IBK_NODE" = 1 ]; then
    ibv_asyncwatch >asyncwatch.log 2>&1 &
    watcher=$!
    sleep 1
    ibk_run ibportstate -D 0 1 down
    echo "ibkern-toolbox: port after down: $(cat /sys/class/infiniband/mlx4_0/ports/1/state)"
    ibk_run ibportstate -D 0 1 arm
    ibk_run ibportstate -D 0 1 active
    sleep 1
    echo "ibkern-toolbox: port after active: $(cat /sys/class/infiniband/mlx4_0/ports/1/state)"
    kill "$watcher"
    sed 's/^/ibkern-toolbox: asyncwatch: /' asyncwatch.log
fi

# perftest. Every latency test sweeps all sizes (-a, 2 B to 8 MiB, 5 iterations each), and
# so do UD send_bw (up to the MTU) and read_bw; the other bandwidth tests run one 1 MiB size
# (their sweeps move the same sizes as the latency tests and cost minutes under TCG).
ibk_pair ib_send_lat -a -c UD -n 5
ibk_pair ib_send_lat -a -c UC -n 5
ibk_pair ib_send_lat -a -c RC -n 5
ibk_pair ib_send_bw -a -c UD -n 5
ibk_pair ib_send_bw -c UC -n 5 -s 1048576
ibk_pair ib_send_bw -c RC -n 5 -s 1048576
ibk_pair ib_write_lat -a -c UC -n 5
ibk_pair ib_write_lat -a -c RC -n 5
ibk_pair ib_write_bw -c UC -n 5 -s 1048576
ibk_pair ib_write_bw -c RC -n 5 -s 1048576
ibk_pair ib_read_lat -a -n 5
ibk_pair ib_read_bw -a -n 5
ibk_pair ib_atomic_lat -n 5
ibk_pair ib_atomic_bw -n 5
# The options: CQ events, CQ moderation, post lists, a deep send queue, bidirectional.
ibk_pair ib_send_lat -c RC -e -n 5
ibk_pair ib_send_bw -c RC -e -n 5
ibk_pair ib_read_lat -e -n 5
ibk_pair ib_write_bw -c RC -Q 8 -n 64
ibk_pair ib_send_bw -c UD -Q 8 -n 64
ibk_pair ib_write_bw -c UC -l 16 -n 64
ibk_pair ib_send_bw -c RC -l 16 -n 64
ibk_pair ib_write_bw -c RC -t 128 -n 256
ibk_pair ib_read_bw -t 128 -n 256
ibk_pair ib_send_bw -c RC -b -n 5
ibk_pair ib_write_bw -c RC -b -n 5
ibk_pair ib_read_bw -b -n 5
ibk_pair ib_atomic_bw -b -n 5
