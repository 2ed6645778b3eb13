#!/bin/bash
# The twentieth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run20.sh x|...
# x: an `ordered` miss of 1 MiB or more first hands the store's oldest
#    blocks back (as many bytes as it asks), against the library the
#    nineteenth session left (8d54f40, its source carried in .old, built in
#    .old/build-gpu): PyTorch infer (peak memory, 60 churning shapes), train
#    and train-stream (time), the caching allocator beside them, 2
#    interleaved rounds, one process each, and infer once with
#    CUPOOL_STATS; the allocation pair of `ordered`, `auto` and `sync`
#    against their bare calls at 256 MiB then 1 GiB, one thread, two
#    processes per library and mode; test_ready on the real driver.
#    Before the call, here: echo /.old/ >> .git/info/exclude; mkdir .old;
#    git archive 8d54f40 | tar -x -C .old; after autoreconf -fi, cp -r
#    configure Makefile.in aclocal.m4 build-aux m4 config.h.in .old/; and
#    name .old in the call's carry
# y: the library of x with the hand-back's rule picked by two variables
#    read only in this build (83542fe; z: 2bf9a65; both taken out after the
#    call): CUPOOL_X_MISS=0 no hand-back, CUPOOL_X_STALE=K only blocks
#    kept K or more `ordered` frees ago; and CUPOOL_ORDERED_READY=64M
#    without it.  PyTorch infer and train, 2 interleaved rounds, one
#    process each, the caching allocator beside them.
# z: as y, with CUPOOL_X_MISS=2 handing back only the oldest block the
#    miss fits in (one block, among the store's 256 oldest), and the
#    hand-back of y's `miss` with CUPOOL_ORDERED_READY=128M and 64M.
# t: the session's library (86e1639: the hand-back, a 64 MiB store):
#    scripts/bench-gpu.sh's PyTorch stage, then make check on the real
#    driver of test_ready, test_modes and test_kernel_race
# s: scripts/bench-gpu.sh without PyTorch (alloc, loop, memset, CuPy),
#    then test_ready under compute-sanitizer in every free mode
# d: PyTorch train-stream (where `auto` is `deferred`), 2 interleaved
#    rounds, one process each, the caching allocator beside them:
#    CUPOOL_DEFERRED_READY 1G (the default) and 256M, each with and
#    without the store's hand-back on a large miss in `deferred` too
#    (CUPOOL_X_DMISS, read only in this build, 53a83a1, taken out after
#    the call)
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
x)
    build_old_and_new
    torch_rounds 2 "infer train train-stream" caching old new | tee $OUT/r/torch.txt
    torch_once infer new-stats CUPOOL_STATS=1
    grep -h "made room\|served by a ready" $OUT/r/torch.err | tail -3
    pair 256M,1G 1 2 .old/build-gpu build-gpu | tee $OUT/r/pair.txt
    real_check 120 1 test_ready
    grep -E "miss|FAILED" build-gpu/tests/test_ready.log | head -12
    ;;
y | z | d)
    build build-gpu
    variant() { # WORKLOAD NAME
        case $2 in
        caching) torch_once $1 caching ;;
        nomiss) torch_once $1 nomiss CUPOOL_X_MISS=0 ;;
        miss) torch_once $1 miss ;;
        stale256) torch_once $1 stale256 CUPOOL_X_STALE=256 ;;
        stale1k) torch_once $1 stale1k CUPOOL_X_STALE=1024 ;;
        cap64) torch_once $1 cap64 CUPOOL_X_MISS=0 CUPOOL_ORDERED_READY=64M ;;
        fits) torch_once $1 fits CUPOOL_X_MISS=2 ;;
        miss128) torch_once $1 miss128 CUPOOL_ORDERED_READY=128M ;;
        miss64) torch_once $1 miss64 CUPOOL_ORDERED_READY=64M ;;
        d1g) torch_once $1 d1g ;;
        d256) torch_once $1 d256 CUPOOL_DEFERRED_READY=256M ;;
        d1g-miss) torch_once $1 d1g-miss CUPOOL_X_DMISS=1 ;;
        d256-miss) torch_once $1 d256-miss CUPOOL_X_DMISS=1 CUPOOL_DEFERRED_READY=256M ;;
        esac
    }
    variants="caching nomiss miss stale256 stale1k cap64"
    workloads="infer train"
    [ $1 = z ] && variants="caching fits miss128 miss64"
    [ $1 = d ] && variants="caching d1g d256 d1g-miss d256-miss" && workloads=train-stream
    for round in 1 2; do
        for wl in $workloads; do
            for v in $variants; do variant $wl $v; done
        done
    done | tee $OUT/r/variants.txt
    [ $1 = d ] && torch_once train-stream d256-miss-stats CUPOOL_X_DMISS=1 CUPOOL_DEFERRED_READY=256M CUPOOL_STATS=1 &&
        grep -h "made room\|served by a ready\|waited" $OUT/r/torch.err | tail -3
    [ $1 != y ] && { tar -C $OUT -czf $OUT/r.tgz r; exit 0; }
    torch_once train stale256-stats CUPOOL_X_STALE=256 CUPOOL_STATS=1
    torch_once infer stale256-stats CUPOOL_X_STALE=256 CUPOOL_STATS=1
    grep -h "made room\|served by a ready" $OUT/r/torch.err | tail -4
    ;;
t)
    BENCH_ONLY=torch BENCH_BUDGET=${BENCH_BUDGET:-380} timeout 430 sh scripts/bench-gpu.sh $OUT/r/t >$OUT/r/t.txt 2>&1
    echo "bench rc $?"; sed -n '/=== torch/,$p' $OUT/r/t.txt | grep -v "^  rc=\|^+ " | tail -45
    rm -rf $OUT/r/t/logs
    ls build-gpu/.libs/libcupool.so >/dev/null 2>&1 || build build-gpu
    real_check 120 3 test_ready test_modes test_kernel_race
    grep -E "miss|FAILED" build-gpu/tests/test_ready.log | head -6
    ;;
s)
    BENCH_ONLY="alloc loop memset cupy" BENCH_BUDGET=${BENCH_BUDGET:-230} timeout 400 sh scripts/bench-gpu.sh $OUT/r/s >$OUT/r/s.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/s.txt | tail -40
    sed -n '/five runs/,/^===/p' $OUT/r/s.txt | head -6
    rm -rf $OUT/r/s/logs
    ls build-gpu/.libs/libcupool.so >/dev/null 2>&1 || build build-gpu
    sanitize 150 8 test_ready
    ;;
*) echo "usage: OUT=DIR bash $0 x|y|z|t|s|d" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
