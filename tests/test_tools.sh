#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The four commands speak alike: each prints its name and the package's
# version for --version; each takes an option's value as --opt VALUE and
# as --opt=VALUE; each names a missing value as such, and an unknown
# option, in a message that starts with its own name.  And cupool top on a
# folder that is not there says so and exits 1 (an empty table would read
# as "no process").
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
launcher=$builddir/scripts/cupool
sample=$srcdir/tests/log/sample.jsonl
unset LD_PRELOAD CUPOOL_TOP
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-test-tools.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_tools: $*" >&2; exit 1; }
version=$(sed -n 's/^PACKAGE_VERSION = //p' "$builddir/Makefile")
[ -n "$version" ] || fail "no PACKAGE_VERSION in $builddir/Makefile"

for tool in cupool cupool-top cupool-report cupool-replay; do
    # cupool-top speaks as "cupool top", the command that runs it.
    case $tool in cupool) prog=$launcher name=cupool ;; cupool-top) prog=$builddir/$tool name='cupool top' ;;
    *) prog=$builddir/$tool name=$tool ;; esac
    out=$("$prog" --version 2>&1) || fail "$tool --version failed: $out"
    [ "$out" = "$tool $version" ] || fail "$tool --version printed '$out', expected '$tool $version'"
    out=$("$prog" -V 2>&1) || fail "$tool -V failed: $out"
    [ "$out" = "$tool $version" ] || fail "$tool -V printed '$out'"
    "$prog" --no-such-option >/dev/null 2>"$tmp/err" && fail "$tool accepted --no-such-option"
    head -n 1 "$tmp/err" | grep -q "^$name: unknown option --no-such-option\$" ||
        { cat "$tmp/err"; fail "$tool: no message naming the unknown option"; }
done

# One option with a value per command, both ways, with the same effect; and
# the same option without its value.
"$launcher" --policy=split env | grep -qx CUPOOL_POLICY=split || fail "cupool --policy=split"
"$launcher" --policy split env | grep -qx CUPOOL_POLICY=split || fail "cupool --policy split"
"$launcher" --policy 2>"$tmp/err" && fail "cupool --policy without a value succeeded"
grep -q '^cupool: option --policy needs a value$' "$tmp/err" || { cat "$tmp/err"; fail "cupool: missing value not named"; }

mkdir "$tmp/pages"
for form in "--dir=$tmp/pages" "--dir $tmp/pages"; do
    # shellcheck disable=SC2086 # the form is two words or one
    "$builddir/cupool-top" --once $form >"$tmp/top" 2>&1 || { cat "$tmp/top"; fail "cupool-top $form failed"; }
    grep -q '0 processes' "$tmp/top" || { cat "$tmp/top"; fail "cupool-top $form printed no table"; }
done
"$builddir/cupool-top" --once --delay=0.5 --dir "$tmp/pages" >/dev/null || fail "cupool-top --delay=0.5"
"$builddir/cupool-top" --once --dir 2>"$tmp/err" && fail "cupool-top --dir without a value succeeded"
grep -q '^cupool top: option --dir needs a value$' "$tmp/err" || { cat "$tmp/err"; fail "cupool-top: missing value not named"; }
"$builddir/cupool-top" --once=1 2>"$tmp/err" && fail "cupool-top --once=1 succeeded"
grep -q '^cupool top: option --once takes no value$' "$tmp/err" || { cat "$tmp/err"; fail "cupool-top: --once=1 not named"; }

for form in "--output=$tmp/a.svg" "--output $tmp/b.svg" "-o $tmp/c.svg" "-o$tmp/d.svg"; do
    # shellcheck disable=SC2086
    "$builddir/cupool-report" -q $form "$sample" || fail "cupool-report $form failed"
done
for f in a b c d; do [ -s "$tmp/$f.svg" ] || fail "cupool-report wrote no $f.svg"; done
cmp -s "$tmp/a.svg" "$tmp/b.svg" || fail "cupool-report --output=FILE and --output FILE differ"
"$builddir/cupool-report" -o 2>"$tmp/err" && fail "cupool-report -o without a value succeeded"
grep -q '^cupool-report: option -o needs a value$' "$tmp/err" || { cat "$tmp/err"; fail "cupool-report: missing value not named"; }
"$builddir/cupool-report" --output 2>"$tmp/err" && fail "cupool-report --output without a value succeeded"
grep -q '^cupool-report: option --output needs a value$' "$tmp/err" || { cat "$tmp/err"; fail "cupool-report: missing --output value not named"; }

# cupool-replay: the simulated driver (LD_LIBRARY_PATH, from run-test.sh).
for form in "--configs=native" "--configs native"; do
    # shellcheck disable=SC2086
    "$builddir/cupool-replay" --json $form "$sample" >"$tmp/replay.json" 2>"$tmp/err" ||
        { cat "$tmp/err"; fail "cupool-replay $form failed"; }
    grep -q '"config":"native","ok":true' "$tmp/replay.json" || { cat "$tmp/replay.json"; fail "cupool-replay $form: no native run"; }
    grep -q '"config":"dedicated' "$tmp/replay.json" && fail "cupool-replay $form ran more than native"
done
"$builddir/cupool-replay" "$sample" --configs 2>"$tmp/err" && fail "cupool-replay --configs without a value succeeded"
grep -q '^cupool-replay: option --configs needs a value$' "$tmp/err" || { cat "$tmp/err"; fail "cupool-replay: missing value not named"; }

# cupool top on a folder that is not there, or not a folder.
for dir in "$tmp/none" "$sample"; do
    "$launcher" top --once --dir "$dir" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] || { cat "$tmp/out" "$tmp/err"; fail "cupool top --dir $dir: exit status $rc, expected 1"; }
    grep -q "^cupool top: $dir: " "$tmp/err" || { cat "$tmp/err"; fail "cupool top --dir $dir: no message"; }
    [ -s "$tmp/out" ] && { cat "$tmp/out"; fail "cupool top --dir $dir printed a table"; }
done
echo "test_tools: ok"
