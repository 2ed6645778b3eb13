#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/overhead.sh [LIBCUPOOL.so ...]: cupool's own cost per cuMemAlloc +
# cuMemFree pair, without a GPU: the pair through cupool against the bare
# pool calls, both on a null driver (bench/null_driver.c, bench/overhead.c).
# With more than one library the runs alternate, process by process, for an
# A/B comparison of two builds.  Default: .libs/libcupool.so of the build
# directory it is run from.
#
# Prints, per library:
#   - ns a pair with the driver doing nothing ("warm": cupool's instructions)
#     and with the driver evicting the L1 caches before each of cupool's
#     calls ("evicted": every line cupool touches is a miss, as on the GPU
#     machine in the worst case); the median of 41 rounds, one line per
#     process (OVERHEAD_PROCESSES, default 4)
#   - the same warm, with OVERHEAD_THREADS threads at once (default 2; 1
#     skips it): the null driver's pool hands the block one thread freed to
#     the next, as on the GPU machine between the threads of alloc_bench;
#     since the driver queue (src/engine/queue.c) this line mostly measures the
#     queue's hand-off between the threads, which on the null driver, whose
#     calls cost nothing, saves nothing (README, "Threads"); without the
#     queue (CUPOOL_DRIVER_QUEUE=off), its control, what any work between
#     two calls on the contended pool lock costs, is bench/overhead.c's
#     --spin (see its opening comment)
#   - with valgrind installed: instructions, instruction-cache lines and
#     data-cache lines a pair that cupool's own code costs in the evicted
#     case (cachegrind; exact, unlike the times on a shared machine)
# Environment: CUPOOL_FREE (default ordered), CUDA_HOME (headers, default
# /usr/local/cuda), CC, OVERHEAD_PROCESSES, OVERHEAD_THREADS,
# OVERHEAD_CACHEGRIND (0: skip it).
# These are figures of the model, for comparing builds; the GPU figures are
# bench/alloc_bench.py's.  In `ordered` with its store (the default) cupool
# serves the loop's pairs from the store, one event record a pair instead
# of the two pool calls: the times then read cupool's pair against the bare
# pool pair (below zero when evicted: one driver call instead of two), and
# cachegrind cupool's own code; CUPOOL_ORDERED_READY=0 measures the path of
# the pool calls.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-cc}
processes=${OVERHEAD_PROCESSES:-4}
threads=${OVERHEAD_THREADS:-2}
mode=${CUPOOL_FREE:-ordered}
[ $# -gt 0 ] || set -- .libs/libcupool.so
for lib in "$@"; do
    [ -f "$lib" ] || { echo "overhead.sh: no such library: $lib" >&2; exit 2; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$cc -O2 -fPIC -shared -fvisibility=hidden -I"$cuda/include" -Wl,-soname,libcuda.so.1 \
    -o "$tmp/libcuda.so.1" "$src/bench/null_driver.c"
$cc -O2 -I"$cuda/include" -I"$src/include" -o "$tmp/overhead" "$src/bench/overhead.c" -L"$tmp" -l:libcuda.so.1 -ldl -lpthread
# The null driver, for the program and for cupool's dlopen alike.
LD_LIBRARY_PATH=$tmp
export LD_LIBRARY_PATH

for evict in 0 1 threads; do
    case $evict in
    0) what=warm ;;
    1) what=evicted ;;
    *) [ "$threads" -gt 1 ] || continue; what="warm x$threads threads" ;;
    esac
    k=1
    while [ $k -le "$processes" ]; do
        for lib in "$@"; do
            printf '%-8s %s: ' "$what" "$lib"
            if [ $evict = threads ]; then
                NULL_DRIVER_EVICT=0 CUPOOL_FREE=$mode LD_PRELOAD=$lib "$tmp/overhead" --threads "$threads" 10000 21
            else
                NULL_DRIVER_EVICT=$evict CUPOOL_FREE=$mode LD_PRELOAD=$lib "$tmp/overhead"
            fi
        done
        k=$((k + 1))
    done
done

[ "${OVERHEAD_CACHEGRIND:-1}" != 0 ] || exit 0
command -v valgrind >/dev/null 2>&1 || { echo "(no valgrind: no cache-line counts)"; exit 0; }
for lib in "$@"; do
    for n in 2000 4000; do
        NULL_DRIVER_EVICT=1 CUPOOL_FREE=$mode LD_PRELOAD=$lib valgrind --tool=cachegrind --cache-sim=yes \
            --I1=32768,8,64 --D1=32768,8,64 --LL=1048576,16,64 --cachegrind-out-file="$tmp/cg.$n" \
            "$tmp/overhead" --loop $n >/dev/null 2>&1
        cg_annotate "$tmp/cg.$n" >"$tmp/cg.$n.txt" 2>/dev/null
    done
    # cupool's functions: those whose source file is under a src/ directory
    # (the null driver is built from bench/, libc's paths have no src/),
    # a header reached through ../ (src/shims/../engine/engine.h) included.
    python3 - "$tmp/cg.2000.txt" "$tmp/cg.4000.txt" "$lib" <<'PY'
import re, sys
def totals(path):
    t = [0] * 9  # Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
    for line in open(path):
        if not re.search(r'/src/([A-Za-z_.]+/)*[A-Za-z_]+\.[ch]:', line): continue
        nums = [x for x in line.split() if not x.startswith('(') and not x.endswith('%)')]
        vals = []
        for x in nums[:9]:
            if re.fullmatch(r'[\d,]+', x): vals.append(int(x.replace(',', '')))
            elif x == '.': vals.append(0)
            else: break
        if len(vals) == 9: t = [a + b for a, b in zip(t, vals)]
    return t
a, b = totals(sys.argv[1]), totals(sys.argv[2])
d = [(y - x) / 2000 for x, y in zip(a, b)]
print(f"cachegrind {sys.argv[3]}: {d[0]:.0f} instructions, {d[1]:.1f} instruction lines, "
      f"{d[4] + d[7]:.1f} data lines missed a pair")
PY
done
