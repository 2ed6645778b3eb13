#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The cupool launcher: usage and errors, LD_PRELOAD prepended with what was
# there kept, and every option setting its CUPOOL_* variable.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
launcher=$builddir/scripts/cupool
lib=$builddir/.libs/libcupool.so
fail() { echo "test_launcher: $*" >&2; exit 1; }
# The launcher must not inherit the preload the test harness set up.
unset LD_PRELOAD

"$launcher" --help | grep -q '^Usage: cupool' || fail "--help prints no usage"
"$launcher" --version | grep -q '^cupool [0-9]' || fail "--version"

"$launcher" --bogus true 2>/tmp/launcher.$$ && fail "an unknown option succeeded"
grep -q 'unknown option --bogus' /tmp/launcher.$$ || fail "no message for an unknown option"
"$launcher" >/dev/null 2>&1 && fail "no command succeeded"
"$launcher" --library "$lib" no-such-command-here 2>/tmp/launcher.$$ && fail "a missing command succeeded"
grep -q 'command not found' /tmp/launcher.$$ || fail "no message for a missing command"
"$launcher" --library /nonexistent/libcupool.so true 2>/tmp/launcher.$$ && fail "a missing library succeeded"
grep -q 'cannot find /nonexistent' /tmp/launcher.$$ || fail "no message for a missing library"
"$launcher" --policy 2>/dev/null && fail "an option without its value succeeded"
rm -f /tmp/launcher.$$

out=$(LD_PRELOAD=/keep/me.so "$launcher" --library "$lib" -p split -f sync -t 1G --min-size 4K --max-size 1G \
    --split-size 2M --limit 8G --ordered-ready 128M --deferred-ready 256M --deferred-wait 25% --deferred-fence streams --driver-queue off -m kernel -l /tmp/x.%p.jsonl --log-level warn -s -v --no-live -- env 2>/dev/null) ||
    fail "env did not run"
expect() { printf '%s\n' "$out" | grep -qx "$1" || fail "expected $1 in the environment"; }
expect "LD_PRELOAD=$lib:/keep/me.so"
expect CUPOOL_POLICY=split
expect CUPOOL_FREE=sync
expect CUPOOL_RELEASE_THRESHOLD=1G
expect CUPOOL_MIN_SIZE=4K
expect CUPOOL_MAX_SIZE=1G
expect CUPOOL_SPLIT_SIZE=2M
expect CUPOOL_LIMIT=8G
expect CUPOOL_ORDERED_READY=128M
expect CUPOOL_DEFERRED_READY=256M
expect CUPOOL_DEFERRED_WAIT=25%
expect CUPOOL_DEFERRED_FENCE=streams
expect CUPOOL_DRIVER_QUEUE=off
expect CUPOOL_MEMSET=kernel
expect 'CUPOOL_LOG=/tmp/x.%p.jsonl'
expect CUPOOL_LOG_LEVEL=warn
expect CUPOOL_STATS=1
expect CUPOOL_VERBOSE=1
expect CUPOOL_LIVE=0
out=$("$launcher" --library "$lib" env) || fail "env did not run"
expect "LD_PRELOAD=$lib"
out=$("$launcher" --library "$lib" --live 1 env) || fail "env did not run"
expect CUPOOL_LIVE=1

# `cupool top` and `cupool stat` run the reader (here echo, to see its
# arguments); a program of either name runs after -- or after an option.
out=$(CUPOOL_TOP=/bin/echo "$launcher" top --once --json) || fail "cupool top did not run"
[ "$out" = "--once --json" ] || fail "cupool top passed '$out'"
out=$(CUPOOL_TOP=/bin/echo "$launcher" stat 42) || fail "cupool stat did not run"
[ "$out" = "--stat 42" ] || fail "cupool stat passed '$out'"
CUPOOL_TOP=/nonexistent/cupool-top "$launcher" top 2>/tmp/launcher.$$ && fail "a missing cupool-top succeeded"
grep -q 'cannot find /nonexistent/cupool-top' /tmp/launcher.$$ || fail "no message for a missing cupool-top"
rm -f /tmp/launcher.$$
out=$(CUPOOL_TOP=/bin/false "$launcher" --library "$lib" -- stat -c %n /) || fail "cupool -- stat did not run stat"
[ "$out" = / ] || fail "cupool -- stat printed '$out'"
out=$(CUPOOL_TOP=/bin/false "$launcher" --library "$lib" -s stat -c %n /) || fail "cupool -s stat did not run stat"
[ "$out" = / ] || fail "cupool -s stat printed '$out'"
echo "test_launcher: ok"
