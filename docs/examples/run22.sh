#!/bin/bash
# The twenty-second session's GPU call, planned but not run (no machine was
# lent in that session); from the repository root on the GPU machine:
#   OUT=DIR bash docs/examples/run22.sh g
# g: the tests of the session's driver-facing fixes on the real driver
#    (test_edges: captures whose stream or context is destroyed, where the
#    driver lets it be, else skipped; test_bad_input: NULL arguments to every
#    handled entry point, natively and under cupool, a CUPOOL_MEMSET=kernel
#    run among them; test_memset_api: no exec graph; test_capture and
#    test_ready: the capture gate and the store, whose hint reads are now
#    relaxed atomics), then the same under compute-sanitizer in every free
#    mode.  After it: run21.sh f (benchmarks) and t (docs/BENCHMARKS.md).
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

case ${1:-} in
g)
    build build-gpu
    real_check 300 2 test_edges test_bad_input test_capture test_ready memset/test_memset_api
    grep -E "while capturing|killed|same results|FAILED" build-gpu/tests/test_edges.log \
        build-gpu/tests/test_bad_input.log | head -30
    sanitize 240 4 test_edges test_bad_input test_memset_api
    ;;
*) echo "usage: OUT=DIR bash $0 g" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
