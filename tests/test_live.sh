#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Live statistics: tests/helpers/live_alloc runs under cupool
# (CUPOOL_STATS=1) while cupool top --once --json and cupool stat read its page: the values
# move between two reads, and once it has stopped allocating they match what
# it did (device, pinned host and managed memory) and, at its exit, what
# CUPOOL_STATS prints; the page is gone after
# exit.  CUPOOL_LIVE=0 makes no page, nor does a directory that cannot hold
# one (one message); the page of a process killed with -9, or of a pid now
# another process's, is removed by the next reader; a page
# with group or other permission bits, or of another user, is not shown; a
# forked child's exit leaves its parent's page.  The Prometheus endpoint's
# answer parses as the text format 0.0.4, other paths get 404, and an idle
# client does not hold up others.  The page carries the sharing figures
# (CUPOOL_SHARE) and each device's idle memory, and the table shows them.
# The terminal view, driven in tmux, shows
# the process row and totals and quits on q.
# Every wait polls with a deadline.  Skipped (77) without python3.
set -u
test_name=test_live
# shellcheck source=tests/live_env.sh
. "$(dirname "$0")/live_env.sh"
fail() { echo "test_live: $*" >&2; exit 1; }

cat >"$tmp/check.py" <<'PY'
import json, re, socket, sys, time, urllib.request, urllib.error

def records(text):
    return [json.loads(l) for l in text.splitlines() if l.strip()]

def device(pid, text):
    for r in records(text):
        if r["pid"] == pid and r["devices"]:
            return r["devices"][0]
    return None

cmd = sys.argv[1]
if cmd == "field":                      # field PID KEY < json lines
    d = device(int(sys.argv[2]), sys.stdin.read())
    print(d[sys.argv[3]] if d else "none")
elif cmd == "pids":                     # pids < json lines
    print(" ".join(str(r["pid"]) for r in records(sys.stdin.read())))
elif cmd == "settled":                  # settled PID COUNTS < one stat --json
    text = sys.stdin.read()
    d = device(int(sys.argv[2]), text)
    want = open(sys.argv[3]).read().split()
    want = dict(zip(want[0::2], map(int, want[1::2])))
    ok = d and d["pooled_allocs"] == want["allocs"] and d["pooled_frees"] == want["frees"] \
        and d["in_use"] == want["in_use"]
    # Pinned host and managed blocks: each allocated and freed once a round,
    # later ones served by the block kept at the free before (once its fence
    # has completed; the exact counts are compared with CUPOOL_STATS below).
    r = [r for r in records(text) if r["pid"] == int(sys.argv[2])]
    for kind, n in (("pinned_host", want["host"]), ("managed", want["managed"])):
        k = r[0][kind] if r else {}
        ok = ok and k.get("allocs") == n and k.get("frees") == n and k.get("kept_frees") == n \
            and 0 < k.get("reused", 0) <= n - 1 and k.get("kept", 0) > 0
    sys.exit(0 if ok else 1)
elif cmd == "share":                    # share PID ONCE_TEXT < one stat --json of the same moment
    # Sharing one GPU: the page says the process answers the others
    # (CUPOOL_SHARE is on by default) and has asked and given nothing (it
    # never ran out); each device's idle is what its pools hold unused; the
    # table has the IDLE column and the sharing line.
    pid, text = int(sys.argv[2]), open(sys.argv[3]).read()
    r = [r for r in records(sys.stdin.read()) if r["pid"] == pid]
    h = r[0]["share"] if r else {}
    ok = h.get("answers_peers") is True and h.get("asked") == 0 and h.get("given") == 0
    ok = ok and all(d["idle"] == max(d["reserved"] - d["in_use"], 0) for d in r[0]["devices"])
    ok = ok and re.search(r"^ *PID +COMMAND +DEV +IN USE +RESERVED +IDLE ", text, re.M) is not None
    ok = ok and re.search(r"^sharing: \d+ process(es)? answers? the others; ", text, re.M) is not None
    sys.exit(0 if ok else 1)
