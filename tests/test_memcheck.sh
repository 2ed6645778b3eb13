#!/bin/sh
# Every C test program of the suite again, under valgrind's memcheck
# (tests/run-test.sh with CUPOOL_TEST_VALGRIND=1): each program and every
# copy of itself it starts for a mode, a fork or a native comparison.  An
# invalid read or write, a jump on uninitialised memory, or a definite leak
# (cupool's, the simulated driver's or the test's own) fails it.  This is
# how a logging program's fork() was found to leak the chunk cupool's log
# writer held (src/log.c, in_writer).  Skipped without valgrind.
# The programs come from the Makefile (CUPOOL_TEST_PROGRAMS); one or more
# names as arguments run only those.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
srcdir=${CUPOOL_SRCDIR:-$builddir}
unset LD_PRELOAD
# One program (this script runs itself through xargs): its output in
# OUT/NAME.log, its exit status in OUT/NAME.rc.
if [ "${1:-}" = --one ]; then
    name=$(echo "$3" | tr / _)
    CUPOOL_TEST_VALGRIND=1 "$srcdir/tests/run-test.sh" "$builddir/$3" >"$2/$name.log" 2>&1
    echo $? >"$2/$name.rc"
    exit 0
fi

command -v valgrind >/dev/null 2>&1 || { echo "test_memcheck: valgrind is not installed"; exit 77; }
[ "${CUPOOL_TEST_DRIVER:-sim}" = sim ] || { echo "test_memcheck: the simulated driver only"; exit 77; }
programs=${*:-${CUPOOL_TEST_PROGRAMS:-}}
[ -n "$programs" ] || { echo "test_memcheck: no test programs named (CUPOOL_TEST_PROGRAMS)" >&2; exit 99; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
printf '%s\n' $programs | xargs -P "$jobs" -I{} sh "$0" --one "$out" {}

failed=0
for p in $programs; do
    name=$(echo "$p" | tr / _)
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo "none")
    case $rc in
    0) echo "memcheck clean: $p" ;;
    77) echo "memcheck skipped: $p (the program skips itself here)" ;;
    *)
        echo "memcheck FAILED: $p (exit status $rc)"
        sed 's/^/    /' "$out/$name.log" | tail -n 60
        failed=1
        ;;
    esac
done
exit $failed
