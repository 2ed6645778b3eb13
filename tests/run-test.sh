#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# LOG_COMPILER of the test suite: runs one test program with libcupool.so
# preloaded, against the simulated driver (tests/sim) or, with
# CUPOOL_TEST_DRIVER=real, against the system's libcuda.so.1.
# A test program may ask to run without cupool by setting CUPOOL_TEST_NATIVE=1
# in its own re-execution (see tests/check.h).  Exit 77 = skipped.
# With CUPOOL_TEST_VALGRIND=1 each test program, and every copy of itself it
# starts, runs under valgrind's memcheck: an invalid read or write, a use of
# uninitialised memory or a definite leak (in cupool, the simulated driver or
# the test) fails the test, with valgrind's report in its .log.  System
# programs the tests start (sh, cat) are not traced.
# CUPOOL_TEST_TIMEOUT (seconds, default 1200, 0 for none) stops a test that
# runs longer and fails it.
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
driver=${CUPOOL_TEST_DRIVER:-sim}
case $driver in
sim)
    LD_LIBRARY_PATH="$builddir/tests/sim/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    ;;
real) ;;
*) echo "run-test.sh: CUPOOL_TEST_DRIVER must be sim or real" >&2; exit 99 ;;
esac
CUPOOL_LIBRARY="$builddir/.libs/libcupool.so"
export CUPOOL_LIBRARY CUPOOL_TEST_DRIVER="$driver"
preload="$CUPOOL_LIBRARY${LD_PRELOAD:+:$LD_PRELOAD}"
if [ "${CUPOOL_TEST_VALGRIND:-0}" = 1 ]; then
    case $1 in *.sh) exec ${SHELL:-/bin/sh} "$@" ;; esac
    LD_PRELOAD=$preload
    export LD_PRELOAD
    exec valgrind -q --error-exitcode=42 --trace-children=yes --trace-children-skip='/usr/*,/bin/*' \
        --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect "$@"
fi
# A test still running after CUPOOL_TEST_TIMEOUT seconds (default 1200; 0:
# no limit) is stopped and fails, so that a hang fails one test instead of
# holding the suite until CI's own limit.  timeout runs without cupool: only
# the test program is preloaded.
limit=${CUPOOL_TEST_TIMEOUT:-1200}
case $1 in
*.sh) set -- ${SHELL:-/bin/sh} "$@" ;;
*) set -- env LD_PRELOAD="$preload" "$@" ;;
esac
if [ "$limit" = 0 ] || ! command -v timeout >/dev/null 2>&1; then exec "$@"; fi
timeout -k 10 "$limit" "$@"
rc=$?
[ "$rc" -eq 124 ] && echo "run-test.sh: stopped after ${limit}s (CUPOOL_TEST_TIMEOUT)" >&2
exit "$rc"
