#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/host_bench's staging and managed programs, natively and under cupool:
# every run computes the same checksum of what the host read back and finds
# no wrong word (the simulated driver's race checker also sees the host's
# loads and stores, so a kept block handed back while the device may still use
# it stops the run).  Under cupool the log shows the kept store at work: after
# the first allocation of a size, every allocation is served by a kept block
# and every free keeps its block; with --host 0 --managed 0 none is.  The
# pairs mode runs every kind once.  Then bench/host_bench.py, a round of
# each mode, finds the checksums equal and the kept blocks in the statistics.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
launcher=$builddir/scripts/cupool
bench=$builddir/bench/host_bench
lib=${CUPOOL_LIBRARY:-$builddir/.libs/libcupool.so}
fail() { echo "test_host_bench: $*" >&2; exit 1; }
unset LD_PRELOAD
tmp=${TMPDIR:-/tmp}/test_host_bench.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT

# The checksum column of a run's CSV, one line per size.
sums() { cut -d, -f5,12,13,15 "$1" | tail -n +2; }

sizes=4K,64K,1M
nsizes=3
# -n 4 -r 2: per size one warm-up iteration and 2 rounds of 4.
iters=9
for run in "staging" "managed -P 1" "managed -P 0"; do
    set -- $run
    mode=$1
    shift
    name=$(echo "$run" | tr -d ' ')
    "$bench" -m "$mode" "$@" -s "$sizes" -n 4 -r 2 -o "$tmp/$name.native.csv" 2>"$tmp/$name.native.err" ||
        { cat "$tmp/$name.native.err" >&2; fail "$run: native run failed"; }
    "$launcher" --library "$lib" --log "$tmp/$name.jsonl" -- \
        "$bench" -m "$mode" "$@" -s "$sizes" -n 4 -r 2 -o "$tmp/$name.cupool.csv" 2>"$tmp/$name.cupool.err" ||
        { cat "$tmp/$name.cupool.err" >&2; fail "$run: run under cupool failed"; }
    "$launcher" --library "$lib" --host 0 --managed 0 --log "$tmp/$name.off.jsonl" -- \
        "$bench" -m "$mode" "$@" -s "$sizes" -n 4 -r 2 -o "$tmp/$name.off.csv" 2>"$tmp/$name.off.err" ||
        { cat "$tmp/$name.off.err" >&2; fail "$run: run under cupool with the kinds off failed"; }
    for c in native cupool off; do
        n=$(grep -c ",0,ok\$\|,1,ok\$" "$tmp/$name.$c.csv")
        [ "$n" -eq "$nsizes" ] || { cat "$tmp/$name.$c.csv" >&2; fail "$run $c: $n of $nsizes sizes ok"; }
        loaded=$(tail -n +2 "$tmp/$name.$c.csv" | cut -d, -f4 | sort -u)
        case $c in native) [ "$loaded" = 0 ] ;; *) [ "$loaded" != 0 ] ;; esac ||
            fail "$run $c: cupool column $loaded"
        sums "$tmp/$name.$c.csv" >"$tmp/$name.$c.sums"
    done
    # size,checksum,wrong,status: the same in every configuration, 0 wrong.
    cmp -s "$tmp/$name.native.sums" "$tmp/$name.cupool.sums" && cmp -s "$tmp/$name.native.sums" "$tmp/$name.off.sums" ||
        { paste -d' ' "$tmp/$name.native.sums" "$tmp/$name.cupool.sums" "$tmp/$name.off.sums" >&2;
          fail "$run: checksums differ (native, cupool, kinds off)"; }
    ! grep -qv ',0,ok$' "$tmp/$name.native.sums" || fail "$run: wrong words"
    if [ "$mode" = staging ]; then alloc=cuMemHostAlloc free=cuMemFreeHost kind=host
    else alloc=cuMemAllocManaged free=cuMemFree_v2 kind=managed; fi
    pooled=$(grep "\"call\":\"$alloc\"" "$tmp/$name.jsonl" | grep -c '"route":"pool"')
    native=$(grep "\"call\":\"$alloc\"" "$tmp/$name.jsonl" | grep -c '"route":"native"')
    kept=$(grep "\"call\":\"$free\"" "$tmp/$name.jsonl" | grep "\"kind\":\"$kind\"" | grep -c '"route":"pool"')
    [ "$native" -eq "$nsizes" ] && [ "$pooled" -eq $((nsizes * (iters - 1))) ] && [ "$kept" -eq $((nsizes * iters)) ] ||
        fail "$run: $alloc native $native, served by kept blocks $pooled, frees kept $kept (want $nsizes, $((nsizes * (iters - 1))), $((nsizes * iters)))"
    ! grep "\"kind\":\"$kind\"" "$tmp/$name.off.jsonl" | grep -q '"route":"pool"' ||
        fail "$run: a $kind block was kept with --$kind 0"
done

# pairs: every kind, natively and under cupool.
for c in native cupool; do
    pre=""
    [ $c = cupool ] && pre="$launcher --library $lib --"
    $pre "$bench" -m pairs -s 4K,1M -n 10 -r 1 -o "$tmp/pairs.$c.csv" 2>"$tmp/pairs.$c.err" ||
        { cat "$tmp/pairs.$c.err" >&2; fail "pairs $c failed"; }
    n=$(grep -c ",ok\$" "$tmp/pairs.$c.csv")
    [ "$n" -eq 8 ] || { cat "$tmp/pairs.$c.csv" >&2; fail "pairs $c: $n of 8 kinds and sizes ok"; }
done

# Sizes the programs cannot check are refused.
"$bench" -m staging -s 100 >/dev/null 2>&1 && fail "staging accepted a size that is not a multiple of 8"

# The driver: one round of each mode, small sizes.
if command -v python3 >/dev/null 2>&1; then
    python3 "$srcdir/bench/host_bench.py" --bin "$bench" --cupool "$launcher" --library "$lib" --out "$tmp/results" \
        --pair-sizes 4K,1M --sizes 4K,64K --rounds 1 --reps 1 --target-time 0.02 >"$tmp/driver.out" 2>"$tmp/driver.err" ||
        { cat "$tmp/driver.out" "$tmp/driver.err" >&2; fail "host_bench.py failed"; }
    python3 - "$tmp/results/host.json" <<'PY' || fail "host_bench.py's results"
import json, sys
d = json.load(open(sys.argv[1]))
checks = d["checks"]
bad = [c["name"] for c in checks if not c["ok"]]
assert not bad and not d["errors"], (bad, d["errors"])
names = " ".join(c["name"] for c in checks)
for want in ("staging 4 KiB: one checksum", "managed 64 KiB: one checksum", "pairs: cupool served pinned host",
             "pairs: cupool served managed", "staging: cupool served", "managed: cupool served"):
    assert want in names, want
assert len(d["summary"]) == 2 * 4 + 2 + 2, len(d["summary"])
PY
    python3 "$srcdir/bench/make_report.py" --section host "$tmp/results" | grep -q '^| staging | cuMemHostAlloc(0) | 64 KiB |' ||
        fail "make_report.py --section host has no staging row"
fi
exit 0
