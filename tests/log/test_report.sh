#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cupool-report on tests/log/sample.jsonl (device memory) and
# tests/log/kinds.jsonl (device, pinned host and managed memory): the
# summary's numbers match what an independent reading of the log (Python's
# json) gives, and for kinds.jsonl the numbers worked out by hand; malformed
# lines are reported as FILE:LINE and skipped; the picture is well-formed
# XML with a step line per device and series, one per kind of memory other
# than device memory, and a bar per size class; and the device sections
# and picture of a log do not change when its host and managed lines go.
# Malformed lines are named ten a log at most, then counted; a directory
# as a log and a picture that cannot be written get a clear message.  A
# log compressed with gzip reads as the plain one; a cut one, or one on
# standard input, is refused with a clear message.
# Last, real logs: gen_kinds run under cupool (run-test.sh has set
# CUPOOL_LIBRARY and the simulated driver), with the kept store and without
# (CUPOOL_HOST=0 CUPOOL_MANAGED=0), read the same way and compared with what
# the program says it did and with cupool's own statistics.
# Skipped (77) without python3.
builddir=${CUPOOL_BUILDDIR:-.}
srcdir=${CUPOOL_SRCDIR:-..}
report=$builddir/cupool-report
sample=$srcdir/tests/log/sample.jsonl
kinds=$srcdir/tests/log/kinds.jsonl
gen_kinds=$builddir/tests/log/gen_kinds
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
[ -x "$report" ] || { echo "no $report"; exit 99; }
[ -x "$gen_kinds" ] || { echo "no $gen_kinds"; exit 99; }
[ -n "$CUPOOL_LIBRARY" ] || { echo "CUPOOL_LIBRARY not set: run through tests/run-test.sh"; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-test-report.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_report: $*" >&2; exit 1; }

run_checks() { # LOG: the summary and picture against an independent reading
    log=$1 name=$(basename "$1" .jsonl)
    "$report" -o "$tmp/$name.svg" "$log" >"$tmp/$name.summary" 2>"$tmp/$name.err" ||
        { cat "$tmp/$name.err"; fail "cupool-report failed on $log"; }
    [ -s "$tmp/$name.err" ] && { cat "$tmp/$name.err"; fail "unexpected messages on stderr"; }
    cat "$tmp/$name.summary"
    python3 - "$log" "$tmp/$name.summary" "$tmp/$name.svg" <<'PY' || exit 1
import json, math, re, sys
import xml.dom.minidom

sample, summary, svg = sys.argv[1:4]
records = [dict(json.loads(l), line=n) for n, l in enumerate(open(sample), 1) if l.strip()]
records.sort(key=lambda r: (r["t"], r["line"]))
ALLOC = {"cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAlloc", "cuMemAllocPitch",
         "cuMemAllocHost_v2", "cuMemAllocHost", "cuMemHostAlloc", "cuMemAllocManaged"}
FREE = {"cuMemFree_v2", "cuMemFree", "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemFreeHost"}
# The memory a call's name implies when its line has no "kind".
CALL_MEM = {"cuMemAllocHost_v2": "host", "cuMemAllocHost": "host", "cuMemHostAlloc": "host",
            "cuMemFreeHost": "host", "cuMemAllocManaged": "managed"}
KIND_SECTION = {"host": "pinned host memory", "managed": "managed memory"}
SECTION = r"^(device \d+|no device|pinned host memory|managed memory):$"

def dev_name(d):
    return "device %d" % d if d is not None and 0 <= d < 64 else "no device"

exp = {}
def dev(name):
    return exp.setdefault(name, dict(calls={}, allocs=0, pooled=0, native=0, bytes=0, frees=0,
                                     in_use=0, peak=0, reserved=0, peak_reserved=0, failures={},
                                     alloc_ns=[], free_ns=[], store_ns=[], pool_ns=[], hist={}, time={}))
live = {}
for r in records:
    call = r["call"]
    if call.startswith("cupool."):
        continue
    d = r.get("dev", -1)
    ptr = int(r.get("ptr", "0x0"), 16) if r.get("ptr", "(nil)") != "(nil)" else 0
    mem = r.get("kind", CALL_MEM.get(call, "device")) if call in ALLOC or call in FREE else "device"
    if call in FREE and ptr in live:
        if d < 0:
            d = live[ptr][1]
        mem = live[ptr][2]  # a free frees what its pointer was allocated as
    elif call not in ALLOC and d < 0 and ptr in live and live[ptr][2] != "device":
        mem = live[ptr][2]  # cuMemAdvise of a managed block, say
    name = KIND_SECTION.get(mem) or dev_name(d)
    s = dev(name)
    s["calls"][call] = s["calls"].get(call, 0) + 1
    if r.get("result", "CUDA_SUCCESS") != "CUDA_SUCCESS":
        s["failures"][r["result"]] = s["failures"].get(r["result"], 0) + 1
        continue
    if call in ALLOC:
        s["allocs"] += 1
        s["pooled" if r["route"] == "pool" else "native"] += 1
        s["bytes"] += r["size"]
        s["alloc_ns"].append(r["dur_ns"])
        if r["route"] == "pool":
            s["store_ns" if r.get("store") is True else "pool_ns"].append(r["dur_ns"])
        if r["size"]:
            b = r["size"].bit_length() - 1
            s["hist"][b] = s["hist"].get(b, 0) + 1
            s["time"][b] = s["time"].get(b, 0) + r["dur_ns"]
        assert ptr not in live
        live[ptr] = (r["size"], d, mem, name)
        s["in_use"] += r["size"]
        s["peak"] = max(s["peak"], s["in_use"])
    elif call in FREE:
        s["frees"] += 1
        s["free_ns"].append(r["dur_ns"])
        if ptr in live:
            size, _, _, owner = live.pop(ptr)
            exp[owner]["in_use"] -= size
            if size:
                b = size.bit_length() - 1
                s["time"][b] = s["time"].get(b, 0) + r["dur_ns"]
    if (call in ALLOC or call in FREE) and mem == "device" and r.get("route") == "pool" and "reserved" in r:
        s["reserved"] = r["reserved"]
        s["peak_reserved"] = max(s["peak_reserved"], s["reserved"])

# The report's summary, section by section.
got, cur = {}, None
for line in open(summary):
    m = re.match(SECTION, line)
    if m:
        cur = got.setdefault(m.group(1), {})
        continue
    m = re.match(r"^  ([a-z ]+): (.*)$", line)
    if cur is not None and m:
        cur[m.group(1)] = m.group(2)

def check(name, what, have, want):
    if have != want:
        sys.exit("test_report: %s %s: report says %r, expected %r" % (name, what, have, want))

check("report", "devices", sorted(got), sorted(exp))
for name, s in exp.items():
    g = got[name]
    calls = dict(kv.split("=") for kv in g["calls"].split())
    check(name, "calls", {k: int(v) for k, v in calls.items()}, s["calls"])
    # Kept blocks serve pinned host and managed memory; pools, device memory.
    pooled = "kept" if name in KIND_SECTION.values() else "pooled"
    check(name, "allocations", g["allocations"], "%d %s=%d native=%d" % (s["allocs"], pooled, s["pooled"], s["native"]))
    check(name, "bytes allocated", int(g["bytes allocated"].split()[0]), s["bytes"])
    check(name, "frees", int(g["frees"].split()[0]), s["frees"])
    check(name, "peak in use", int(g["peak in use"].split()[0]), s["peak"])
    check(name, "in use at end", int(g["in use at end"].split()[0]), s["in_use"])
    if pooled == "pooled":
        check(name, "peak reserved", int(g["peak reserved"].split()[0]), s["peak_reserved"])
    else:
        check(name, "peak reserved", g.get("peak reserved"), None)
    fails = " ".join("%s=%d" % kv for kv in sorted(s["failures"].items())) or "none"
    check(name, "failures", " ".join(sorted(g["failures"].split())), fails)
    def durations(ns):
        ns = sorted(ns)
        rank = lambda p: ns[max(1, math.ceil(p / 100 * len(ns))) - 1]
        return "n=%d p50=%d p90=%d p99=%d max=%d" % (len(ns), rank(50), rank(90), rank(99), ns[-1]) if ns else "n=0"
    if s["alloc_ns"]:
        check(name, "alloc duration", g["alloc duration ns"], durations(s["alloc_ns"]))
    # Allocations a store served, against those the pool made: only for a
    # log that marks some ("store": true).
    for key in ("store", "pool"):
        check(name, key + " alloc duration", g.get(key + " alloc duration ns"),
              durations(s[key + "_ns"]) if s["store_ns"] else None)

    a, f = sum(s["alloc_ns"]), sum(s["free_ns"])
    check(name, "time in calls", g["time in calls"],
          "%.3f ms (allocations %.3f ms, frees %.3f ms)" % ((a + f) / 1e6, a / 1e6, f / 1e6))

# The time-by-size lines of each section: "[lo, hi) N ms", after its heading.
times, cur, within = {}, None, False
for line in open(summary):
    m = re.match(SECTION, line)
    if m:
        cur, within = times.setdefault(m.group(1), []), False
    if line.startswith("  time by size"):
        within = True
        continue
    m = re.match(r"^    \[(\S+), (\S+)\) ([0-9.]+) ms$", line)
    if within and m:
        cur.append(m.group(3))
    elif not line.startswith("    "):
        within = False
for name, s in exp.items():
    check(name, "time by size", times.get(name, []),
          ["%.3f" % (s["time"][b] / 1e6) for b in sorted(s["time"]) if s["time"][b]])

# The histogram lines of each section: "[lo, hi) count ###".
hist, cur = {}, None
for line in open(summary):
    m = re.match(SECTION, line)
    if m:
        cur = hist.setdefault(m.group(1), [])
    m = re.match(r"^    \[(\S+), (\S+)\) (\d+) #+$", line)
    if m:
        cur.append(int(m.group(3)))
for name, s in exp.items():
    check(name, "histogram", hist.get(name, []), [s["hist"][b] for b in sorted(s["hist"])])

# The picture.
doc = xml.dom.minidom.parse(svg)
root = doc.documentElement
check("svg", "root", root.tagName, "svg")
lines = root.getElementsByTagName("polyline")
devices = [n for n, s in exp.items() if s["allocs"] and n not in KIND_SECTION.values()]
series = [("in-use", len(devices)), ("reserved", len(devices))]
series += [(k + "-in-use", int(exp.get(n, {}).get("allocs", 0) > 0)) for k, n in KIND_SECTION.items()]
for cls, want in series:
    drawn = [p for p in lines if p.getAttribute("class") == cls]
    check("svg", cls + " lines", len(drawn), want)
    for p in drawn:
        pts = p.getAttribute("points").split()
        if len(pts) < 4:
            sys.exit("test_report: a %s line has %d points" % (cls, len(pts)))
        for xy in pts:
            x, y = map(float, xy.split(","))
check("svg", "lines", len(lines), sum(n for _, n in series))
# The size histogram drawn is device memory's.
bars = [r for r in root.getElementsByTagName("rect") if r.getAttribute("class") == "bar"]
buckets = set()
for n in devices:
    buckets |= set(exp[n]["hist"])
check("svg", "bars", len(bars), max(buckets) - min(buckets) + 1)
print("test_report: summary and picture agree with " + sample)
PY
}
run_checks "$sample"
cp "$tmp/sample.summary" "$tmp/summary"
# The same log with every third pooled allocation marked as served by a
# store: its durations apart from the pool's.
python3 - "$sample" >"$tmp/stored.jsonl" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("call", "").startswith("cuMemAlloc") and r.get("route") == "pool":
        n += 1
        if n % 3 == 0:
            r["store"] = True
    print(json.dumps(r, separators=(",", ":")))
PY
grep -q '"store":true' "$tmp/stored.jsonl" || fail "no allocation marked as served by a store"
run_checks "$tmp/stored.jsonl"
grep -q '^  store alloc duration ns: n=' "$tmp/stored.summary" || fail "no line for the store's allocations"
run_checks "$kinds"

# kinds.jsonl worked out by hand: pinned host memory peaks at 69632 bytes
# (4096 + 65536) and ends at 0, one allocation of three served by a kept
# block, two frees of three kept; managed memory peaks and ends at 2105344
# (8192 + 2 MiB) after the block of 1000000 bytes that a cuMemFree without
# "kind" freed by its pointer; the failed cuMemFreeHost of no block and
# the refused allocation are pinned host memory's.
sed -n '/^pinned host memory:$/,/^  failures:/p' "$tmp/kinds.summary" >"$tmp/host"
sed -n '/^managed memory:$/,/^  failures:/p' "$tmp/kinds.summary" >"$tmp/managed"
cat >"$tmp/host.want" <<'EOF'
pinned host memory:
  calls: cuMemAllocHost_v2=3 cuMemHostAlloc=1 cuMemFreeHost=4
  allocations: 3 kept=1 native=2
  bytes allocated: 73728 kept=4096 native=69632 (72.0 KiB)
  frees: 3 kept=2 native=1 unmatched=0
  in use at end: 0 (0 B)
  peak in use: 69632 (68.0 KiB)
  failures: CUDA_ERROR_INVALID_VALUE=1 CUDA_ERROR_OUT_OF_MEMORY=1
EOF
cat >"$tmp/managed.want" <<'EOF'
managed memory:
  calls: cuMemAllocManaged=4 cuMemFree_v2=2
  allocations: 4 kept=1 native=3
  bytes allocated: 3113536 kept=8192 native=3105344 (3.0 MiB)
  frees: 2 kept=1 native=1 unmatched=0
  in use at end: 2105344 (2.0 MiB)
  peak in use: 2105344 (2.0 MiB)
  failures: none
EOF
for k in host managed; do
    cmp -s "$tmp/$k" "$tmp/$k.want" || { diff "$tmp/$k.want" "$tmp/$k"; fail "kinds.jsonl: the $k section differs"; }
done
grep -q '^  peak reserved: 2097152 ' "$tmp/kinds.summary" || fail "kinds.jsonl: device 0's reservation"
grep -q '^no device:' "$tmp/kinds.summary" && fail "kinds.jsonl: a free of managed memory went to no device"

# Without its host and managed lines (by call, by "kind", and the free of
# the managed block that names no kind) the log gives the same device
# section, and a picture of device memory alone: no host or managed panel
# nor their styles.
grep -v -e '"kind":' -e '"call":"cuMemFreeHost"' -e '"ptr":"0x7f2000100000"' "$kinds" >"$tmp/device-only.jsonl"
"$report" -o "$tmp/device-only.svg" "$tmp/device-only.jsonl" >"$tmp/device-only.summary" ||
    fail "cupool-report failed on the device lines of kinds.jsonl"
sed -n '/^device 0:$/,/^pinned host memory:$/p' "$tmp/kinds.summary" | sed '$d' >"$tmp/a"
sed -n '/^device 0:$/,/^picture:/p' "$tmp/device-only.summary" | sed '$d' >"$tmp/b"
[ -s "$tmp/a" ] && cmp -s "$tmp/a" "$tmp/b" || { diff "$tmp/a" "$tmp/b"; fail "host and managed lines changed the device section"; }
grep -q -e 'host-in-use' -e 'managed-in-use' -e 'class="host"' -e 'class="managed"' "$tmp/device-only.svg" &&
    fail "a log of device memory alone drew host or managed memory"
grep -q -e '^pinned host memory:' -e '^managed memory:' "$tmp/device-only.summary" &&
    fail "a log of device memory alone printed host or managed memory"

# Real logs of gen_kinds.  In each, a kind's section counts what the
# program did (its allocations, frees, peak and final bytes in use), its
# kept= numbers are those of cupool's statistics, and no call is left to no
# device (cuMemAdvise of a managed block is managed memory's; so is a
# cuMemFree of it that names no kind, as without the kept store).
section_value() { # SUMMARY SECTION FIELD: the first number of "  FIELD: ..."
    sed -n "/^$2:\$/,/^[a-z].*:\$/p" "$1" | sed -n "s/^  $3: \([0-9]*\).*/\1/p"
}
section_kept() { # SUMMARY SECTION FIELD: the kept= number of "  FIELD: ..."
    sed -n "/^$2:\$/,/^[a-z].*:\$/p" "$1" | sed -n "s/^  $3: .* kept=\([0-9]*\) .*/\1/p"
}
for setting in kept CUPOOL_HOST=0; do
    case $setting in
    kept) set -- ;;
    *) set -- CUPOOL_HOST=0 CUPOOL_MANAGED=0 ;;
    esac
    log=$tmp/gen-$setting.jsonl
    env "$@" LD_PRELOAD="$CUPOOL_LIBRARY" CUPOOL_LOG="$log" CUPOOL_STATS=1 "$gen_kinds" \
        >"$tmp/gen.out" 2>"$tmp/gen.err"
    rc=$?
    [ $rc -eq 77 ] && { echo "gen_kinds skipped (fewer than two devices)"; break; }
    [ $rc -eq 0 ] || { cat "$tmp/gen.out" "$tmp/gen.err"; fail "gen_kinds failed ($setting)"; }
    grep -q '"kind":"host"' "$log" && grep -q '"kind":"managed"' "$log" || fail "$setting: no host or managed lines"
    run_checks "$log"
    summary=$tmp/gen-$setting.summary
    grep -q '^no device:' "$summary" && fail "$setting: calls left to no device"
    want() { sed -n "s/^$1=//p" "$tmp/gen.out"; }
    for kind in host managed; do
        case $kind in host) section='pinned host memory' ;; *) section='managed memory' ;; esac
        for field in allocations frees 'peak in use' 'in use at end'; do
            case $field in
            allocations) key=${kind}_allocs ;; frees) key=${kind}_frees ;;
            'peak in use') key=${kind}_peak ;; *) key=${kind}_end ;;
            esac
            have=$(section_value "$summary" "$section" "$field")
            [ "$have" = "$(want $key)" ] || fail "$setting: $section $field: report says '$have', gen_kinds '$(want $key)'"
        done
        # cupool's statistics: "allocations A (served by kept blocks K), frees F (kept KF)".
        stats=$(sed -n "/^cupool:   $section:\$/{n;p;}" "$tmp/gen.err" |
            sed -n 's/.*allocations \([0-9]*\) (served by kept blocks \([0-9]*\)), frees \([0-9]*\) (kept \([0-9]*\)).*/\2 \4/p')
        kept="$(section_kept "$summary" "$section" allocations) $(section_kept "$summary" "$section" frees)"
        if [ "$setting" = kept ]; then
            [ "$stats" = "$kept" ] || { cat "$tmp/gen.err"; fail "$section: kept allocations and frees '$kept', cupool's statistics '$stats'"; }
            [ "$kept" != "0 0" ] || fail "$section: no kept block served under cupool"
        else
            [ "$kept" = "0 0" ] || fail "$setting: $section: kept '$kept'"
        fi
    done
