#!/bin/bash
# The seventeenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run17.sh s|t|f|x|y
# The library is 8211ba9's (no src/ change since); what changed is how the
# framework stages spend their time: one round of every configuration, then
# rounds of the configurations the time targets compare alone until the
# deadline (bench/benchlib.py run_configs, --focus-rounds).
# s: scripts/bench-gpu.sh without PyTorch (alloc, loop, memset, CuPy; CuPy,
#    last, gets what is left of BENCH_BUDGET=560)
# t: scripts/bench-gpu.sh's PyTorch stage alone, with the whole BENCH_BUDGET=560
# f: where the PyTorch train target's floor lies: the caching allocator,
#    PyTorch's own cudaMallocAsync backend (the driver's pool calls, made by
#    PyTorch) and cupool's default settings, train only, 8 interleaved rounds
#    of each (call t showed cupool at 1.035x in its lowest of 9 processes,
#    with about 520 allocation/free pairs a step)
# x: whether the driver's pool reuse policy is what the pool calls cost
#    PyTorch (run at a4f4b07, the only commit with the switch; removed after y
#    found no difference): the library as it is against a build with
#    -DCUPOOL_EXPERIMENT_REUSE (its pools set not to reuse opportunistically
#    nor through internal dependencies: in `ordered` every allocation and
#    free is on the legacy stream, where the pool reuses in stream order
#    anyway), train, 6 interleaved rounds with the caching allocator
# y: x again, cupool's two builds alone (4 interleaved rounds), then make
#    check on the real driver with the experimental build (its pools reuse
#    less: the out-of-memory test's 99% must still hold).  Four tests failed
#    there with CUDA_ERROR_OUT_OF_MEMORY from cuDevicePrimaryCtxRetain:
#    make -j8 ran them beside test_oom, which takes the whole GPU
#    (scripts/gpu-tests.sh runs test_oom by itself for that reason)
# The two result directories of s and t together are docs/results (make_report.py
# reads one JSON per stage).  Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
s)
    BENCH_ONLY="alloc loop memset cupy" BENCH_BUDGET=560 timeout 590 sh scripts/bench-gpu.sh $OUT/r/s >$OUT/r/s.txt 2>&1
    echo "bench rc $?"; grep -E "^=== |MET|not met" $OUT/r/s.txt | tail -40
    rm -rf $OUT/r/s/logs
    ;;
t)
    BENCH_ONLY=torch BENCH_BUDGET=560 timeout 590 sh scripts/bench-gpu.sh $OUT/r/t >$OUT/r/t.txt 2>&1
    echo "bench rc $?"; sed -n '/=== torch/,$p' $OUT/r/t.txt | grep -v "^  rc=\|^+ " | tail -70
    rm -rf $OUT/r/t/logs
    ;;
f)
    build build-gpu
    timeout 560 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/f --configs caching,cudaMallocAsync,nocache-cupool \
        --workloads train --rounds 8 --focus-rounds 0 >$OUT/r/f.txt 2>&1
    echo "torch rc $?"
    python3 - $OUT/r/f/torch.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["workload"], r["config"], " ".join("%.2f" % x for x in r.get("rounds_ms", [])),
          "ratio %.3f paired %.3f" % (r.get("time_ratio") or 0, r.get("time_ratio_paired") or 0))
PY
    rm -rf $OUT/r/f/logs
    ;;
x)
    build build-gpu & build build-x -DCUPOOL_EXPERIMENT_REUSE & wait
    for round in 1 2 3 4 5 6; do
        for v in caching build-gpu build-x; do
            if [ $v = caching ]; then
                timeout 60 python3 bench/torch_bench.py --worker caching --workload train
            else
                PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $v/scripts/cupool --library $v/.libs/libcupool.so -- \
                    python3 bench/torch_bench.py --worker nocache-cupool --workload train
            fi | python3 -c "import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print('$v', $round, '%.3f' % r['ms_median'], r['peak_mib'])"
        done
    done 2>$OUT/r/x.err | tee $OUT/r/x.txt
    python3 - $OUT/r/x.txt <<'PY'
import sys, collections
ms = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, rnd, t, peak = line.split()
    ms[v].append(float(t))
ref = min(ms["caching"])
for v, ts in ms.items():
    print("%-10s lowest %.3f (%.3fx caching)  all %s" % (v, min(ts), min(ts) / ref, " ".join("%.2f" % t for t in ts)))
PY
    ;;
y)
    build build-gpu & build build-x -DCUPOOL_EXPERIMENT_REUSE & wait
    for round in 1 2 3 4; do
        for v in build-x build-gpu; do
            PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $v/scripts/cupool --library $v/.libs/libcupool.so -- \
                python3 bench/torch_bench.py --worker nocache-cupool --workload train |
                python3 -c "import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print('$v', $round, '%.3f' % r['ms_median'], r['peak_mib'])"
        done
    done 2>$OUT/r/y.err | tee $OUT/r/y.txt
    ( cd build-x && timeout 150 make -j8 -k check CUPOOL_TEST_DRIVER=real ) >$OUT/r/y-check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP|ERROR):' $OUT/r/y-check.txt | tr '\n' ' ')"
    grep -h "largest\|99" build-x/tests/test_oom.log 2>/dev/null | head -5
    ;;
*) echo "usage: OUT=DIR bash $0 s|t|f|x|y" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
