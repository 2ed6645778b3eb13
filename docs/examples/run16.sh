#!/bin/bash
# The sixteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run16.sh a|b
# a: the library at the session's start (8211ba9; its last four commits never
#    ran on a GPU): the whole of scripts/gpu-tests.sh (make check on the real
#    driver, every test program under compute-sanitizer in every free mode,
#    the cudart/PyTorch/CuPy proofs), then the torch training loop with 100
#    timed steps after 5 warm-up ones, caching against nocache-cupool, two
#    rounds, to see whether the slow steps of nocache-cupool come early
#    (the pools still growing) or anywhere
# b: the full scripts/bench-gpu.sh, for docs/BENCHMARKS.md (copy
#    $OUT/r/bench to docs/results and regenerate with bench/make_report.py)
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
a)
    CUPOOL_BUILD=build-gpu UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=${TESTS_BUDGET:-380} JOBS=8 SANITIZER_JOBS=12 \
        timeout 450 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; tail -45 $OUT/r/gpu-tests.txt
    timeout 120 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/torch100 --configs caching,nocache-cupool \
        --workloads train --steps 100 --rounds 2 >$OUT/r/torch100.txt 2>&1
    echo "torch rc $?"
    ;;
b)
    timeout 590 sh scripts/bench-gpu.sh $OUT/r/bench >$OUT/r/bench.txt 2>&1
    echo "bench rc $?"; grep -E "met|not met" $OUT/r/bench.txt | tail -30
    rm -rf $OUT/r/bench/logs
    ;;
*) echo "usage: OUT=DIR bash $0 a|b" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