done
if [ -f "$tmp/gen-CUPOOL_HOST=0.jsonl" ]; then
    grep -q '"call":"cuMemFree_v2"' "$tmp/gen-CUPOOL_HOST=0.jsonl" &&
        ! grep '"call":"cuMemFree_v2"' "$tmp/gen-CUPOOL_HOST=0.jsonl" | grep -q '"kind":"managed"' ||
        fail "without the kept store a cuMemFree of managed memory names its kind: the match by pointer went untested"
fi

# HTML output holds the same picture.
"$report" -q -o "$tmp/out.html" "$sample" >"$tmp/quiet" || fail "cupool-report -o out.html failed"
[ -s "$tmp/quiet" ] && fail "-q printed a summary"
python3 -c 'import sys, xml.dom.minidom; d = xml.dom.minidom.parse(sys.argv[1]); assert d.getElementsByTagName("svg")' \
    "$tmp/out.html" || fail "the HTML picture is not well-formed"

# A malformed line is named and skipped; the rest reads as before.
{ head -n 5 "$sample"; echo '{"t":12,"call":"cuMemAlloc_v2","size":'; echo 'not json'; tail -n +6 "$sample"; } >"$tmp/broken.jsonl"
"$report" -o "$tmp/broken.svg" "$tmp/broken.jsonl" >"$tmp/broken.summary" 2>"$tmp/broken.err" ||
    fail "cupool-report gave up on a malformed line"
