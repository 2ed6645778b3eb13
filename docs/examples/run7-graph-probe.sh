#!/bin/bash
# The graph kernel-node probe of run7-probes.txt: OUT=DIR bash docs/examples/run7-graph-probe.sh on a GPU machine.
set -u
cd "$(dirname "$0")/../.."  # the repository root; results go to $OUT
: "${OUT:?set OUT to a directory for the results}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer:$PATH
nvcc -O2 -arch=native -o /tmp/gp docs/examples/sanitizer-graph-probe.cu || exit 1
for v in 1 2 3 4 5 6; do
  compute-sanitizer --tool memcheck --track-stream-ordered-races all --report-api-errors no --log-file $OUT/gp$v.log /tmp/gp $v > $OUT/gp$v.out 2>&1
  echo "variant $v rc $? $(grep -h 'done\|->' $OUT/gp$v.out | head -2) $(grep -h 'ERROR SUMMARY' $OUT/gp$v.log) $(grep -m1 -h '^========= [A-Z]' $OUT/gp$v.log | grep -v COMPUTE)"
done
