#!/bin/bash
# The eighteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run18.sh a|c|b|d|e|f|g|s|t
# The library keeps `ordered` frees for the next allocation of their size,
# with one event on the legacy stream between a free and the block's reuse
# (src/deferred.c, "ordered reuse"; CUPOOL_ORDERED_READY, default 1G).
# a: what the store's cap does to PyTorch's train step and peak memory: the
#    caching allocator, and cupool's default settings with
#    CUPOOL_ORDERED_READY=1G, 256M, 64M and 0 (the store off: the library as
#    it was), 2 interleaved rounds; one run with CUPOOL_STATS=1 for the
#    counts; the tests that exercise the store on the real driver; the
#    allocation pair of `ordered` and `auto` against the bare pool calls,
#    1 and 16 threads
# c: captures against `ordered`'s pool calls on another thread (see below)
# b: the whole of scripts/gpu-tests.sh (make check on the real driver, every
#    test program under compute-sanitizer in every free mode, the
#    cudart/PyTorch/CuPy proofs)
# d: the sanitizer alone on the tests of the store (b ran out of time)
# e: test_ready under the sanitizer in `sync`; the alloc and CuPy stages
# f: the alloc and PyTorch stages with the library as it ends the session
# g: PyTorch infer, caching against cupool's default settings (peak memory)
# s: scripts/bench-gpu.sh without PyTorch (alloc, loop, memset, CuPy)
# t: scripts/bench-gpu.sh's PyTorch stage alone
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

torch_once() { # LABEL ROUND [ENV...]: one train process, one line: label round ms peak
    local label=$1 round=$2; shift 2
    if [ $label = caching ]; then
        timeout 90 python3 bench/torch_bench.py --worker caching --workload train
    else
        env "$@" PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 build-gpu/scripts/cupool \
            --library build-gpu/.libs/libcupool.so -- python3 bench/torch_bench.py --worker nocache-cupool --workload train
    fi | python3 -c "import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print('$label', $round, '%.3f' % r['ms_median'], r['peak_mib'])"
}

case ${1:-} in
a)
    build build-gpu
    CUPOOL_STATS=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so -- python3 bench/torch_bench.py --worker nocache-cupool --workload train \
        >$OUT/r/stats.txt 2>&1
    grep "^cupool:" $OUT/r/stats.txt | head -20
    for round in 1 2; do
        for v in caching 1G 256M 64M 0; do
            torch_once $v $round CUPOOL_ORDERED_READY=$v
        done
    done 2>$OUT/r/caps.err | tee $OUT/r/caps.txt
    python3 - $OUT/r/caps.txt <<'PY'
import sys, collections
ms, peak = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, rnd, t, p = line.split()
    ms[v].append(float(t)); peak[v].append(float(p))
ref, refp = min(ms["caching"]), max(peak["caching"])
for v in ms:
    print("%-8s lowest %.3f ms (%.3fx caching)  peak %.0f MiB (%.2fx)  all %s" % (v, min(ms[v]), min(ms[v]) / ref,
          max(peak[v]), max(peak[v]) / refp, " ".join("%.2f" % t for t in ms[v])))
PY
    for free in ordered auto; do
        timeout 60 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --free $free -- \
            build-gpu/bench/alloc_bench -m api -p bare-ordered -s 256,64K,1M,1G -t 1,16 -r 5 -T 0.25 \
            -l cupool-$free -o $OUT/r/pair.csv >/dev/null 2>>$OUT/r/pair.err
    done
    cat $OUT/r/pair.csv | cut -d, -f1-8 | column -t -s, | head -40
    real_check 150 4 test_kernel_race test_ready test_modes test_stress test_bad_input test_capture
    grep -h "corrupted\|FAILED\|failed" build-gpu/tests/test_kernel_race.log | head -30
    ;;
b)
    CUPOOL_BUILD=build-gpu UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=${TESTS_BUDGET:-360} JOBS=8 SANITIZER_JOBS=12 \
        timeout 450 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; tail -45 $OUT/r/gpu-tests.txt
    ;;