grep -q "broken.jsonl:6: " "$tmp/broken.err" || { cat "$tmp/broken.err"; fail "line 6 not reported"; }
grep -q "broken.jsonl:7: " "$tmp/broken.err" || { cat "$tmp/broken.err"; fail "line 7 not reported"; }
grep -q ", 2 rejected," "$tmp/broken.summary" || fail "rejected lines not counted"
sed 1d "$tmp/summary" | grep -v '^picture:' >"$tmp/a"
sed 1d "$tmp/broken.summary" | grep -v '^picture:' >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || { diff "$tmp/a" "$tmp/b"; fail "a malformed line changed the summary"; }

# Help, unknown options, missing files and logs without a usable line: each
# its own exit status, checked exactly (under scripts/sanitize.sh a leak on
# one of these paths changes it: the argument list once leaked on each).
"$report" -h >"$tmp/help" 2>&1 || fail "-h failed"
grep -q '^Usage: cupool-report' "$tmp/help" || fail "-h printed no usage"
"$report" --bogus "$sample" >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown option was not refused with status 2"
"$report" -o "$tmp/x.svg" "$tmp/missing.jsonl" >/dev/null 2>&1
[ $? -eq 1 ] || fail "a missing log was not refused with status 1"
: >"$tmp/empty.jsonl"
printf 'not json\n{}\n' >"$tmp/junk.jsonl"
for log in empty junk; do
    "$report" -o "$tmp/x.svg" "$tmp/$log.jsonl" >/dev/null 2>"$tmp/$log.err"
    [ $? -eq 1 ] || { cat "$tmp/$log.err"; fail "a log with no usable line ($log) was not refused with status 1"; }
    grep -q 'no usable lines in the log' "$tmp/$log.err" || { cat "$tmp/$log.err"; fail "$log: no clear message"; }
