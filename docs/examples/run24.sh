#!/bin/bash
# The twenty-fourth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run24.sh v|w|x|z
# (before it, the session ran run23.sh t, the PyTorch stage, and run23.sh b,
# the benchmarks without PyTorch, for docs/BENCHMARKS.md).
# v: the PyTorch stage read train-stream under cupool at 15.65, 16.55,
#    17.38, 17.40 and 19.14 ms in its five rounds, beside 15.4-15.6 ms for
#    the caching allocator (paired 1.116x, lowest against lowest 1.015x).
#    Six more interleaved rounds of train-stream and train, caching
#    allocator and cupool, one process each, with cupool's statistics
#    (CUPOOL_STATS=1: frees that waited for the GPU, ready reuses) and each
#    run's fastest and slowest step: does the slowing come with cupool or
#    with the machine?
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

# Each PyTorch run's line (torch_once): workload label median min max (ms
# a step) peak MiB; label cupool runs build-gpu's library, cap4 build-cap4's.
TORCH_SPREAD=1

case ${1:-} in
v)
    build build-gpu
    for round in 1 2 3 4 5 6; do
        for wl in train-stream train; do
            torch_once $wl caching
            torch_once $wl cupool CUPOOL_STATS=1
        done
    done | tee $OUT/r/torch.txt
    grep -hE "waited|ready block|made room|kept though" $OUT/r/torch.err | sort | uniq -c | head -20
    ;;
w)
    # train-stream with the deferred cap of 1 GiB (build-gpu) and of 4 GiB
    # (build-cap4): what the frees that waited for the GPU cost.
    build build-gpu; build build-cap4 -DDEFERRED_MAX_BYTES=4294967296ull
    for round in 1 2 3; do
        torch_once train-stream caching
        torch_once train-stream cupool CUPOOL_STATS=1
        torch_once train-stream cap4 CUPOOL_STATS=1
    done | tee $OUT/r/torch.txt
    grep -hE "waited" $OUT/r/torch.err | sort | uniq -c | head -20
    ;;
x)
    # train on the default stream, three interleaved rounds, on the machine w ran on.
    build build-gpu
    for round in 1 2 3; do
        torch_once train caching
        torch_once train cupool CUPOOL_STATS=1
    done | tee $OUT/r/torch.txt
    ;;
z)
    # The test programs changed since the last full sanitizer run (the
    # nineteenth session's) that run on the GPU, under compute-sanitizer in
    # every free mode, in what device time the session had left.
    sanitize 110 8 test_edges test_bad_input test_stress test_kernel_race test_capture
    grep -E "^sanitizer:" $OUT/r/gpu-tests.txt | cut -c1-160
    ;;
*) echo "usage: OUT=DIR bash $0 v|w|x|z" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
