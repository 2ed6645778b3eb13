#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The cupool launcher: usage and errors, LD_PRELOAD prepended with what was
# there kept, and every option setting its CUPOOL_* variable, as --opt VALUE
# and --opt=VALUE; a bad value refused at once with the words the library
# uses; and, run from the build tree with nothing set, the build tree's
# library (a program runs under cupool) and cupool-top.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
launcher=$builddir/scripts/cupool
lib=$builddir/.libs/libcupool.so
fail() { echo "test_launcher: $*" >&2; exit 1; }
# The launcher must not inherit the preload the test harness set up, nor
# its CUPOOL_LIBRARY: the build tree's library is found without it.
unset LD_PRELOAD CUPOOL_LIBRARY CUPOOL_TOP
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-test-launcher.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

"$launcher" --help | grep -q '^Usage: cupool' || fail "--help prints no usage"
"$launcher" --version | grep -q '^cupool [0-9]' || fail "--version"

"$launcher" --bogus true 2>"$tmp/err" && fail "an unknown option succeeded"
grep -q 'unknown option --bogus' "$tmp/err" || fail "no message for an unknown option"
"$launcher" >/dev/null 2>&1 && fail "no command succeeded"
"$launcher" --library "$lib" no-such-command-here 2>"$tmp/err" && fail "a missing command succeeded"
grep -q 'command not found' "$tmp/err" || fail "no message for a missing command"
"$launcher" --library /nonexistent/libcupool.so true 2>"$tmp/err" && fail "a missing library succeeded"
grep -q 'cannot find /nonexistent' "$tmp/err" || fail "no message for a missing library"
"$launcher" --policy 2>/dev/null && fail "an option without its value succeeded"

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
CUPOOL_TOP=/nonexistent/cupool-top "$launcher" top 2>"$tmp/err" && fail "a missing cupool-top succeeded"
grep -q 'cannot find /nonexistent/cupool-top' "$tmp/err" || fail "no message for a missing cupool-top"
out=$(CUPOOL_TOP=/bin/false "$launcher" --library "$lib" -- stat -c %n /) || fail "cupool -- stat did not run stat"
[ "$out" = / ] || fail "cupool -- stat printed '$out'"
out=$(CUPOOL_TOP=/bin/false "$launcher" --library "$lib" -s stat -c %n /) || fail "cupool -s stat did not run stat"
[ "$out" = / ] || fail "cupool -s stat printed '$out'"
# From the build tree, with no CUPOOL_LIBRARY: the tree's library, and a
# CUDA program (the demo, on the simulated driver run-test.sh put on
# LD_LIBRARY_PATH) served from its pools.
out=$("$launcher" env) || fail "env did not run from the build tree"
expect "LD_PRELOAD=$lib"
"$launcher" --stats "$builddir/demo/demo" 5 >"$tmp/demo.out" 2>"$tmp/demo.err" ||
    { cat "$tmp/demo.err"; fail "the demo did not run under the build tree's launcher"; }
grep -q '^cupool:     pooled allocations  10 ' "$tmp/demo.err" ||
    { cat "$tmp/demo.err"; fail "the demo's 10 allocations were not pooled under the build tree's launcher"; }
# ... and the tree's cupool-top: cupool top --once on an empty folder.
"$launcher" top --once --dir "$tmp" >"$tmp/top" 2>&1 || { cat "$tmp/top"; fail "cupool top --once failed from the build tree"; }
grep -q '^cupool top - .* - 0 processes' "$tmp/top" || { cat "$tmp/top"; fail "cupool top --once printed no table"; }
# The same through a symbolic link to the launcher, elsewhere.
ln -s "$launcher" "$tmp/cupool"
out=$("$tmp/cupool" env) || fail "env did not run through a link to the launcher"
expect "LD_PRELOAD=$lib"

# --opt=VALUE as --opt VALUE; an option without a value refuses one.
out=$("$launcher" --policy=split --free=sync --host-keep=2G --library="$lib" env) || fail "--opt=VALUE refused"
expect CUPOOL_POLICY=split
expect CUPOOL_FREE=sync
expect CUPOOL_HOST_KEEP=2G
expect "LD_PRELOAD=$lib"
"$launcher" --stats=1 true 2>"$tmp/err" && fail "--stats=1 was accepted"
grep -q 'option --stats takes no value' "$tmp/err" || { cat "$tmp/err"; fail "no message for --stats=1"; }
"$launcher" --policy 2>"$tmp/err" && fail "--policy without a value succeeded"
grep -q 'option --policy needs a value' "$tmp/err" || { cat "$tmp/err"; fail "a missing value is not named"; }

