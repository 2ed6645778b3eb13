#!/bin/bash
# The eleventh session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run11.sh a|b
# a: scripts/gpu-tests.sh (the tests on the real driver, the sanitizer runs,
#    the cudart/PyTorch/CuPy proofs) on the fast paths, then alloc_bench.py at
#    one thread in 9 rounds (the pair ratio the fast paths are for)
# b: scripts/bench-gpu.sh, every stage (docs/BENCHMARKS.md is made from it)
# c: the noisy stages of b again with more rounds: PyTorch train and
#    train-stream (3 rounds, the configurations the targets need), whether
#    PyTorch's default-stream step leaves `ordered` under auto, and
#    alloc_bench.py at one thread in 9 rounds
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
a)
    UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=330 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    timeout 150 python3 bench/alloc_bench.py --bin build-gpu/bench/alloc_bench --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/alloc --threads 1 --rounds 9 >$OUT/r/alloc.txt 2>&1
    echo "alloc rc $?"
    ;;
b)
    UTHASH_DIR=$R/.vendor/uthash BENCH_BUDGET=${BENCH_BUDGET:-500} sh scripts/bench-gpu.sh $OUT/r/bench >$OUT/r/bench-gpu.txt 2>&1
    echo "bench-gpu rc $?"
    ;;
c)
    ( mkdir -p build-gpu && cd build-gpu && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        >/dev/null && make -j16 >/dev/null 2>&1 ) || echo "build failed"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUPOOL_VERBOSE=1 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        python3 bench/torch_bench.py --worker nocache-cupool --workload train >$OUT/r/torch-mode.txt 2>&1
    echo "torch mode check rc $?: $(grep -c 'free mode' $OUT/r/torch-mode.txt) mode switches"
    timeout 260 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/torch --workloads train,train-stream --rounds 3 --timeout 240 \
        --configs caching,nocache-cupool,nocache-cupool-ordered,nocache-cupool-deferred >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"
    timeout 150 python3 bench/alloc_bench.py --bin build-gpu/bench/alloc_bench --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/alloc --threads 1 --rounds 9 >$OUT/r/alloc.txt 2>&1
    echo "alloc rc $?"
    ;;
*) echo "usage: OUT=DIR bash docs/examples/run11.sh a|b|c" >&2; exit 2 ;;
esac
(cd $OUT/r && tar czf ../r.tgz --exclude='*.so*' --exclude=logs .)