c)
    # A capture begun on one thread while another allocates and frees
    # (test_ready's ordered-capture case), 20 processes in each setting:
    # before the counted legacy-stream calls (stream.c), `ordered` with the
    # store off failed 19 of 20 (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), with
    # the store 5 of 20, `deferred` none, `sync` 20 of 20 (its free on the
    # legacy stream after the synchronization)
    build build-gpu
    cd build-gpu
    for v in "CUPOOL_ORDERED_READY=0 CUPOOL_FREE=ordered" CUPOOL_FREE=ordered CUPOOL_FREE=auto CUPOOL_FREE=sync; do
        fails=0
        for i in $(seq 20); do
            env $v CUPOOL_TEST_DRIVER=real timeout 60 sh ../tests/run-test.sh tests/test_ready --case ordered-capture \
                >$OUT/r/capture.txt 2>&1 || { fails=$((fails + 1)); grep -v "^captures" $OUT/r/capture.txt | tail -3; }
        done
        echo "$v: $fails of 20 failed" >>$OUT/r/capture-summary.txt
    done
    cd ..
    cat $OUT/r/capture-summary.txt
    real_check 150 3 test_capture test_ready test_queue
    ;;
d)
    # The sanitizer runs call b had no time left for, of the programs the
    # ordered store and the counted legacy-stream calls touch
    ls build-gpu/.libs/libcupool.so >/dev/null 2>&1 || build build-gpu
    sanitize ${TESTS_BUDGET:-150} 12 test_ready test_modes test_kernel_race test_stress test_capture test_queue
    ;;
e)
    # test_ready under the sanitizer in `sync` (d: its ordered-auto case
    # inherited CUPOOL_FREE=sync; it now names auto), then the allocation
    # pair and CuPy stages of scripts/bench-gpu.sh (loop.cu's programs have
    # non-blocking streams, hence `deferred`, and the memset stage makes no
    # `ordered` free: their figures are session 17's)
    ls build-gpu/.libs/libcupool.so >/dev/null 2>&1 || build build-gpu
    ( cd build-gpu && make -j8 check TESTS= >/dev/null 2>&1 )
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY=test_ready UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=60 SANITIZER_JOBS=4 \
        sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    grep -E "^sanitizer:" $OUT/r/gpu-tests.txt
    BENCH_ONLY="alloc cupy" BENCH_BUDGET=${BENCH_BUDGET:-250} timeout 400 sh scripts/bench-gpu.sh $OUT/r/s >$OUT/r/s.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/s.txt | tail -40
    rm -rf $OUT/r/s/logs
    ;;
f)
    # The library as it ends the session (a block larger than the store goes
    # straight back): the allocation pair and PyTorch stages in one call,
    # what the device time left allowed
    BENCH_ONLY="alloc torch" BENCH_BUDGET=${BENCH_BUDGET:-380} timeout 400 sh scripts/bench-gpu.sh $OUT/r/f >$OUT/r/f.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/f.txt | tail -40
    rm -rf $OUT/r/f/logs
    ;;
g)
    # With the device time left (111 s): PyTorch's infer workload (60
    # churning shapes), where the store's price in memory would show, the
    # caching allocator against cupool's default settings, one process each
    build build-gpu
    for v in caching nocache-cupool; do
        if [ $v = caching ]; then
            timeout 40 python3 bench/torch_bench.py --worker caching --workload infer
        else
            PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 40 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
                -- python3 bench/torch_bench.py --worker nocache-cupool --workload infer
        fi | tail -1 >>$OUT/r/infer.jsonl
        tail -1 $OUT/r/infer.jsonl
    done
    ;;
s)
    BENCH_ONLY="alloc loop memset cupy" BENCH_BUDGET=${BENCH_BUDGET:-300} timeout 590 sh scripts/bench-gpu.sh $OUT/r/s >$OUT/r/s.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/s.txt | tail -40
    rm -rf $OUT/r/s/logs
    ;;
t)
    BENCH_ONLY=torch BENCH_BUDGET=${BENCH_BUDGET:-540} timeout 590 sh scripts/bench-gpu.sh $OUT/r/t >$OUT/r/t.txt 2>&1
    echo "bench rc $?"; sed -n '/=== torch/,$p' $OUT/r/t.txt | grep -v "^  rc=\|^+ " | tail -70
    rm -rf $OUT/r/t/logs
    ;;
*) echo "usage: OUT=DIR bash $0 a|c|b|d|e|f|g|s|t" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
