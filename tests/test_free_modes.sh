#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every C test program of the suite again with each free mode that is
# correct for any program forced (CUPOOL_FREE=deferred, then sync).  On the
# simulated driver its race checker (tests/sim/sim_race.c) stops a program
# at the first access or free that CUDA's stream order leaves unordered; on
# the real driver (CUPOOL_TEST_DRIVER=real) the programs' own checks of
# their results decide, four at a time; those that read the device's free
# memory (test_oom fills it) run one at a time afterwards, since programs
# beside them would move it.  Most programs run under the default, auto,
# only; those that set a mode themselves run as they do.  `ordered` is left
# out: it is correct only for programs without non-blocking streams or a
# second context, and the checker reports just that elsewhere
# (test_kernel_race, test_device_view).  One or more program names as arguments
# run only those.
set -u
srcdir=${CUPOOL_SRCDIR:-${CUPOOL_BUILDDIR:-$(pwd)}}
programs=${*:-${CUPOOL_TEST_PROGRAMS:-}}
alone=
if [ "${CUPOOL_TEST_DRIVER:-sim}" != sim ]; then
    CUPOOL_TEST_JOBS=${CUPOOL_TEST_JOBS:-4}
    export CUPOOL_TEST_JOBS
    rest=
    for p in $programs; do
        if grep -q -E 'cuMemGetInfo|tl_held|tl_mem_get_info' "$srcdir/$p.c" 2>/dev/null; then
            alone="$alone $p"
        else
            rest="$rest $p"
        fi
    done
    programs=$rest
fi
failed=0
for mode in deferred sync; do
    # shellcheck disable=SC2086 # program names
    sh "$srcdir/tests/rerun-programs.sh" "CUPOOL_FREE=$mode" "CUPOOL_FREE=$mode" -- $programs || failed=1
    if [ -n "$alone" ]; then
        # shellcheck disable=SC2086
        CUPOOL_TEST_JOBS=1 sh "$srcdir/tests/rerun-programs.sh" "CUPOOL_FREE=$mode" "CUPOOL_FREE=$mode" -- $alone || failed=1
    fi
done
exit $failed
