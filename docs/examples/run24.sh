#!/bin/bash
# The twenty-fourth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run24.sh v
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

# One PyTorch process: workload label median min max peak (steps in ms).
torch_spread() { # WORKLOAD LABEL [ENV...]
    local wl=$1 label=$2; shift 2
    if [ $label = caching ]; then
        timeout 60 python3 bench/torch_bench.py --worker caching --workload $wl
    else
        local lib=build-gpu; [ $label = cap4 ] && lib=build-cap4
        env "$@" PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $lib/scripts/cupool \
            --library $lib/.libs/libcupool.so -- python3 bench/torch_bench.py --worker nocache-cupool --workload $wl
    fi 2>>$OUT/r/torch-$wl-$label.err | tail -1 |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$wl', '$label', *('%.3f' % r[k] for k in ('ms_median', 'ms_min', 'ms_max')), r['peak_mib'])"
}

case ${1:-} in
v)
    build build-gpu
    for round in 1 2 3 4 5 6; do
        for wl in train-stream train; do
            torch_spread $wl caching
            torch_spread $wl cupool CUPOOL_STATS=1
        done
    done | tee $OUT/r/torch.txt
    grep -hE "waited|ready block|made room|kept though" $OUT/r/torch-*-cupool.err | sort | uniq -c | head -20
    ;;
w)
    # train-stream with the deferred cap of 1 GiB (build-gpu) and of 4 GiB
    # (build-cap4): what the frees that waited for the GPU cost.
    build build-gpu; build build-cap4 -DDEFERRED_MAX_BYTES=4294967296ull
    for round in 1 2 3; do
        torch_spread train-stream caching
        torch_spread train-stream cupool CUPOOL_STATS=1
        torch_spread train-stream cap4 CUPOOL_STATS=1
    done | tee $OUT/r/torch.txt
    grep -hE "waited" $OUT/r/torch-*.err | sort | uniq -c | head -20
    ;;
x)
    # train on the default stream, three interleaved rounds, on the machine w ran on.
    build build-gpu
    for round in 1 2 3; do
        torch_spread train caching
        torch_spread train cupool CUPOOL_STATS=1
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
