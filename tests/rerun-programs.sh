#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs every C test program of the suite again, in parallel, through
# tests/run-test.sh with extra environment settings, and says for each
# whether it passed: tests/test_memcheck.sh (under valgrind) and
# tests/test_free_modes.sh (with a free mode forced) are made of it.
#   rerun-programs.sh WHAT NAME=VALUE... [-- PROGRAM...]
# WHAT names the run in what it prints; the programs are those after --, or
# the Makefile's list (CUPOOL_TEST_PROGRAMS).  CUPOOL_TEST_JOBS programs run
# at once (default: one per processor).  Exits 1 when one failed.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
srcdir=${CUPOOL_SRCDIR:-$builddir}
unset LD_PRELOAD
# One program (this script runs itself through xargs): its output in
# OUT/NAME.log, its exit status in OUT/NAME.rc.
if [ "${1:-}" = --one ]; then
    out=$2 program=$3 settings=$4
    name=$(echo "$program" | tr / _)
    # shellcheck disable=SC2086
    env $settings "$srcdir/tests/run-test.sh" "$builddir/$program" >"$out/$name.log" 2>&1
    echo $? >"$out/$name.rc"
    exit 0
fi

what=$1
shift
settings=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    settings="$settings $1"
    shift
done
[ "${1:-}" = -- ] && shift
programs=${*:-${CUPOOL_TEST_PROGRAMS:-}}
[ -n "$programs" ] || { echo "$what: no test programs named (CUPOOL_TEST_PROGRAMS)" >&2; exit 99; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
jobs=${CUPOOL_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
# shellcheck disable=SC2086
printf '%s\n' $programs | xargs -P "$jobs" -I{} sh "$0" --one "$out" {} "$settings"

failed=0
for p in $programs; do
    name=$(echo "$p" | tr / _)
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo "none")
    case $rc in
    0) echo "$what clean: $p" ;;
    77) echo "$what skipped: $p (the program skips itself here)" ;;
    *)
        echo "$what FAILED: $p (exit status $rc)"
        # The lines that say what failed (a check's file:line, a case's
        # FAILED), when the last 60 lines below may have left them out.
        if [ "$(wc -l <"$out/$name.log")" -gt 60 ]; then
            grep -E '^[^ ]+\.[ch]:[0-9]+: |: FAILED$' "$out/$name.log" | head -n 20 | sed 's/^/    what failed: /'
        fi
        sed 's/^/    /' "$out/$name.log" | tail -n 60
        failed=1
        ;;
    esac
done
exit $failed