elif cmd == "kinds":                    # kinds ONCE_TEXT < json lines of the same moment
    # The view's line per kind of kept memory sums every page that has
    # allocations of that kind; no line for a kind nobody allocated.
    text, pages = open(sys.argv[2]).read(), records(sys.stdin.read())
    ok = True
    for key, name in (("pinned_host", "pinned host"), ("managed", "managed")):
        users = [p[key] for p in pages if p[key]["allocs"]]
        m = re.search(r"^%s memory: (\d+) process(?:es)? keeps? [^;]+; allocations (\d+), "
                      r"served by kept blocks (\d+)$" % name, text, re.M)
        if not users:
            ok = ok and m is None
            continue
        ok = ok and m is not None and list(map(int, m.groups())) == \
            [len(users), sum(u["allocs"] for u in users), sum(u["reused"] for u in users)]
    sys.exit(0 if ok else 1)
elif cmd == "compare":                  # compare STAT_TEXT STATS_ERR PID
    stat, stats = open(sys.argv[2]).read(), open(sys.argv[3]).read()
    # The process's own summary (its forked child printed one too).
    stats = stats[stats.index("statistics for pid %s " % sys.argv[4]):]
    stats = stats.split("statistics for pid")[1]
    def grab(pattern, text, what):
        m = re.search(pattern, text, re.M)
        if not m:
            sys.exit("no %s line in:\n%s" % (what, text))
        return m.groups()
    pairs = [(r"pooled allocations\s+(\d+)(?: \([^)]*\))?, frees (\d+)", "pooled"),
             (r"native allocations\s+(\d+)", "native"),
             (r"peak in use ([0-9.]+ \w+),", "peak in use"),
             (r"trims (\d+), OOM retries (\d+), rewritten memsets (\d+)", "trims"),
             (r"allocations served by a ready block (\d+)", "ready"),
             (r"pinned host memory:\n.*allocations (\d+) \(served by kept blocks (\d+)\), frees (\d+) \(kept (\d+)\)"
              r"\n.*kept now (.*)", "pinned host"),
             (r"managed memory:\n.*allocations (\d+) \(served by kept blocks (\d+)\), frees (\d+) \(kept (\d+)\)"
              r"\n.*kept now (.*)", "managed")]
    for pattern, what in pairs:
        a, b = grab(pattern, stat, what), grab(pattern, stats, what)
        if a != b:
            sys.exit("%s: cupool stat says %s, CUPOOL_STATS says %s" % (what, a, b))
