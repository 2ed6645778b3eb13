#!/bin/bash
# The seventeenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run17.sh s|t
# The library is 8211ba9's (no src/ change since); what changed is how the
# framework stages spend their time: one round of every configuration, then
# rounds of the configurations the time targets compare alone until the
# deadline (bench/benchlib.py run_configs, --focus-rounds).
# s: scripts/bench-gpu.sh without PyTorch (alloc, loop, memset, CuPy; CuPy,
#    last, gets what is left of BENCH_BUDGET=560)
# t: scripts/bench-gpu.sh's PyTorch stage alone, with the whole BENCH_BUDGET=560
# The two result directories together are docs/results (make_report.py
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
*) echo "usage: OUT=DIR bash $0 s|t" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
