#!/bin/bash
# The twelfth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run12.sh a|b
# a: the ready store of `deferred` (src/deferred.c) on the real driver: PyTorch
#    train and train-stream in 3 rounds (train-stream is `deferred` under auto),
#    then test_ready, test_kernel_race, test_stress and test_modes under
#    compute-sanitizer in deferred and auto (each also checks its own results)
# b: scripts/gpu-tests.sh (every test, every sanitizer run, the proofs; each
#    process the sanitizer follows in its own log), then PyTorch train and
#    train-stream in 3 rounds
# c: b's sanitizer runs again, without make check (GPU_TESTS_SKIP_CHECK=1),
#    and PyTorch train-stream in 3 rounds
# d: the sanitizer runs and make check of the tests mended after c, and
#    PyTorch train-stream in 3 rounds
# f: test_ready and test_pools again, under the sanitizer and make check
# e: what the ready store should give back on a miss (PyTorch train-stream,
#    three builds side by side)
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

build() {
    ( mkdir -p build-gpu && cd build-gpu && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        >/dev/null && make -j16 >/dev/null 2>&1 && make -j16 check TESTS= >/dev/null 2>&1 ) || echo "build failed"
}

# PyTorch train-stream, 3 rounds, the caching allocator against cupool.
train_stream() {
    timeout 100 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/torch --workloads train-stream --rounds 3 --timeout 90 \
        --configs caching,nocache-cupool >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"
}

case ${1:-} in
a)
    build
    timeout 260 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/torch --workloads train,train-stream --rounds 3 --timeout 240 \
        --configs caching,nocache-cupool,nocache-cupool-deferred >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"
    for t in test_ready test_kernel_race test_stress test_modes; do
        for m in deferred auto; do
            vars="CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=$m"
            [ $m = auto ] || vars="$vars CUPOOL_FREE=$m"
            ( cd build-gpu && env $vars timeout 150 $SAN --log-file $OUT/r/san-$t-$m.%p.log \
                ../tests/run-test.sh tests/$t >$OUT/r/san-$t-$m.out 2>&1; echo "rc $?" >>$OUT/r/san-$t-$m.out ) &
        done
    done
    wait
    for f in $OUT/r/san-*.out; do
        echo "$(basename $f .out): $(tail -1 $f) $(cat ${f%.out}.*.log | grep -h 'ERROR SUMMARY' | sort | uniq -c | tr '\n' ' ')"
    done
    ;;
b)
    compute-sanitizer --help 2>&1 | grep -A4 -e '--log-file' >$OUT/r/sanitizer-log-file-help.txt
    UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=280 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    timeout 150 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/torch --workloads train,train-stream --rounds 3 --timeout 140 \
        --configs caching,nocache-cupool >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"
    ;;
c)
    # b's sanitizer runs ran out of their time behind make check: again without it
    GPU_TESTS_SKIP_CHECK=1 UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=400 SANITIZER_JOBS=8 \
        sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    train_stream
    ;;
d)
    # the mends after c: test_modes and test_pools no longer read cuMemGetInfo
    # where the sanitizer moves it; a primary context release hands the ready
    # blocks back first (test_ctx_teardown under deferred)
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY="test_modes test_pools test_ready test_ctx_teardown" \
        UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=300 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    ( cd build-gpu && timeout 120 make -j1 -k check CUPOOL_TEST_DRIVER=real \
        TESTS="tests/test_modes tests/test_pools tests/test_ready tests/test_ctx_teardown tests/test_kernel_race" ) >$OUT/r/check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP):' $OUT/r/check.txt | tr '\n' ' ')"
    train_stream
    ;;
f)
    # test_ready reads cuMemGetInfo against the device's own answer (d: the
    # sanitizer moved it between two readings)
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY="test_ready test_pools" \
        UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=200 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    ( cd build-gpu && timeout 60 make -j1 -k check CUPOOL_TEST_DRIVER=real TESTS="tests/test_ready tests/test_pools" ) >$OUT/r/check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP):' $OUT/r/check.txt | tr '\n' ' ')"
    ;;
e)
    # PyTorch train-stream (deferred under auto) with three policies for a
    # miss of the ready store: 0 nothing, 1 the oldest ready blocks go back
    # to the pool (at least the bytes asked for), 2 the oldest ready block
    # at least as large as a request of 1 MiB or more goes back
    # (ran at 554172e: a644481 removed the READY_EVICT_ON_MISS switch again)
    for v in 0 1 2; do
        ( mkdir -p build-e$v && cd build-e$v && ../configure -q CPPFLAGS=-DREADY_EVICT_ON_MISS=$v \
            --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda >/dev/null && make -j16 >/dev/null 2>&1 ) &
    done
    wait
    for v in 0 1 2; do
        timeout 150 python3 bench/torch_bench.py --cupool build-e$v/scripts/cupool --library build-e$v/.libs/libcupool.so \
            --out $OUT/r/torch-e$v --workloads train-stream --rounds 3 --timeout 140 \
            --configs caching,nocache-cupool >$OUT/r/torch-e$v.txt 2>&1
        echo "variant $v rc $?"; grep -A5 "^config" $OUT/r/torch-e$v.txt
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUPOOL_STATS=1 build-e$v/scripts/cupool --library build-e$v/.libs/libcupool.so \
            python3 bench/torch_bench.py --worker nocache-cupool --workload train-stream 2>&1 | grep -E "ready block|pooled alloc|peak" | head -5
    done
    ;;
*) echo "usage: OUT=DIR bash docs/examples/run12.sh a|b|c|d|e|f" >&2; exit 2 ;;
esac
(cd $OUT/r && tar czf ../r.tgz --exclude='*.so*' --exclude=logs .)
