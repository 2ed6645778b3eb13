#!/bin/bash
# The fifteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run15.sh a|b|c|alloc
# a: the fast paths counting in the thread's own line (7cc3fd7) against the
#    build of 89f7201 (the fourteenth session's end, from a tar file of its
#    tree in .vendor with the generated autotools files: the GPU machine has
#    no libtoolize): alloc_bench -p of cupool ordered and sync against their
#    bare calls, 256 B, 1 MiB and 1 GiB, one thread, 5 rounds, the two
#    builds' processes interleaved; make check on the real driver of
#    test_smoke (its new cases), test_queue, test_stress, test_modes,
#    test_ready and test_kernel_race; test_smoke, test_queue and test_stress
#    under compute-sanitizer with the queue on (the fourteenth session's
#    commits after its call e, never run on a GPU, are in this build too)
#    (OLD=COMMIT: the old build from .vendor/old-COMMIT.tgz instead;
#    AB_MODES, AB_ROUNDS: the modes and rounds; SKIP_AB=1: no A/B;
#    AB_ONLY=1: no tests)
# b: the full scripts/bench-gpu.sh, for docs/BENCHMARKS.md (copy
#    $OUT/r/bench to docs/results and regenerate with bench/make_report.py);
#    run at 5b24632 (library 7cc3fd7) and again after c, at the final library
# c: the fast paths serving sync (9fde04a): make check on the real driver of
#    the tests of modes, statistics, kernel races, threads, capture,
#    readiness, pools and fork; test_modes, test_kernel_race, test_stress
#    and test_smoke under compute-sanitizer in every free mode
# alloc: the allocation stage of scripts/bench-gpu.sh alone
# The session's seven calls, in order: a (the A/B; its tests did not run:
# real_check and sanitize were not yet in gpu-session.sh); a with
# AB_ROUNDS=0 SKIP_AB=1 (the tests); b at 5b24632; c at 9fde04a's library;
# b at that library; alloc; a with OLD=7cc3fd7 AB_MODES=ordered AB_ROUNDS=4
# AB_ONLY=1 (this session's two libraries against each other).
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
a)
    mkdir -p old && tar -xzf .vendor/old-${OLD:-89f7201}.tgz -C old
    build build-gpu & (cd old && build build-gpu) & wait
    for round in $(seq 1 ${AB_ROUNDS:-5}); do
        for b in old/build-gpu build-gpu; do
            for free in ${AB_MODES:-ordered sync}; do
                timeout 120 $b/scripts/cupool --library $b/.libs/libcupool.so --free $free -- \
                    build-gpu/bench/alloc_bench -m api -p bare-$free -s 256,1M,1G -t 1 -r 3 -T 0.25 \
                    -l ${b%%/*}-$free -o $OUT/r/ab-$round.csv >/dev/null 2>>$OUT/r/ab.err
            done
        done
    done
    [ -n "${SKIP_AB:-}" ] || python3 docs/examples/run15-ab.py $OUT/r/ab-*.csv | tee $OUT/r/ab.txt
    [ -z "${AB_ONLY:-}" ] || { tar -C $OUT -czf $OUT/r.tgz r; exit 0; }
    real_check 200 4 test_smoke test_queue test_stress test_modes test_ready test_kernel_race
    cp build-gpu/tests/test_smoke.log $OUT/r/ 2>/dev/null
    CUPOOL_DRIVER_QUEUE=on sanitize 150 12 test_smoke test_queue test_stress
    ;;
b)
    timeout 590 sh scripts/bench-gpu.sh $OUT/r/bench >$OUT/r/bench.txt 2>&1
    echo "bench rc $?"; grep -E "met|not met" $OUT/r/bench.txt | tail -30
    rm -rf $OUT/r/bench/logs
    ;;
alloc)
    # The allocation stage alone, again (it ran after b at the final library)
    BENCH_ONLY=alloc BENCH_BUDGET=200 timeout 250 sh scripts/bench-gpu.sh $OUT/r/alloc2 >$OUT/r/alloc2.txt 2>&1
    rm -rf $OUT/r/alloc2/logs
    sed -n '/alloc_bench: microseconds/,/wrote/p' $OUT/r/alloc2/alloc.txt
    ;;
c)
    build build-gpu
    real_check 240 4 test_modes test_smoke test_kernel_race test_stress test_queue test_capture test_ready test_pools test_fork
    sanitize 240 12 test_modes test_kernel_race test_stress test_smoke
    ;;
*) echo "usage: OUT=DIR bash $0 a|b|c|alloc" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
