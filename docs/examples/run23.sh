#!/bin/bash
# The twenty-third session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run23.sh g|c|b|s|t|x|y
# g: the twenty-second session's planned call (run22.sh g: the driver-facing
#    fixes of that session on the real driver), plus the tests this session
#    changed for the simulator's race checker: test_kernel_race, and
#    test_modes and test_stress, which now give a forced `ordered`
#    blocking streams in place of non-blocking ones; then compute-sanitizer
#    in every free mode on test_edges, test_bad_input, test_memset_api and
#    test_modes (whose `ordered` run drew 64 reports before).
# c: the correctness part of s alone; b: its benchmark part alone.
# x: CuPy on its default stream, its own pool against cupool (auto and
#    sync) with this library and with 11dad4a's (carried in .old: the
#    twenty-first session's first call measured CuPy at 0.832x there; call
#    s read 2.118x), two interleaved rounds, one process each; then PyTorch
#    train once beside the caching allocator.
# y: x without the old library (three rounds of CuPy's pool and cupool).
# s, t: as run20.sh s and t (the benchmarks without PyTorch; the PyTorch
#    stage and make check on the real driver), with this session's library
#    (s leaves out run20's compute-sanitizer run of test_ready, for the
#    session's device time); s first runs test_edges and
#    test_bad_input on the real driver again, after the fixes call g led to
#    (a per-thread-stream capture that cupool's cuStreamGetCtx of the legacy
#    stream invalidated; cuGetProcAddress with a NULL name, which crashes
#    the driver itself, left out of the table there), and test_kernel_race,
#    which now also destroys a blocking kernel stream right after the launch
#    (does the legacy stream still wait for its work, as `ordered` assumes?),
#    then test_oom alone (the program's own cuMemAllocAsync after cupool's
#    pools filled the device).
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
g)
    build build-gpu
    real_check 300 2 test_edges test_bad_input test_capture test_ready memset/test_memset_api test_kernel_race \
        test_modes test_stress
    grep -E "while capturing|killed|same results|FAILED" build-gpu/tests/test_edges.log \
        build-gpu/tests/test_bad_input.log | head -30
    grep -E "corrupted|FAILED" build-gpu/tests/test_kernel_race.log | head -30
    sanitize 200 4 test_edges test_bad_input test_memset_api test_modes
    ;;
c | s)
    build build-gpu
    real_check 150 3 test_edges test_bad_input test_kernel_race
    grep -E "FAILED|differ" build-gpu/tests/test_edges.log build-gpu/tests/test_bad_input.log | head
    grep -E "destroyed|FAILED" build-gpu/tests/test_kernel_race.log | head -20
    cp build-gpu/tests/test_bad_input.log build-gpu/tests/test_kernel_race.log build-gpu/tests/test_edges.log $OUT/r/ 2>/dev/null
    ( cd build-gpu && timeout 150 make check CUPOOL_TEST_DRIVER=real TESTS=tests/test_oom ) >$OUT/r/oom.txt 2>&1
    echo "test_oom rc $?"; grep -E "largest|own|blocks of|FAIL|returned" build-gpu/tests/test_oom.log | head
    [ $1 = s ] && bash "$0" b
    ;;
b)
    ls build-gpu/.libs/libcupool.so >/dev/null 2>&1 || build build-gpu
    BENCH_ONLY="alloc loop memset cupy" BENCH_BUDGET=${BENCH_BUDGET:-230} timeout 400 sh scripts/bench-gpu.sh $OUT/r/s >$OUT/r/s.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/s.txt | tail -40
    sed -n '/five runs/,/^===/p' $OUT/r/s.txt | head -6
    rm -rf $OUT/r/s/logs
    ;;
t) exec bash "$(dirname "$0")/run20.sh" t ;;
x)
    build_old_and_new
    for round in 1 2; do
        timeout 60 python3 bench/cupy_bench.py --worker pool --workload default 2>>$OUT/r/cupy.err | tail -1 |
            python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('cupy pool', '%.3f' % r['ms_median'], r['peak_mib'])"
        for lib in build-gpu .old/build-gpu; do
            for free in auto sync; do
                timeout 60 $lib/scripts/cupool --library $lib/.libs/libcupool.so --free $free -- \
                    python3 bench/cupy_bench.py --worker nopool-cupool --workload default 2>>$OUT/r/cupy.err | tail -1 |
                    python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('cupy $lib $free', '%.3f' % r['ms_median'], r['peak_mib'])"
            done
        done
    done | tee $OUT/r/cupy-ab.txt
    torch_rounds 1 "train" caching new | tee $OUT/r/torch.txt
    ;;
y)
    build build-gpu
    for round in 1 2 3; do
        timeout 60 python3 bench/cupy_bench.py --worker pool --workload default 2>>$OUT/r/cupy.err | tail -1 |
            python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('cupy pool', '%.3f' % r['ms_median'], r['peak_mib'])"
        timeout 60 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so -- \
            python3 bench/cupy_bench.py --worker nopool-cupool --workload default 2>>$OUT/r/cupy.err | tail -1 |
            python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('cupy cupool', '%.3f' % r['ms_median'], r['peak_mib'])"
    done | tee $OUT/r/cupy-y.txt
    torch_rounds 1 "train" caching new | tee $OUT/r/torch.txt
    ;;
*) echo "usage: OUT=DIR bash $0 g|c|b|s|t|x|y" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
