#!/bin/bash
# The tenth session's GPU calls (run10-*.txt), one subcommand each:
#   OUT=DIR bash docs/examples/run10.sh a|b|c
# from the repository root on a GPU machine, after autoreconf -fi, with uthash under .vendor/uthash.
#   a  scripts/gpu-tests.sh at the session's start (9a0a881); which profilers the machine has
#   b  sanitizer-threads-probe.c variants 1-4 (4 threads, 3 runs each; 1 thread, 2 runs each);
#      test_pools, test_ptds, test_fork and test_log again under the sanitizer
#   c  scripts/bench-gpu.sh (docs/BENCHMARKS.md); then probe variants 5 and 6 (4 threads, 3 runs each)
#      and test_pools in every mode under the sanitizer, all at once
#   d  the free mode `auto` picks in a CuPy program (CUPOOL_VERBOSE); cupy_bench.py, 4 rounds;
#      alloc_bench.py at 1 thread, 9 rounds
#   e  ctx-query-probe.c: what the two cuCtxGetCurrent calls of a cupool pair cost, 3 processes x 2 sizes
. "$(dirname "$0")/gpu-session.sh"

sanitize_test() { # TEST MODE RUN: one test program under the sanitizer, as gpu-tests.sh runs it
    local n=$(basename $1).$2.$3 modes=$2 free="CUPOOL_FREE=$2"
    [ $2 = auto ] && modes=auto,native free=X=1
    env $free CUPOOL_BUILDDIR=$R/build-gpu CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=$modes \
        $SAN --log-file $OUT/r/$n.log tests/run-test.sh build-gpu/tests/$1 >$OUT/r/$n.out 2>&1
    echo "$n rc $? $(grep -h 'ERROR SUMMARY' $OUT/r/$n.log | head -1)"
}

case ${1:-} in
a)
    { which perf valgrind gdb; lscpu | head -20; } >$OUT/r/tools.txt 2>&1
    UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=330 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    ;;
b)
    ( mkdir -p build-gpu && cd build-gpu && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        >/dev/null && make -j16 >/dev/null 2>&1 && make -j16 check TESTS= >/dev/null 2>&1 ) || echo "build failed"
    gcc -O2 -I/usr/local/cuda/include -o $OUT/stp docs/examples/sanitizer-threads-probe.c \
        -L/usr/local/nvidia/lib64 -lcuda -lpthread || exit 1
    jobs=()
    for v in 1 2 3 4; do for k in 1 2 3; do jobs+=("$v 4 $k"); done; done
    for v in 1 2 3 4; do for k in 1 2; do jobs+=("$v 1 $k"); done; done
    for j in "${jobs[@]}"; do
        read -r v t k <<<"$j"
        ( $SAN --log-file $OUT/r/stp.$v.$t.$k.log $OUT/stp $v $t >$OUT/r/stp.$v.$t.$k.out 2>&1
          echo "probe variant $v, $t threads, run $k: rc $? $(tr '\n' ' ' <$OUT/r/stp.$v.$t.$k.out)$(grep -h 'ERROR SUMMARY' $OUT/r/stp.$v.$t.$k.log)" ) &
        [ $(jobs -r | wc -l) -ge 8 ] && wait -n
    done
    wait
    for j in "test_pools auto" "test_pools ordered" "test_pools deferred" "test_pools sync" \
             "test_ptds auto" "test_ptds ordered" "test_fork sync" "test_fork auto" "log/test_log sync"; do
        for k in 1 2; do
            [ $k = 2 ] && [ "${j%% *}" = test_pools ] && continue
            sanitize_test $j $k &
            [ $(jobs -r | wc -l) -ge 8 ] && wait -n
        done
    done
    wait
    ;;
c)
    UTHASH_DIR=$R/.vendor/uthash BENCH_BUDGET=${BENCH_BUDGET:-500} sh scripts/bench-gpu.sh $OUT/r/bench >$OUT/r/bench-gpu.txt 2>&1
    echo "bench-gpu rc $?"
    make -C build-gpu -j16 check TESTS= >/dev/null 2>&1
    gcc -O2 -I/usr/local/cuda/include -o $OUT/stp docs/examples/sanitizer-threads-probe.c \
        -L/usr/local/nvidia/lib64 -lcuda -lpthread || exit 1
    for v in 5 6; do for k in 1 2 3; do
        ( $SAN --log-file $OUT/r/stp.$v.4.$k.log $OUT/stp $v 4 >$OUT/r/stp.$v.4.$k.out 2>&1
          echo "probe variant $v, 4 threads, run $k: rc $? $(tr '\n' ' ' <$OUT/r/stp.$v.4.$k.out)$(grep -h 'ERROR SUMMARY' $OUT/r/stp.$v.4.$k.log)" ) &
    done; done
    for m in auto ordered deferred sync; do sanitize_test test_pools $m 2 & done
    wait
    ;;
d)
    ( mkdir -p build-gpu && cd build-gpu && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        >/dev/null && make -j16 >/dev/null 2>&1 ) || echo "build failed"
    CUPOOL_VERBOSE=1 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so python3 -c \
        "import cupy; a = cupy.arange(1 << 20, dtype=cupy.float32); print(float((a @ a) + a.sum()))" >$OUT/r/cupy-mode.txt 2>&1
    echo "cupy mode check rc $?"
    timeout 200 python3 bench/cupy_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/cupy --configs pool,nopool-cupool,nopool-cupool-ordered --rounds 4 >$OUT/r/cupy.txt 2>&1
    echo "cupy rc $?"
    timeout 150 python3 bench/alloc_bench.py --bin build-gpu/bench/alloc_bench --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/alloc --threads 1 --rounds 9 >$OUT/r/alloc.txt 2>&1
    echo "alloc rc $?"
    ;;
e)
    gcc -O2 -I/usr/local/cuda/include -o $OUT/cqp docs/examples/ctx-query-probe.c -L/usr/local/nvidia/lib64 -lcuda || exit 1
    for k in 1 2 3; do for size in 256 1048576; do $OUT/cqp $size 9; done; done | tee $OUT/r/ctx-query.txt
    ;;
*) echo "usage: OUT=DIR bash docs/examples/run10.sh a|b|c|d|e" >&2; exit 2 ;;
esac
# Few files come back from the GPU machine: one archive.
(cd $OUT/r && tar czf ../r.tgz --exclude='*.so*' --exclude=logs .)