done
# Malformed lines are named up to ten a log, each with the program's name,
# then counted in one line: twelve broken lines among good ones give ten
# names and "2 more ... (12 in all)", and 2 MB of random bytes no more.
{ head -n 5 "$sample"; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "not json $i"; done; tail -n +6 "$sample"; } \
    >"$tmp/twelve.jsonl"
"$report" -o "$tmp/twelve.svg" "$tmp/twelve.jsonl" >"$tmp/twelve.summary" 2>"$tmp/twelve.err" ||
    fail "cupool-report gave up on twelve malformed lines"
[ "$(grep -c '^cupool-report: .*twelve.jsonl:[0-9]*: .*; line skipped$' "$tmp/twelve.err")" = 10 ] ||
    { cat "$tmp/twelve.err"; fail "expected ten malformed lines named"; }
grep -qx "cupool-report: $tmp/twelve.jsonl: 2 more malformed lines skipped (12 in all)" "$tmp/twelve.err" ||
    { cat "$tmp/twelve.err"; fail "no count of the lines not named"; }
[ "$(wc -l <"$tmp/twelve.err")" -eq 11 ] || { cat "$tmp/twelve.err"; fail "more than eleven lines of messages"; }
grep -q ", 12 rejected," "$tmp/twelve.summary" || fail "the twelve rejected lines are not counted"
python3 -c 'import random, sys; random.seed(48); sys.stdout.buffer.write(bytes(random.getrandbits(8) for _ in range(2000000)))' \
    >"$tmp/random.bin"