# A bad value of the launcher's own option: exit status 2 before the
# command runs, with the library's own words for the same value (the
# library's warning less "ignoring" and the default it keeps).
for setting in "--free banana CUPOOL_FREE=banana" "--limit 12Q CUPOOL_LIMIT=12Q" \
    "--deferred-wait 0% CUPOOL_DEFERRED_WAIT=0%" "--live maybe CUPOOL_LIVE=maybe"; do
    set -- $setting
    rm -f "$tmp/ran"
    "$launcher" "$1" "$2" touch "$tmp/ran" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || { cat "$tmp/err"; fail "$1 $2: exit status $rc, expected 2"; }
    [ -e "$tmp/ran" ] && fail "$1 $2: the command ran"
    env LD_PRELOAD="$lib" "$3" "$builddir/demo/demo" 1 >/dev/null 2>"$tmp/lib.err" || fail "the demo failed with $3"
    words=$(sed -n 's/^cupool: warning: ignoring \(.*\); using the default .*/\1/p' "$tmp/lib.err")
    [ -n "$words" ] || { cat "$tmp/lib.err"; fail "$3: the library gave no warning"; }
    grep -qxF "cupool: error: $words" "$tmp/err" || { cat "$tmp/err"; fail "$1 $2: not the library's words: $words"; }
done
"$launcher" --min-size 2M --max-size 1M true 2>"$tmp/err" && fail "--min-size above --max-size accepted"
grep -q 'CUPOOL_MIN_SIZE is above CUPOOL_MAX_SIZE' "$tmp/err" || { cat "$tmp/err"; fail "no message for min above max"; }
# A bad value the environment held: the library's warning at once, and the
# command runs (the library keeps the default).
CUPOOL_FREE=banana "$launcher" touch "$tmp/ran" 2>"$tmp/err" || { cat "$tmp/err"; fail "a bad CUPOOL_FREE of the environment stopped the launcher"; }
[ -e "$tmp/ran" ] || fail "the command did not run"
grep -qx 'cupool: warning: ignoring CUPOOL_FREE="banana": expected auto|ordered|deferred|sync; using the default auto' "$tmp/err" ||
    { cat "$tmp/err"; fail "no warning for a bad CUPOOL_FREE of the environment"; }
# -v prints the effective options at once, even for a program without CUDA.
"$launcher" -v -p split true 2>"$tmp/err" || fail "cupool -v true failed"
grep -q '^cupool: CUPOOL_POLICY  *= split  *(environment)' "$tmp/err" || { cat "$tmp/err"; fail "-v printed no options"; }
# The demo (make demo) through the launcher: on the simulated driver, as
# cupool's statistics tell, every figure it prints says so, and cupool
# gives no estimate of GPU calls beside a simulated time; on a GPU none does.
env -u LD_LIBRARY_PATH CUPOOL_BUILDDIR="$builddir" sh "${CUPOOL_SRCDIR:-$builddir}/demo/run-demo.sh" >"$tmp/demo" 2>&1 ||
    { cat "$tmp/demo"; fail "the demo failed"; }
figures=$(grep -E 'us per iteration|x (faster|slower)|time in cupool' "$tmp/demo")
[ "$(printf '%s\n' "$figures" | grep -c .)" = 4 ] || { cat "$tmp/demo"; fail "expected four lines of figures from the demo"; }
if grep -q '^cupool: statistics for pid [0-9]* .* on the simulated driver' "$tmp/demo"; then
    printf '%s\n' "$figures" | grep -v -e '(simulated driver)$' -e 'time in cupool .*, simulated ' &&
        { cat "$tmp/demo"; fail "a figure of the simulated driver does not say so"; }
    grep -q 'would have cost' "$tmp/demo" && { cat "$tmp/demo"; fail "a GPU estimate beside simulated times"; }
else
    grep -q 'simulated' "$tmp/demo" && { cat "$tmp/demo"; fail "the demo on a GPU speaks of the simulator"; }
fi
echo "test_launcher: ok"
