#!/bin/bash
# The sixteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run16.sh a|b|x|t|p
# a: the library at the session's start (8211ba9; its last four commits never
#    ran on a GPU): the whole of scripts/gpu-tests.sh (make check on the real
#    driver, every test program under compute-sanitizer in every free mode,
#    the cudart/PyTorch/CuPy proofs), then the torch training loop with 100
#    timed steps after 5 warm-up ones, caching against nocache-cupool, two
#    rounds, to see whether the slow steps of nocache-cupool come early
#    (the pools still growing) or anywhere
# b: the full scripts/bench-gpu.sh, for docs/BENCHMARKS.md (copy
#    $OUT/r/bench to docs/results and regenerate with bench/make_report.py)
# x: whether pinning alloc_bench to one core steadies the one-thread pair:
#    cupool ordered and auto against the bare ordered calls in one process,
#    256 B, 4 KiB, 1 MiB and 1 GiB, 5 rounds of each, unpinned and under
#    taskset on a core of the GPU's NUMA node, interleaved 4 times; the
#    machine's CPU layout, governor and GPU topology
# t: whether `auto` stays `ordered` in PyTorch's train and CuPy's default
#    workloads (CUPOOL_VERBOSE=1 prints every switch of free mode), then
#    those two workloads alone, 4 interleaved rounds of the reference, of
#    cupool's default settings and of `ordered` forced: call b ran them in
#    one round each (the torch stage ran out of time for a second) and
#    showed the default settings slower than `ordered` in both
# p: scripts/bench-gpu.sh's PyTorch stage alone, as it runs now (last, with
#    what the budget has left: here BENCH_BUDGET=330 less the build), with
#    the time ratio over the rounds both configurations ran
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
a)
    CUPOOL_BUILD=build-gpu UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=${TESTS_BUDGET:-380} JOBS=8 SANITIZER_JOBS=12 \
        timeout 450 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; tail -45 $OUT/r/gpu-tests.txt
    timeout 120 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/torch100 --configs caching,nocache-cupool \
        --workloads train --steps 100 --rounds 2 >$OUT/r/torch100.txt 2>&1
    echo "torch rc $?"
    ;;
b)
    timeout 590 sh scripts/bench-gpu.sh $OUT/r/bench >$OUT/r/bench.txt 2>&1
    echo "bench rc $?"; grep -E "met|not met" $OUT/r/bench.txt | tail -30
    rm -rf $OUT/r/bench/logs
    ;;
x)
    build build-gpu
    { lscpu; nvidia-smi topo -m; cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>&1 | sort | uniq -c; } \
        >$OUT/r/machine.txt 2>&1
    node=$(cat /sys/bus/pci/devices/$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader |
        tr 'A-F' 'a-f' | sed 's/^0000//')/numa_node 2>/dev/null || echo -1)
    cpus=$(cat /sys/devices/system/node/node${node#-}/cpulist 2>/dev/null || echo 0-3)
    core=$(echo $cpus | sed 's/[-,].*//'); core=$((core + 2))
    echo "GPU NUMA node $node, cpus $cpus, pinned core $core" | tee -a $OUT/r/machine.txt
    for round in 1 2 3 4; do
        for pin in none $core; do
            for free in ordered auto; do
                p=; [ $pin = none ] || p="taskset -c $pin"
                timeout 60 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --free $free -- \
                    $p build-gpu/bench/alloc_bench -m api -p bare-ordered -s 256,4K,1M,1G -t 1 -r 5 -T 0.25 \
                    -l pin$pin-$free -o $OUT/r/pin-$round.csv >/dev/null 2>>$OUT/r/pin.err
            done
        done
    done
    python3 - $OUT/r/pin-*.csv <<'PY'
import csv, sys, collections
ratio = collections.defaultdict(list)
for f in sys.argv[1:]:
    rows = list(csv.DictReader(open(f)))
    med = {(r["label"], r["size"]): float(r["us_median"]) for r in rows if r["us_median"]}
    for (label, size), us in med.items():
        if ":" not in label and (label + ":bare-ordered", size) in med:
            bare = med[(label + ":bare-ordered", size)]
            ratio[(label, int(size))].append("%.3f/%.3f=%.3f" % (us, bare, us / bare))
for k in sorted(ratio):
    print("%-16s %11d  %s" % (k[0], k[1], "  ".join(ratio[k])))
PY
    ;;
t)
    build build-gpu
    run="build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUPOOL_VERBOSE=1 timeout 100 $run python3 bench/torch_bench.py \
        --worker nocache-cupool --workload train --steps 5 --warmup 1 >$OUT/r/verbose-torch.txt 2>&1
    CUPOOL_VERBOSE=1 timeout 100 $run python3 bench/cupy_bench.py --worker nopool-cupool --workload default \
        --iters 20 --passes 1 >$OUT/r/verbose-cupy.txt 2>&1
    grep -H "cupool" $OUT/r/verbose-*.txt | grep -v '^{' | cut -c1-200 | head -30
    timeout 200 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/t --configs caching,nocache-cupool,nocache-cupool-ordered \
        --workloads train --rounds 4 >$OUT/r/t-torch.txt 2>&1
    timeout 120 python3 bench/cupy_bench.py --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/t --configs pool,nopool-cupool,nopool-cupool-ordered \
        --workloads default --rounds 4 >$OUT/r/t-cupy.txt 2>&1
    python3 - $OUT/r/t/torch.json $OUT/r/t/cupy.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    for r in json.load(open(f))["rows"]:
        print(f.split("/")[-1], r["workload"], r["config"], " ".join("%.3f" % x for x in r.get("rounds_ms", [])),
              "ratio %.3f paired %.3f" % (r.get("time_ratio") or 0, r.get("time_ratio_paired") or 0))
PY
    ;;
p)
    BENCH_ONLY=torch BENCH_BUDGET=330 timeout 350 sh scripts/bench-gpu.sh $OUT/r/p >$OUT/r/p.txt 2>&1
    echo "bench rc $?"; sed -n '/=== torch/,$p' $OUT/r/p.txt | grep -v "^  rc=" | tail -60
    rm -rf $OUT/r/p/logs
    ;;
*) echo "usage: OUT=DIR bash $0 a|b|x|t|p" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
