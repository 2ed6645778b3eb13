#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cupool-replay on tests/log/sample.jsonl against the test driver: a row of
# numbers per configuration, every allocation and free of the trace made in
# each, the JSON output well-formed, --stats' summaries, the same trace read
# from a gzip log, and bad arguments refused.  On
# tests/log/kinds.jsonl: pinned host and managed memory replayed with their
# own calls and flags, each kind's times in a table of its own; and on a
# real log of gen_kinds under cupool, every call of each kind replayed.
# run-test.sh has set LD_LIBRARY_PATH (the simulated driver) and
# CUPOOL_LIBRARY (the built libcupool.so).
builddir=${CUPOOL_BUILDDIR:-.}
srcdir=${CUPOOL_SRCDIR:-..}
replay=$builddir/cupool-replay
sample=$srcdir/tests/log/sample.jsonl
kinds=$srcdir/tests/log/kinds.jsonl
gen_kinds=$builddir/tests/log/gen_kinds
[ -x "$replay" ] || { echo "no $replay"; exit 99; }
[ -n "$CUPOOL_LIBRARY" ] || { echo "CUPOOL_LIBRARY not set: run through tests/run-test.sh"; exit 99; }
[ -x "$gen_kinds" ] || { echo "no $gen_kinds"; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-test-replay.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_replay: $*" >&2; exit 1; }

# The trace, counted independently: successful allocations, and successful
# frees of a pointer allocated before.
allocs=$(grep -c '"call":"cuMemAlloc\(Pitch\)\{0,1\}_v2".*"result":"CUDA_SUCCESS"' "$sample")
"$replay" -n 2 "$sample" >"$tmp/table" 2>"$tmp/err" || { cat "$tmp/err" "$tmp/table"; fail "cupool-replay failed"; }
cat "$tmp/table" "$tmp/err"
head -n 1 "$tmp/table" | grep -q ": $allocs allocations, " || fail "expected $allocs allocations in the header"
frees=$(head -n 1 "$tmp/table" | sed -n 's/.* allocations, \([0-9]*\) frees.*/\1/p')
[ -n "$frees" ] && [ "$frees" -gt 0 ] || fail "no frees in the header"
gzip -c "$sample" >"$tmp/sample.jsonl.gz"
"$replay" -n 1 --configs native "$tmp/sample.jsonl.gz" >"$tmp/gz.table" 2>"$tmp/gz.err" ||
    { cat "$tmp/gz.err"; fail "cupool-replay failed on a gzip log"; }
trace_of() { head -n 1 "$1" | sed 's/^cupool-replay: [^:]*: \(.*\); [^;]*$/\1/'; } # the header without the log's name and the runs
[ "$(trace_of "$tmp/gz.table")" = "$(trace_of "$tmp/table")" ] ||
    { head -n 1 "$tmp/gz.table" "$tmp/table"; fail "a gzip log's header differs from the plain log's"; }

number='[0-9][0-9.]*'
for config in native dedicated/ordered dedicated/deferred dedicated/sync dedicated/auto default/auto split/auto; do
    row=$(grep "^$config " "$tmp/table") || fail "no row for $config"
    set -- $row
    [ $# -eq 11 ] || fail "row for $config has $# columns: $row"
    for v in "$2" "$3" "$4" "$5"; do
        expr "$v" : "$number\$" >/dev/null || fail "$config: '$v' is not a number"
    done
    expr "$6" : "$number[BKMG]\$" >/dev/null || fail "$config: peak used '$6'"
    if [ "$config" = native ]; then
        [ "$7" = - ] || fail "native has a peak reserved: $7"
        [ "$8" = 1.00 ] || fail "native wall ratio $8"
    else
        expr "$7" : "$number[BKMG]\$" >/dev/null || fail "$config: peak reserved '$7'"
        [ "$7" != 0B ] || fail "$config: cupool reserved nothing"
    fi
    for v in "$8" "$9" "${10}"; do
        expr "$v" : "$number\$" >/dev/null || fail "$config: ratio '$v' is not a number"
    done
    [ "${11}" = 0 ] || fail "$config: ${11} calls failed"
done
# Device memory alone: no table of another kind.
grep -q -e '^pinned host memory:' -e '^managed memory:' -e 'device memory' "$tmp/table" &&
    fail "a log of device memory alone gave another kind's table"

# JSON: one object per configuration asked for, each replaying every call.
"$replay" --json --configs native,dedicated:ordered,split/auto --no-sample "$sample" >"$tmp/json" ||
    fail "cupool-replay --json failed"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$tmp/json" "$allocs" "$frees" <<'PY' || fail "bad JSON output"
import json, sys
out = json.load(open(sys.argv[1]))
allocs, frees = int(sys.argv[2]), int(sys.argv[3])
assert [c["config"] for c in out["configs"]] == ["native", "dedicated/ordered", "split/auto"], out
for c in out["configs"]:
    assert c["ok"] and c["allocs"] == allocs and c["frees"] == frees and c["failures"] == 0, c
    assert c["wall_ns"] > 0 and c["pair_ns"] > 0 and c["peak_used"] is None, c
    assert (c["peak_reserved"] is None) == (c["config"] == "native"), c
    assert c["peak_reserved"] is None or c["peak_reserved"] > 0, c
PY
fi

# Pinned host and managed memory (kinds.jsonl): successful allocations of
# each kind, and successful frees of one of them (the cuMemFree without
# "kind" frees managed memory, the cuMemFreeHost of 0x1000 none):
# device 2 and 1, pinned host 3 and 3, managed 4 and 2.  The test driver
# refuses cuMemFreeHost of managed memory, cuMemFree of pinned host memory
# and managed allocations without CU_MEM_ATTACH_GLOBAL or _HOST, so no
# failure means every call went to the right entry point.
"$replay" "$kinds" >"$tmp/kinds" 2>"$tmp/kinds.err" || { cat "$tmp/kinds.err" "$tmp/kinds"; fail "cupool-replay failed on kinds.jsonl"; }
cat "$tmp/kinds" "$tmp/kinds.err"
head -n 1 "$tmp/kinds" | grep -q ': 2 allocations, 1 frees (device memory), 3 allocations, 3 frees (pinned host memory), 4 allocations, 2 frees (managed memory), 2 threads, ' ||
    fail "kinds.jsonl: the header does not count each kind"
for kind in 'pinned host memory' 'managed memory'; do
    sed -n "/^$kind:\$/,/^[a-z]* [a-z]*:\$\|^wall ms:/p" "$tmp/kinds" | sed '1,2d;$d' >"$tmp/rows"
    for config in native dedicated/ordered dedicated/deferred dedicated/sync dedicated/auto default/auto split/auto; do
        row=$(grep "^$config " "$tmp/rows") || fail "$kind: no row for $config"
        set -- $row
        [ $# -eq 6 ] || fail "$kind: row for $config has $# columns: $row"
        for v in "$2" "$3" "$4" "$5"; do
            expr "$v" : "$number\$" >/dev/null || fail "$kind: $config: '$v' is not a number"
        done
        [ "$6" = 0 ] || fail "$kind: $config: $6 calls failed"
    done
done
row=$(grep '^native ' "$tmp/kinds" | head -n 1)
set -- $row
[ "${11}" = 0 ] || fail "kinds.jsonl: device memory failed: $row"
"$replay" --json --configs native,dedicated/auto "$kinds" >"$tmp/kinds.json" || fail "cupool-replay --json failed on kinds.jsonl"
# The flags go with the calls: a cuMemHostAlloc flag and a
# cuMemAllocManaged flag the driver refuses fail those allocations.
sed -e 's/"call":"cuMemHostAlloc"\(.*\)"flags":2/"call":"cuMemHostAlloc"\1"flags":64/' \
    -e 's/"ptr":"0x7f2000100000"\(.*\)"flags":2/"ptr":"0x7f2000100000"\1"flags":4/' "$kinds" >"$tmp/bad-flags.jsonl"
cmp -s "$kinds" "$tmp/bad-flags.jsonl" && fail "the flags of kinds.jsonl were not changed"
"$replay" --json --configs native "$tmp/bad-flags.jsonl" >"$tmp/bad-flags.json" || fail "cupool-replay --json failed on bad flags"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$tmp/kinds.json" "$tmp/bad-flags.json" <<'PY' || fail "bad JSON output for kinds.jsonl"
import json, sys
out = json.load(open(sys.argv[1]))
assert (out["allocations"], out["frees"]) == (2, 1), out
assert out["host"] == {"allocations": 3, "frees": 3} and out["managed"] == {"allocations": 4, "frees": 2}, out
assert [c["config"] for c in out["configs"]] == ["native", "dedicated/auto"], out
for c in out["configs"]:
    assert c["ok"] and (c["allocs"], c["frees"], c["failures"]) == (2, 1, 0), c
    for kind, allocs, frees in (("host", 3, 3), ("managed", 4, 2)):
        k = c[kind]
        assert (k["allocs"], k["frees"], k["failures"]) == (allocs, frees, 0), (kind, c)
        assert k["alloc_ns"] > 0 and k["free_ns"] > 0 and abs(k["pair_ns"] - k["alloc_ns"] - k["free_ns"]) < 0.2, (kind, c)
        assert k["pair_x_native"] is not None, (kind, c)
bad = json.load(open(sys.argv[2]))["configs"][0]
assert bad["failures"] == 0 and bad["host"]["failures"] == 1 and bad["managed"]["failures"] == 1, bad
# A failed allocation is not freed: one free fewer of each kind.
assert (bad["host"]["frees"], bad["managed"]["frees"]) == (2, 1), bad
PY
    python3 - "$tmp/json" <<'PY' || fail "the JSON of a log of device memory alone names another kind"
import json, sys
out = json.load(open(sys.argv[1]))
assert "host" not in out and "managed" not in out, out
assert all("host" not in c and "managed" not in c for c in out["configs"]), out
PY
fi

# A real log: gen_kinds under cupool.  The replay makes as many
# allocations and frees of each kind as the program did, without failure.
env LD_PRELOAD="$CUPOOL_LIBRARY" CUPOOL_LOG="$tmp/gen.jsonl" "$gen_kinds" >"$tmp/gen.out"
rc=$?
if [ $rc -eq 0 ]; then
    "$replay" --json --configs native,dedicated/auto "$tmp/gen.jsonl" >"$tmp/gen.json" ||
        fail "cupool-replay --json failed on gen_kinds' log"
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$tmp/gen.json" "$tmp/gen.out" <<'PY' || fail "gen_kinds' log was not replayed whole"
import json, sys
out = json.load(open(sys.argv[1]))
did = dict(l.strip().split("=") for l in open(sys.argv[2]) if "=" in l)
did = {k: int(v) for k, v in did.items()}
assert (out["allocations"], out["frees"]) == (did["device_allocs"], did["device_frees"]), (out, did)
for kind in ("host", "managed"):
    assert out[kind] == {"allocations": did[kind + "_allocs"], "frees": did[kind + "_frees"]}, (kind, out, did)
for c in out["configs"]:
    assert c["ok"] and (c["allocs"], c["frees"], c["failures"]) == (did["device_allocs"], did["device_frees"], 0), c
    for kind in ("host", "managed"):
        k = c[kind]
        assert (k["allocs"], k["frees"], k["failures"]) == (did[kind + "_allocs"], did[kind + "_frees"], 0), (kind, c)
PY
    fi
elif [ $rc -ne 77 ]; then
    fail "gen_kinds failed under cupool"
fi

# Gaps kept (scaled down) still replay the whole trace.
"$replay" --configs dedicated/auto --gap-scale 0.1 "$sample" >"$tmp/gaps" || fail "--gap-scale failed"
grep -q '^dedicated/auto ' "$tmp/gaps" || fail "no row with --gap-scale"

# --stats: a cupool run's CUPOOL_STATS summary on standard error, after a
# line naming its configuration; none for native, none without --stats
# (the first replay above).
"$replay" --stats --configs native,dedicated/ordered --no-sample "$sample" >"$tmp/stats" 2>"$tmp/stats.err" ||
    { cat "$tmp/stats.err"; fail "--stats failed"; }
grep -q '^dedicated/ordered ' "$tmp/stats" || fail "no row with --stats"
grep -qx "cupool-replay: dedicated/ordered: cupool's summary of the replay (CUPOOL_STATS):" "$tmp/stats.err" ||
    { cat "$tmp/stats.err"; fail "--stats: no line naming the run"; }
[ "$(grep -c '^cupool: statistics for pid .*free mode ordered' "$tmp/stats.err")" = 1 ] ||
    { cat "$tmp/stats.err"; fail "--stats: expected the ordered run's summary alone"; }
grep -q '^cupool:     pooled allocations' "$tmp/stats.err" || fail "--stats: the summary has no device section"
grep -q 'native: cupool' "$tmp/stats.err" && fail "--stats: a heading for the native run"
grep -q '^cupool:' "$tmp/err" && fail "a summary without --stats"

# Bad arguments.
"$replay" --configs bogus "$sample" >/dev/null 2>&1 && fail "an unknown configuration was accepted"
"$replay" -n 0 "$sample" >/dev/null 2>&1 && fail "-n 0 was accepted"
"$replay" --library "$tmp/none.so" --configs dedicated/auto "$sample" >/dev/null 2>&1 &&
    fail "a missing library was accepted"
"$replay" "$tmp/missing.jsonl" >/dev/null 2>&1 && fail "a missing log was accepted"
# A log with nothing to replay: status 1 and one clear line (under
# scripts/sanitize.sh, undefined behaviour on this path would end the
# program before the line: sorting no records once did).
: >"$tmp/empty.jsonl"
printf 'not json\n{}\n' >"$tmp/junk.jsonl"
for log in empty junk; do
    "$replay" --configs native "$tmp/$log.jsonl" >/dev/null 2>"$tmp/$log.err"
    [ $? -eq 1 ] || { cat "$tmp/$log.err"; fail "a log with nothing to replay ($log) was not refused with status 1"; }
    grep -q 'holds no successful allocation to replay' "$tmp/$log.err" || { cat "$tmp/$log.err"; fail "$log: no clear message"; }
done
# Malformed lines are named once, by the tool, not again by each
# configuration's run: ten names and one count for twelve, with two
# configurations.  A directory as a log is said to be one.
{ head -n 5 "$sample"; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "not json $i"; done; tail -n +6 "$sample"; } \
    >"$tmp/twelve.jsonl"
"$replay" --configs native,dedicated/auto "$tmp/twelve.jsonl" >"$tmp/twelve.out" 2>"$tmp/twelve.err" ||
    { cat "$tmp/twelve.err"; fail "cupool-replay failed on twelve malformed lines"; }
[ "$(grep -c '^cupool-replay: .*twelve.jsonl:[0-9]*: .*; line skipped$' "$tmp/twelve.err")" = 10 ] ||
    { cat "$tmp/twelve.err"; fail "expected ten malformed lines named once"; }
[ "$(grep -c "^cupool-replay: $tmp/twelve.jsonl: 2 more malformed lines skipped (12 in all)\$" "$tmp/twelve.err")" = 1 ] ||
    { cat "$tmp/twelve.err"; fail "expected one count of the lines not named"; }
"$replay" --configs native "$tmp" >/dev/null 2>"$tmp/dir.err"
[ $? -eq 1 ] || fail "a directory as a log was not refused with status 1"
grep -qx "cupool-replay: $tmp is a directory, not a log" "$tmp/dir.err" || { cat "$tmp/dir.err"; fail "a directory: no clear message"; }
echo "test_replay: ok"
exit 0
