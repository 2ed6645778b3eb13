#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/alloc_bench -p (cupool and the bare pool calls of its free mode timed
# in one process): the cuMemAlloc/cuMemFree rounds reach cupool, and the
# bare rounds reach the driver alone.  cupool's dlsym override once handed
# the bare rounds cupool's cuStreamCreate and cuMemFreeAsync, which made
# them partly cupool's own calls; cupool's log shows every call it sees.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
launcher=$builddir/scripts/cupool
bench=$builddir/bench/alloc_bench
lib=${CUPOOL_LIBRARY:-$builddir/.libs/libcupool.so}
fail() { echo "test_alloc_bench: $*" >&2; exit 1; }
unset LD_PRELOAD
tmp=${TMPDIR:-/tmp}/test_alloc_bench.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT

# -n 20 -r 3: pairs per configuration = 16 (warm-up) + 10 (second warm-up)
# + 3 x 20 timed, for each of 2 sizes.
want=$(( (16 + 10 + 3 * 20) * 2 ))
for mode in ordered deferred sync; do
    "$launcher" --library "$lib" --free "$mode" --log "$tmp/$mode.jsonl" -- \
        "$bench" -m api -p "bare-$mode" -l "cp-$mode" -s 256,1M -t 1 -n 20 -r 3 -o "$tmp/$mode.csv" \
        2>"$tmp/$mode.err" || { cat "$tmp/$mode.err" >&2; fail "$mode: alloc_bench failed"; }
    rows=$(grep -c "^cp-$mode,api,[1-9][0-9]*,.*,ok\$" "$tmp/$mode.csv")
    bare=$(grep -c "^cp-$mode:bare-$mode,bare-$mode,[1-9][0-9]*,.*,ok\$" "$tmp/$mode.csv")
    [ "$rows" -eq 2 ] && [ "$bare" -eq 2 ] || fail "$mode: expected 2 cupool and 2 bare rows, got $rows and $bare"
    for call in cuMemAlloc_v2 cuMemFree_v2; do
        n=$(grep -c "\"call\":\"$call\"" "$tmp/$mode.jsonl")
        [ "$n" -eq "$want" ] || fail "$mode: cupool saw $n $call, the cupool rounds made $want"
    done
    for call in cuMemFreeAsync cuStreamCreate cuStreamDestroy_v2; do
        ! grep -q "\"call\":\"$call\"" "$tmp/$mode.jsonl" || fail "$mode: a bare round's $call went through cupool"
    done
done
# -p needs -m api.
"$bench" -m bare-ordered -p bare-sync >/dev/null 2>&1 && fail "-p without -m api was accepted"
exit 0