elif cmd == "prom":                     # prom PORT PID
    port, pid = int(sys.argv[2]), sys.argv[3]
    base = "http://127.0.0.1:%d" % port
    # A client that connects and says nothing must not hold up the others.
    idle = socket.create_connection(("127.0.0.1", port))
    t0 = time.time()
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        assert r.status == 200, r.status
        ctype = r.headers["Content-Type"]
        assert "text/plain" in ctype and "version=0.0.4" in ctype, ctype
        body = r.read().decode("utf-8")
    assert time.time() - t0 < 3, "an idle client held up a scrape"
    idle.close()
    name_re = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
    label_re = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
    sample_re = re.compile(r"^(%s)(\{(?:%s)(?:,%s)*,?\})? (\S+)( -?\d+)?$" % (name_re, label_re, label_re))
    helped, typed, seen = set(), {}, {}
    for n, line in enumerate(body.split("\n"), 1):
        if line == "":
            assert n == len(body.split("\n")), "empty line %d" % n
            continue
        if line.startswith("#"):
            m = re.match(r"^# (HELP|TYPE) (%s) (.*)$" % name_re, line)
            if not m:
                assert not line.startswith("# HELP") and not line.startswith("# TYPE"), "line %d: %r" % (n, line)
                continue
            kind, name, rest = m.groups()
            if kind == "HELP":
                assert name not in helped, "second HELP for %s" % name
                helped.add(name)
            else:
                assert rest in ("counter", "gauge", "histogram", "summary", "untyped"), line
                assert name not in typed and name not in seen, "TYPE of %s late or twice" % name
                typed[name] = rest
            continue
        m = sample_re.match(line)
        assert m, "line %d is not a sample: %r" % (n, line)
        name, value = m.group(1), m.group(3)
        float(value)
        assert name in helped and name in typed, "line %d: %s has no HELP/TYPE before it" % (n, name)
        seen.setdefault(name, []).append(line)
    want = 'cupool_in_use_bytes{pid="%s",device="0",command="' % pid
    assert any(l.startswith(want) for l in seen.get("cupool_in_use_bytes", [])), "no in-use sample for " + pid
    for name in ("cupool_reserved_bytes", "cupool_pooled_allocations_total", "cupool_oom_retries_total",
                 "cupool_idle_bytes", "cupool_share_requests_total", "cupool_share_given_bytes_total"):
        assert name in seen, "no " + name
    for kind in ("pinned_host", "managed"):
        want = 'cupool_kept_allocations_total{pid="%s",kind="%s",command="' % (pid, kind)
        got = [l for l in seen.get("cupool_kept_allocations_total", []) if l.startswith(want)]
        assert got and int(got[0].split()[-1]) > 0, "no %s allocations for %s" % (kind, pid)
    try:
        urllib.request.urlopen(base + "/nothing", timeout=10)
        raise AssertionError("/nothing answered")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code
    # A request that never ends is cut off, not buffered without bound.
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000)
    except OSError:
        pass
    answer = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:80]
PY
py() { "$python" "$tmp/check.py" "$@"; }

top_json() { "$launcher" top --once --json; }
# start NAME [LAUNCHER OPTIONS]: runs the helper under cupool; sets $dir, $pid.
start() {
    dir=$tmp/run.$1
    shift
    mkdir "$dir"
    CUPOOL_STATS=1 "$launcher" --library "$lib" "$@" -- "$helper" "$dir" >"$dir/out" 2>"$dir/stats.err" &
    pid=$!
    pids="$pids $pid"
    until_ok 20 test -s "$dir/ready" || fail "live_alloc did not start: $(cat "$dir/stats.err")"
    [ "$(cat "$dir/ready")" = "$pid" ] || fail "live_alloc's pid is $(cat "$dir/ready"), not $pid"
}
# The page of a pid (cupool.UID.PID.START.RANDOM), or nothing.
page_of() { for f in "$CUPOOL_LIVE_DIR/cupool.$uid.$1".*; do [ -e "$f" ] && echo "$f" && break; done; }

# ---- CUPOOL_LIVE=0: no page (one would be there before ready) --------------
start off --no-live
[ -e "$(page_of "$pid")" ] && fail "CUPOOL_LIVE=0 made a page"
touch "$dir/quiet" "$dir/exit"
wait "$pid" || fail "live_alloc failed with CUPOOL_LIVE=0"
[ -n "$(ls -A "$CUPOOL_LIVE_DIR")" ] && fail "pages left: $(ls -A "$CUPOOL_LIVE_DIR")"

# ---- a directory that cannot hold pages: one message, the program runs on ---
mkdir "$tmp/run.nodir"
CUPOOL_LIVE_DIR=$tmp/missing "$launcher" --library "$lib" -- "$helper" "$tmp/run.nodir" 2>"$tmp/nodir.err" &
nodir=$!
pids="$pids $nodir"
until_ok 20 test -s "$tmp/run.nodir/ready" || fail "live_alloc did not start: $(cat "$tmp/nodir.err")"
touch "$tmp/run.nodir/quiet" "$tmp/run.nodir/exit"
wait "$nodir" || fail "live_alloc failed without a page directory: $(cat "$tmp/nodir.err")"
[ "$(grep -c 'live statistics off' "$tmp/nodir.err")" = 1 ] || fail "expected one message: $(cat "$tmp/nodir.err")"

