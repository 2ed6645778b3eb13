#!/bin/bash
# The thirteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run13.sh a|b|c
# a: ctx-record-probe.c (cost of cuCtxRecordEvent against the fan-in of
#    deferred's fences, what its event covers, and whether compute-sanitizer
#    orders a free after it); make check on the real driver of the tests
#    changed in the twelfth session; test_ready and test_pools under
#    compute-sanitizer in every mode; CUPOOL_STATS under PyTorch train-stream
# b: context-wide fences (cuCtxRecordEvent): what compute-sanitizer sets in
#    its target's environment; make check on the real driver of the tests
#    the fences touch; those tests under compute-sanitizer in deferred and
#    auto (auto must choose the per-stream fences there)
# c: PyTorch train-stream, 3 rounds, with the fences of b: one per free
#    (the default), the fan-in (CUPOOL_DEFERRED_FENCE=streams), and a
#    build whose context fences wait 100 us for company; CUPOOL_STATS of each
#    (ran at 8f97f43; the CONTEXT_FENCE_WAIT_NS switch left the code after it)
# f (prepared, refused: too little device time was left): threads-pair-probe.c (what the pieces of cupool's ordered pair cost at
#    1, 4 and 16 threads, against the bare pool calls in the same process),
#    then alloc_bench.py at 1 MiB with 4 and 16 threads, 5 rounds; then
#    the library's changes after 3750852 (the held blocks' release, a
#    refused cuCtxRecordEvent) on the real driver: make check of test_ready,
#    test_capture and test_modes, test_ready under the sanitizer
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

build() {
    ( mkdir -p build-gpu && cd build-gpu && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        >/dev/null && make -j16 >/dev/null 2>&1 && make -j16 check TESTS= >/dev/null 2>&1 ) || echo "build failed"
}

probe() {
    cc -O2 -I/usr/local/cuda/include -o $OUT/r/ctx-record-probe docs/examples/ctx-record-probe.c -L/usr/local/cuda/lib64/stubs -lcuda || return
    local p=$OUT/r/ctx-record-probe
    { for n in 0 8 128; do timeout 60 $p cost $n; done
      timeout 60 $p cover; echo "cover rc $?"
      for v in free free-host; do
          timeout 120 $SAN $p $v 2>&1 | grep -E "freed|ERROR SUMMARY|Race|race|Invalid" | sort | uniq -c | head
      done
    } >$OUT/r/probe.txt 2>&1
    rm -f $p
}

# PyTorch train-stream, 3 rounds, the caching allocator against cupool.
train_stream() {
    timeout ${1:-100} python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/torch --workloads train-stream --rounds 3 --timeout 90 \
        --configs caching,nocache-cupool >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"; grep -A3 "^config" $OUT/r/torch.txt
}

stats() {
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUPOOL_STATS=1 timeout 60 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        python3 bench/torch_bench.py --worker nocache-cupool --workload train-stream 2>&1 | grep -E "ready block|pooled alloc|peak" | head -5
}

case ${1:-} in
a)
    build
    probe; cat $OUT/r/probe.txt
    ( cd build-gpu && timeout 200 make -j1 -k check CUPOOL_TEST_DRIVER=real \
        TESTS="tests/test_ready tests/test_pools tests/test_modes tests/test_ctx_teardown tests/test_stress tests/test_kernel_race tests/test_origin" ) >$OUT/r/check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP):' $OUT/r/check.txt | tr '\n' ' ')"
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY="test_ready test_pools" \
        UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=150 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; grep -E "^sanitizer:|errors" $OUT/r/gpu-tests.txt | head -20
    stats
    ;;
b)
    build
    compute-sanitizer --print-limit 1 env 2>/dev/null | grep -E "INJECTION|PRELOAD|SANITIZER" | cut -c1-200 >$OUT/r/sanitizer-env.txt
    echo "sanitizer env:"; cat $OUT/r/sanitizer-env.txt
    ( cd build-gpu && timeout 240 make -j1 -k check CUPOOL_TEST_DRIVER=real \
        TESTS="tests/test_ready tests/test_modes tests/test_stress tests/test_kernel_race tests/test_capture tests/test_pools tests/test_fork" ) >$OUT/r/check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP):' $OUT/r/check.txt | tr '\n' ' ')"
    grep -hE "^(mode|fence|capture|captures)" build-gpu/tests/test_ready.log build-gpu/tests/test_modes.log | head -20
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY="test_ready test_pools test_modes test_stress test_kernel_race test_capture" \
        UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=200 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; grep -E "^sanitizer:" $OUT/r/gpu-tests.txt | grep -v " PASS " | head -30
    echo "sanitizer runs passed: $(grep -cE '^sanitizer:.* PASS ' $OUT/r/gpu-tests.txt)"
    ;;
c)
    build
    ( mkdir -p build-w && cd build-w && ../configure -q CPPFLAGS=-DCONTEXT_FENCE_WAIT_NS=100000 \
        --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda >/dev/null && make -j16 >/dev/null 2>&1 )
    for v in context streams wait100us; do
        b=build-gpu; [ $v = wait100us ] && b=build-w
        fence=$v; [ $v = wait100us ] && fence=context
        CUPOOL_DEFERRED_FENCE=$fence timeout 110 python3 bench/torch_bench.py --cupool $b/scripts/cupool --library $b/.libs/libcupool.so \
            --out $OUT/r/torch-$v --workloads train-stream --rounds 3 --timeout 100 \
            --configs caching,nocache-cupool >$OUT/r/torch-$v.txt 2>&1
        echo "== $v rc $?"; grep -A3 "^config" $OUT/r/torch-$v.txt
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUPOOL_STATS=1 CUPOOL_VERBOSE=1 CUPOOL_DEFERRED_FENCE=$fence timeout 60 $b/scripts/cupool --library $b/.libs/libcupool.so \
            python3 bench/torch_bench.py --worker nocache-cupool --workload train-stream 2>&1 | grep -E "ready block|pooled alloc|peak|fences" | head -6
    done
    ;;
f)
    cc -O2 -I/usr/local/cuda/include -o $OUT/r/tp docs/examples/threads-pair-probe.c -L/usr/local/cuda/lib64/stubs -lcuda -lpthread
    timeout 60 $OUT/r/tp | tee $OUT/r/threads-pair-probe.txt; rm -f $OUT/r/tp
    build
    timeout 90 python3 bench/alloc_bench.py --bin build-gpu/bench/alloc_bench --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/alloc --sizes 1M --threads 4,16 --rounds 5 \
        >$OUT/r/alloc.txt 2>&1
    echo "alloc rc $?"; tail -12 $OUT/r/alloc.txt
    ( cd build-gpu && timeout 120 make -j1 -k check CUPOOL_TEST_DRIVER=real \
        TESTS="tests/test_ready tests/test_capture tests/test_modes" ) >$OUT/r/check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP):' $OUT/r/check.txt | tr '\n' ' ')"
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY="test_ready test_capture" \
        UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=120 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; grep -E "^sanitizer:" $OUT/r/gpu-tests.txt
    ;;
*) echo "usage: OUT=DIR bash docs/examples/run13.sh a|b|c|f" >&2; exit 2 ;;
esac
(cd $OUT/r && tar czf ../r.tgz --exclude='*.so*' --exclude=logs .)