"$report" -o "$tmp/random.svg" "$tmp/random.bin" >/dev/null 2>"$tmp/random.err"
[ $? -eq 1 ] || fail "random bytes were not refused with status 1"
[ "$(wc -l <"$tmp/random.err")" -le 12 ] || { head -n 20 "$tmp/random.err"; fail "random bytes gave $(wc -l <"$tmp/random.err") lines of messages"; }
grep -q '^cupool-report: .*random.bin: [0-9]* more malformed lines skipped ([0-9]* in all)$' "$tmp/random.err" ||
    { cat "$tmp/random.err"; fail "random bytes: no count of the lines not named"; }

# A directory named as a log is said to be one; a picture that cannot be
# written is named with the program's name.
"$report" -o "$tmp/x.svg" "$tmp" >/dev/null 2>"$tmp/dir.err"
[ $? -eq 1 ] || fail "a directory as a log was not refused with status 1"
grep -qx "cupool-report: $tmp is a directory, not a log" "$tmp/dir.err" || { cat "$tmp/dir.err"; fail "a directory: no clear message"; }
grep -q 'no usable lines' "$tmp/dir.err" && fail "a directory was called a log without usable lines"
"$report" -o /nonexistent/x.svg "$sample" >/dev/null 2>"$tmp/out.err"
[ $? -eq 1 ] || fail "an unwritable picture was not refused with status 1"
grep -qx 'cupool-report: cannot write /nonexistent/x.svg: No such file or directory' "$tmp/out.err" ||
    { cat "$tmp/out.err"; fail "an unwritable picture: no message with the program's name"; }

