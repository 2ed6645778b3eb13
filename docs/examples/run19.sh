#!/bin/bash
# The nineteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run19.sh b|s|t|r|v
# The library as the eighteenth session left it (the ordered store, the
# counted legacy-stream calls), whose last changes had run on the simulator
# only, plus CUPOOL_STATS's count of `deferred` frees that waited for the GPU.
# b: the whole of scripts/gpu-tests.sh (make check on the real driver, every
#    test program under compute-sanitizer in every free mode, the
#    cudart/PyTorch/CuPy proofs)
# s: scripts/bench-gpu.sh without PyTorch (alloc, loop, memset, CuPy)
# t: scripts/bench-gpu.sh's PyTorch stage alone, into the same results
#    directory as s when the calls share a machine; then train-stream under
#    cupool's defaults with CUPOOL_STATS=1, three processes, for what makes
#    its step time move from one process to the next
# r: the store making room in the pool before it grows (146431a; taken out
#    after this call), against the library of calls b/s/t (its source carried in
#    .old, built in .old/build-gpu): PyTorch infer (peak memory, 60 churning
#    shapes), train and train-stream (time), the caching allocator beside
#    them, 2 interleaved rounds, one process each; infer under `deferred`
#    forced, once each; test_ready (its room cases) on the real driver.
#    Before the call, here: echo /.old/ >> .git/info/exclude; mkdir .old;
#    git archive a9d6ade | tar -x -C .old; after autoreconf -fi, cp -r
#    configure Makefile.in aclocal.m4 build-aux m4 config.h.in .old/; and
#    name .old in the call's carry
# v: the library as the session ends (a9d6ade's store, the largest size
#    `ordered` keeps read from cupool_hot): make check on the real driver of
#    the store's tests, and the allocation pair of `ordered`, `auto` and
#    `sync` against their bare calls at 1 MiB and 1 GiB, 1 and 16 threads
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
b)
    CUPOOL_BUILD=build-gpu UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=${TESTS_BUDGET:-420} JOBS=8 SANITIZER_JOBS=12 \
        timeout 540 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; grep -E "^=== |^# (TOTAL|PASS|FAIL|SKIP)" $OUT/r/gpu-tests.txt | head -20
    grep -vE " PASS( |$)" $OUT/r/tests/summary.txt | head -60
    grep -c " PASS" $OUT/r/tests/summary.txt
    ;;
s)
    BENCH_ONLY="alloc loop memset cupy" BENCH_BUDGET=${BENCH_BUDGET:-300} timeout 560 sh scripts/bench-gpu.sh $OUT/r/s >$OUT/r/s.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/s.txt | tail -40
    rm -rf $OUT/r/s/logs
    ;;
t)
    BENCH_ONLY=torch BENCH_BUDGET=${BENCH_BUDGET:-470} timeout 500 sh scripts/bench-gpu.sh $OUT/r/t >$OUT/r/t.txt 2>&1
    echo "bench rc $?"; sed -n '/=== torch/,$p' $OUT/r/t.txt | grep -v "^  rc=\|^+ " | tail -60
    rm -rf $OUT/r/t/logs
    ls build-gpu/.libs/libcupool.so >/dev/null 2>&1 || build build-gpu
    for i in 1 2 3; do
        CUPOOL_STATS=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 40 build-gpu/scripts/cupool \
            --library build-gpu/.libs/libcupool.so -- python3 bench/torch_bench.py --worker nocache-cupool \
            --workload train-stream >$OUT/r/stream$i.json 2>$OUT/r/stream-stats$i.txt
        tail -1 $OUT/r/stream$i.json | cut -c1-240
        grep -E "free mode|pooled allocations|peak in use|ready block|waited|time in cupool" $OUT/r/stream-stats$i.txt
    done
    ;;
r)
    build_old_and_new
    torch_rounds 2 "infer train train-stream" caching old new | tee $OUT/r/room.txt
    for v in old new; do torch_once infer $v-deferred CUPOOL_FREE=deferred; done | tee -a $OUT/r/room.txt
    torch_once infer new-stats CUPOOL_STATS=1
    grep -h "make room\|served by a ready" $OUT/r/torch.err | tail -3
    real_check 120 1 test_ready
    grep -E "room|FAILED" build-gpu/tests/test_ready.log | head -12
    ;;
v)
    build build-gpu
    real_check 150 3 test_ready test_modes test_kernel_race test_capture test_stress test_bad_input
    for free in ordered auto sync; do
        bare=bare-ordered; [ $free = sync ] && bare=bare-sync
        timeout 60 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --free $free -- \
            build-gpu/bench/alloc_bench -m api -p $bare -s 1M,1G -t 1,16 -r 5 -T 0.25 \
            -l cupool-$free -o $OUT/r/pair.csv >/dev/null 2>>$OUT/r/pair.err
    done
    pair_report $OUT/r/pair.csv
    ;;
*) echo "usage: OUT=DIR bash $0 b|s|t|r|v" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
