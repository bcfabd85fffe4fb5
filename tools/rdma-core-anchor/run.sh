#!/bin/sh
# Instruction counts of rdma-core's mlx4 provider for docs/performance.md (not run in CI).
#
#   tools/rdma-core-anchor/run.sh [--src DIR] [--work DIR]
#
# Builds rdma-core (release pinned below) from source -- the release tarball, downloaded, or
# an rdma-core tree at that release given with --src -- then tools/rdma-core-anchor/harness.c
# against its static libmlx4/libibverbs, and counts with callgrind. Nothing of rdma-core is
# kept in this repository; the work directory (default: a fresh one under ${TMPDIR:-/tmp})
# holds the source and the build. Needs: gcc, cmake, ninja or make, pkg-config, libnl-3 and
# libnl-route-3 development files, valgrind, curl (without --src).
set -eu

VERSION=64.0
URL="https://github.com/linux-rdma/rdma-core/releases/download/v$VERSION/rdma-core-$VERSION.tar.gz"
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=
WORK=

while [ $# -gt 0 ]; do
	case "$1" in
	--src) SRC=$2; shift 2 ;;
	--work) WORK=$2; shift 2 ;;
	*) echo "usage: $0 [--src DIR] [--work DIR]" >&2; exit 2 ;;
	esac
done
for tool in gcc cmake valgrind callgrind_annotate; do
	command -v "$tool" >/dev/null || { echo "$0: $tool is needed" >&2; exit 2; }
done
[ -n "$WORK" ] || WORK=$(mktemp -d "${TMPDIR:-/tmp}/rdma-core-anchor.XXXXXX")
mkdir -p "$WORK"
if [ -z "$SRC" ]; then
	command -v curl >/dev/null || { echo "$0: curl is needed (or --src DIR)" >&2; exit 2; }
	echo "downloading rdma-core $VERSION" >&2
	curl -fsSL -o "$WORK/rdma-core-$VERSION.tar.gz" "$URL"
	sha256sum "$WORK/rdma-core-$VERSION.tar.gz" >&2
	tar -C "$WORK" -xzf "$WORK/rdma-core-$VERSION.tar.gz"
	SRC="$WORK/rdma-core-$VERSION"
fi
[ -f "$SRC/providers/mlx4/qp.c" ] || { echo "$0: $SRC is not an rdma-core tree" >&2; exit 2; }
grep -q "PACKAGE_VERSION \"$VERSION\"" "$SRC/CMakeLists.txt" ||
	echo "$0: warning: $SRC is not rdma-core $VERSION; figures may differ" >&2

BUILD="$WORK/build"
GEN=
command -v ninja >/dev/null && GEN=-GNinja
# rdma-core's default build type (RelWithDebInfo: -O2 -g), static libraries.
cmake -S "$SRC" -B "$BUILD" $GEN -DENABLE_STATIC=1 -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo >"$WORK/cmake.log" 2>&1 ||
	{ echo "$0: cmake failed, see $WORK/cmake.log" >&2; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >"$WORK/build.log" 2>&1 ||
	{ echo "$0: build failed, see $WORK/build.log" >&2; exit 1; }
gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -include "$BUILD/include/config.h" \
	-I"$BUILD/include" -I"$SRC" -I"$SRC/providers/mlx4" -o "$WORK/harness" "$HERE/harness.c" \
	"$BUILD/lib/statics/libmlx4.a" "$BUILD/lib/statics/libibverbs.a" \
	"$BUILD/util/librdma_util.a" -lnl-route-3 -lnl-3 -lpthread

# Inclusive instructions of a measured wrapper per call.
per_call() { # file function calls
	callgrind_annotate --inclusive=yes --show-percs=no "$1" 2>/dev/null |
		awk -v f=":$2 " -v n="$3" 'index($0, f) { gsub(",", "", $1); printf "%.1f", $1 / n; exit }'
}

LISTS=300
ITERS=1000
valgrind --tool=callgrind --callgrind-out-file="$WORK/bw.out" "$WORK/harness" bw $LISTS >/dev/null 2>&1
valgrind --tool=callgrind --callgrind-out-file="$WORK/ud.out" "$WORK/harness" ud $ITERS >/dev/null 2>&1
post=$(per_call "$WORK/bw.out" m_post_list $LISTS)
poll=$(per_call "$WORK/bw.out" m_poll_list $LISTS)
empty=$(per_call "$WORK/bw.out" m_poll_empty $LISTS)
udpost=$(per_call "$WORK/ud.out" m_ud_post $ITERS)
udsend=$(per_call "$WORK/ud.out" m_ud_poll_send $ITERS)
udrecv=$(per_call "$WORK/ud.out" m_ud_poll_recv $ITERS)
echo "rdma-core $VERSION mlx4 provider, callgrind Ir per call (RelWithDebInfo, -O2)"
echo
echo "bandwidth: RC, lists of 32 64-byte SENDs (one gather entry), one signaled per list"
echo "  ibv_post_send (list of 32)      $post"
echo "  ibv_poll_cq (16), 1 CQE         $poll"
echo "  ibv_poll_cq (16), empty         $empty"
echo "  per message (post + poll) / 32  $(echo "$post $poll" | awk '{ printf "%.2f", ($1 + $2) / 32 }')"
echo
echo "latency: UD, 2-byte inline signaled SEND (BlueFlame), 512-byte slots"
echo "  ibv_post_send                   $udpost"
echo "  ibv_poll_cq (1), send CQE       $udsend"
echo "  ibv_poll_cq (1), receive CQE    $udrecv"
echo "  iteration                       $(echo "$udpost $udsend $udrecv" | awk '{ printf "%.1f", $1 + $2 + $3 }')"
echo
echo "work directory: $WORK"