# A log compressed with gzip gives the same summary and picture as the
# plain log (run_checks' $tmp/summary and $tmp/sample.svg).  Cut short,
# gzip names the damage and the report fails; on standard input it is
# refused (it cannot be handed to gzip by path).
gzip -9 -c "$sample" >"$tmp/gz.jsonl.gz"
"$report" -o "$tmp/gz.svg" "$tmp/gz.jsonl.gz" >"$tmp/gz.summary" 2>&1 || { cat "$tmp/gz.summary"; fail "cupool-report failed on a gzip log"; }
sed -e "s|$tmp/gz.jsonl.gz|$sample|" -e "s|$tmp/gz.svg|$tmp/sample.svg|" "$tmp/gz.summary" | cmp -s - "$tmp/summary" ||
    { diff "$tmp/summary" "$tmp/gz.summary"; fail "a gzip log's summary differs from the plain log's"; }
sed "s|$tmp/gz.jsonl.gz|$sample|g" "$tmp/gz.svg" | cmp -s - "$tmp/sample.svg" || fail "a gzip log's picture differs from the plain log's"
head -c 600 "$tmp/gz.jsonl.gz" >"$tmp/cut.jsonl.gz"
"$report" -o "$tmp/cut.svg" "$tmp/cut.jsonl.gz" >/dev/null 2>"$tmp/cut.err"
[ $? -eq 1 ] || fail "a cut gzip log was not refused with status 1"
grep -q '^gzip: .*cut.jsonl.gz: unexpected end of file' "$tmp/cut.err" || { cat "$tmp/cut.err"; fail "a cut gzip log: gzip did not say so"; }
grep -qx "cupool-report: error reading $tmp/cut.jsonl.gz" "$tmp/cut.err" || { cat "$tmp/cut.err"; fail "a cut gzip log: no error"; }
"$report" -o "$tmp/in.svg" - <"$tmp/gz.jsonl.gz" >/dev/null 2>"$tmp/in.err"
[ $? -eq 1 ] || fail "a gzip log on standard input was not refused with status 1"
grep -qx 'cupool-report: standard input is compressed: give its path, or pipe it through zcat' "$tmp/in.err" ||
    { cat "$tmp/in.err"; fail "a gzip log on standard input: no clear message"; }
echo "test_report: ok"
exit 0