# ---- kill -9: the next reader removes the page -----------------------------
start killed
killed=$pid
[ -f "$(page_of "$killed")" ] || fail "no page for $killed (did its forked child's exit remove it?)"
kill -9 "$killed"
wait "$killed" 2>/dev/null
top_json >"$tmp/after-kill.json" || fail "cupool top failed after a kill"
[ -e "$(page_of "$killed")" ] && fail "the page of a killed process is still there"
case " $(py pids <"$tmp/after-kill.json") " in *" $killed "*) fail "a killed process is shown" ;; esac

# ---- the process to watch ----------------------------------------------------
start main
main=$pid
main_dir=$dir
allocs_of() { top_json | py field "$main" pooled_allocs; }
has_allocs() { a=$(allocs_of); [ "$a" != none ] && [ "$a" -gt 0 ]; }
until_ok 10 has_allocs || fail "no allocations on $main's page: $(top_json)"
first=$a
moved() { a=$(allocs_of); [ "$a" != none ] && [ "$a" -gt "$first" ]; }
until_ok 10 moved || fail "the allocations stayed at $first"
"$launcher" stat "$main" >"$tmp/stat1" || fail "cupool stat $main failed"
grep -q "statistics for pid $main " "$tmp/stat1" || fail "cupool stat printed: $(cat "$tmp/stat1")"
grep -q "free mode ordered" "$tmp/stat1" || fail "no free mode in: $(cat "$tmp/stat1")"
out=$("$launcher" top --once) || fail "cupool top --once failed"
printf '%s\n' "$out" | grep -q "^ *$main " || fail "no row for $main in: $out"
printf '%s\n' "$out" | grep -q "^ *TOTAL " || fail "no totals in: $out"

# ---- pages cupool-top must refuse, and a pid now another process's ----------
# A copy of main's page that says it is this shell's (alive), with the right
# start time: accepted while private, refused with mode 0644 or another owner.
shell_start=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20)
patch_page() { # patch_page PID START_TIME: main's page, as pid's; sets $fake
    fake=$CUPOOL_LIVE_DIR/cupool.$uid.$1.$2.0123456789abcdef
    "$python" - "$(page_of "$main")" "$fake" "$1" "$2" <<'PY'
import struct, sys
src, dst, pid, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = bytearray(open(src, "rb").read())
struct.pack_into("<Q", data, 16, 2)     # .seq: even, whatever the copy caught
struct.pack_into("<i", data, 24, pid)   # .pid
struct.pack_into("<Q", data, 32, start) # .start_time
with open(dst + ".tmp", "wb") as f:
    f.write(data)
PY
    chmod 600 "$fake.tmp" && mv "$fake.tmp" "$fake"
}
patch_page $$ "$shell_start"
"$launcher" stat $$ >/dev/null || fail "a well-formed page was not read (the checks below would prove nothing)"
chmod 644 "$fake"
"$launcher" stat $$ 2>"$tmp/err" && fail "a page with mode 0644 was read"
grep -q refused "$tmp/err" || fail "no refusal message: $(cat "$tmp/err")"
case " $(top_json | py pids) " in *" $$ "*) fail "a page with mode 0644 is shown" ;; esac
chmod 600 "$fake"
if [ "$uid" = 0 ]; then
    chown 12345 "$fake"
    "$launcher" stat $$ 2>/dev/null && fail "a page of another user was read"
    case " $(top_json | py pids) " in *" $$ "*) fail "a page of another user is shown" ;; esac
    chown 0 "$fake"
else
    echo "test_live: not root: the page of another user is not tried"
