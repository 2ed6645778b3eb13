# Sourced by the session scripts (run9.sh, run10.sh) on the GPU machine, from the repository root:
# the CUDA paths, the sanitizer command line the sessions use, and $OUT/r for the results.
set -u
: "${OUT:?set OUT to a directory for the results}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer:$PATH
R=$PWD
SAN="compute-sanitizer --tool memcheck --track-stream-ordered-races all --report-api-errors no --target-processes all"
mkdir -p $OUT/r
