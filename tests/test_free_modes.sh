#!/bin/sh
# Every C test program of the suite again with each free mode that is
# correct for any program forced (CUPOOL_FREE=deferred, then sync), on the
# simulated driver, whose race checker (tests/sim/sim_race.c) stops a
# program at the first access or free that CUDA's stream order leaves
# unordered.  Most programs run under the default, auto, only; those that
# set a mode themselves run as they do.  `ordered` is left out: it is
# correct only for programs without non-blocking streams or a second
# context, and the checker reports just that elsewhere (test_kernel_race,
# test_pools).  One or more program names as arguments run only those.
set -u
srcdir=${CUPOOL_SRCDIR:-${CUPOOL_BUILDDIR:-$(pwd)}}
[ "${CUPOOL_TEST_DRIVER:-sim}" = sim ] || { echo "test_free_modes: the simulated driver only"; exit 77; }
failed=0
for mode in deferred sync; do
    sh "$srcdir/tests/rerun-programs.sh" "CUPOOL_FREE=$mode" "CUPOOL_FREE=$mode" -- "$@" || failed=1
done
exit $failed