fi
ln -s "$(page_of "$main")" "$fake.link" && mv "$fake.link" "$fake"
"$launcher" stat $$ 2>/dev/null && fail "a symbolic link was followed"
rm -f "$fake"
# This shell's pid with another start time: the process that made the page
# is gone, its pid reused.
patch_page $$ $((shell_start + 1))
"$launcher" stat $$ 2>"$tmp/err" && fail "a page of a reused pid was read"
[ -e "$fake" ] && fail "the page of a reused pid was not removed"
"$launcher" stat 999999999 2>/dev/null
[ $? = 1 ] || fail "cupool stat of a pid with no page did not exit 1"

# ---- the Prometheus endpoint -------------------------------------------------
"$launcher" top --prometheus 0 2>"$tmp/prom.err" &
prom=$!
pids="$pids $prom"
serving() { grep -q 'serving http://127.0.0.1:[0-9]*/metrics' "$tmp/prom.err"; }
until_ok 10 serving || fail "the endpoint did not start: $(cat "$tmp/prom.err")"
port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/prom.err")
py prom "$port" "$main" || fail "the endpoint's answer is wrong"
kill -TERM "$prom"
wait "$prom" || fail "the endpoint did not exit cleanly on SIGTERM"

# ---- the terminal view, in tmux ----------------------------------------------
if command -v tmux >/dev/null 2>&1; then
    sock=$tmp/tmux.sock
    tmux -S "$sock" new-session -d -x 160 -y 40 \
        "CUPOOL_LIVE_DIR='$CUPOOL_LIVE_DIR' CUPOOL_TOP='$CUPOOL_TOP' '$launcher' top; echo \$? >'$tmp/view.done'" ||
        fail "tmux did not start"
    screen() { tmux -S "$sock" capture-pane -p >"$tmp/screen" 2>/dev/null; }
    shows() { screen && grep -q "^ *$main " "$tmp/screen" && grep -q "^ *TOTAL " "$tmp/screen"; }
    until_ok 10 shows || fail "the view does not show $main and totals: $(cat "$tmp/screen")"
    tmux -S "$sock" send-keys q
    until_ok 10 test -s "$tmp/view.done" || fail "the view did not quit on q"
    [ "$(cat "$tmp/view.done")" = 0 ] || fail "the view exited $(cat "$tmp/view.done")"
else
    echo "test_live: tmux not found: the terminal view is not tried"
fi

# ---- quiet, then exit: the page matches what the process did and said ---------
touch "$main_dir/quiet"
until_ok 20 test -s "$main_dir/counts" || fail "live_alloc did not go quiet"
settled() { "$launcher" stat --json "$main" | py settled "$main" "$main_dir/counts"; }
until_ok 10 settled || fail "the page does not settle at $(cat "$main_dir/counts"): $("$launcher" stat --json "$main")"
"$launcher" stat "$main" >"$tmp/stat2" || fail "cupool stat failed"
# The table's lines for pinned host and managed memory (a read of the text
# and one of the JSON agree once no process allocates between them).
kinds_agree() { "$launcher" top --once >"$tmp/once" && "$launcher" top --once --json | py kinds "$tmp/once"; }
until_ok 10 kinds_agree || fail "the table's kept memory lines disagree with --json: $(cat "$tmp/once")"
grep -q "^pinned host memory: " "$tmp/once" && grep -q "^managed memory: " "$tmp/once" ||
    fail "no pinned host or managed memory line in: $(cat "$tmp/once")"
"$launcher" stat --json "$main" | py share "$main" "$tmp/once" ||
    fail "the page's sharing figures or the table's IDLE and sharing lines are wrong: $(cat "$tmp/once")"
grep -q "^cupool:   sharing: answers other processes' requests (CUPOOL_SHARE)" "$tmp/stat2" ||
    fail "cupool stat has no sharing line: $(cat "$tmp/stat2")"
touch "$main_dir/exit"
wait "$main" || fail "live_alloc failed: $(cat "$main_dir/stats.err")"
py compare "$tmp/stat2" "$main_dir/stats.err" "$main" || fail "cupool stat and CUPOOL_STATS disagree"
[ -e "$(page_of "$main")" ] && fail "the page is still there after exit"
echo "test_live: ok"
