#!/bin/bash
# The twenty-first session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run21.sh a|...
# a: `ordered`'s store keeps the block freed last even when it is larger
#    than the whole store (11dad4a), against the library the twentieth
#    session left (e7998c6, its source carried in .old, built in
#    .old/build-gpu; prepared as run20.sh x says): the allocation pair of
#    `ordered`, `auto` and `sync` against their bare calls at 256 MiB and
#    1 GiB, one thread, one process per library and mode; PyTorch infer,
#    train and train-stream, the caching allocator beside them, one
#    process each (infer and train twice, interleaved); make check on the
#    real driver of the tests the store, the driver queue and captures
#    touch.
# s, t: as run20.sh s and t (scripts/bench-gpu.sh without PyTorch and
#    test_ready under compute-sanitizer; its PyTorch stage and make check
#    on the real driver), with the session's library.
# f: call s, then PyTorch infer, train and train-stream once each beside
#    the caching allocator (one process each), with the session's library,
#    and infer once more with CUPOOL_STATS (how often the store kept a
#    block larger than itself).
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
a)
    build_old_and_new
    pair 256M,1G 1 1 .old/build-gpu build-gpu | tee $OUT/r/pair.txt
    { torch_rounds 1 "infer train train-stream" caching old new
      torch_rounds 1 "infer train" caching old new; } | tee $OUT/r/torch.txt
    real_check 120 5 test_ready test_modes test_kernel_race test_queue test_capture
    grep -E "over the cap|FAILED" build-gpu/tests/test_ready.log | head -6
    ;;
s | t) exec bash "$(dirname "$0")/run20.sh" $1 ;;
f)
    bash "$(dirname "$0")/run20.sh" s
    torch_rounds 1 "infer train train-stream" caching new | tee $OUT/r/torch.txt
    torch_once infer new-stats CUPOOL_STATS=1
    grep -h "kept though larger\|made room\|served by a ready" $OUT/r/torch.err | tail -3
    ;;
*) echo "usage: OUT=DIR bash $0 a|s|t|f" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
