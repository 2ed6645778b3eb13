#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cupool-top beside hostile neighbours, against tests/helpers/live_alloc
# running under cupool and pages written by hand:
#   prom-labels   the Prometheus labels name the executable, not the command
#                 line (an argument holding a secret is not published)
#                 unless --command-lines asks for it;
#   prom-peers    another user's scrape of the TCP endpoint is refused
#                 (403), a Unix socket endpoint is mode 0600 and answers
#                 this user (another user's connect fails);
#   live-ns       processes in other PID namespaces sharing the pages'
#                 directory (unshare, as root): two of the same pid both
#                 keep their pages, and a reader of this namespace, which
#                 cannot see their processes, removes neither;
#   text          a command line of bytes that are not UTF-8, escape and
#                 BEL characters and a character cut short comes out as
#                 valid UTF-8 in --json, /metrics, the table and stat,
#                 with no raw control character;
#   budgets       a page whose sequence number stays odd costs a scrape
#                 little, and 64 silent clients keep no scrape out;
#   truncate      cupool-top survives a page cut short while it reads it;
#   top-total     a process is counted once per device in the totals,
#                 however many rows its page gives it (tests/helpers/make_page
#                 writes such pages by hand);
# Every wait polls with a deadline.  Skipped (77) without python3.
set -u
test_name=test_top_neighbours
# shellcheck source=tests/live_env.sh
. "$(dirname "$0")/live_env.sh"
failed=0
fail() { echo "test_top_neighbours: $*" >&2; failed=1; }
die() { echo "test_top_neighbours: $*" >&2; exit 1; }

cat >"$tmp/check.py" <<'PY'
import json, os, socket, sys, time

def get(connect, path="/metrics", timeout=10):
    s = connect()
    s.settimeout(timeout)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    return data

def tcp(port):
    # A plain connect: no name lookup (another user may not read the
    # interpreter's encodings once it has changed user).
    def c():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect(("127.0.0.1", port))
        return s
    return c

def unix(path):
    def c():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return s
    return c

def as_nobody(fn):
    """Runs fn in a child as user 65534; its exit status."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            os._exit(fn())
        except BaseException as e:
            print("as nobody:", e, file=sys.stderr)
            os._exit(99)
    return os.waitpid(pid, 0)[1] >> 8

cmd = sys.argv[1]
if cmd == "body":                       # body PORT|PATH > the answer
    target = sys.argv[2]
    c = unix(target) if "/" in target else tcp(int(target))
    sys.stdout.buffer.write(get(c))
elif cmd == "nobody-tcp":               # nobody-tcp PORT: exit 0 when refused
    port = int(sys.argv[2])
    def try_it():
        answer = get(tcp(port))
        print("nobody got:", answer[:60], file=sys.stderr)
        return 0 if answer.startswith(b"HTTP/1.1 403") and b"cupool_in_use_bytes" not in answer else 1
    sys.exit(as_nobody(try_it))
elif cmd == "utf8":                     # utf8 [json] < output: valid UTF-8, no raw ESC or BEL
    data = sys.stdin.buffer.read()
    text = data.decode("utf-8")        # strict: raises on a bad byte
    assert "\x1b" not in text and "\x07" not in text, "raw control characters: %r" % text[:200]
    if len(sys.argv) > 2:
        for line in text.splitlines():
            if line.strip():
                json.loads(line)
elif cmd == "slow":                     # slow PORT: 64 silent clients, then 20 scrapes
    port = int(sys.argv[2])
    silent = []
    for i in range(64):
        try:
            silent.append(tcp(port)())
        except OSError:
            pass
    good = 0
    for i in range(20):
        try:
            if get(tcp(port), timeout=3).startswith(b"HTTP/1.1 200"):
                good += 1
        except OSError:
            pass
    print("%d silent clients, %d of 20 scrapes answered" % (len(silent), good))
    sys.exit(0 if good >= 18 else 1)
elif cmd == "timed":                    # timed PORT: one scrape, its seconds
    t0 = time.time()
    answer = get(tcp(int(sys.argv[2])))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:60]
    print("%.3f" % (time.time() - t0))
elif cmd == "nobody-unix":              # nobody-unix PATH: exit 0 when refused
    path = sys.argv[2]
    def try_it():
        try:
            answer = get(unix(path))
        except OSError as e:
            print("nobody refused:", e, file=sys.stderr)
            return 0
        return 0 if b"cupool_in_use_bytes" not in answer else 1
    sys.exit(as_nobody(try_it))
PY
py() { "$python" "$tmp/check.py" "$@"; }

# start NAME [PREFIX...]: runs the helper under cupool in $tmp/run.NAME
# (through PREFIX, a command such as unshare); sets $dir, $pid.
start() {
    dir=$tmp/run.$1
    shift
    mkdir "$dir"
    "$@" "$launcher" --library "$lib" -- "$helper" "$dir" >"$dir/out" 2>"$dir/err" &
    pid=$!
    pids="$pids $pid"
    until_ok 20 test -s "$dir/ready" || die "live_alloc did not start: $(cat "$dir/err")"
}

# prom_start NAME ARGS...: cupool top --prometheus ARGS in the background;
# sets $prom and, for a port, $port.
prom_start() {
    name=$1
    shift
    "$launcher" top "$@" 2>"$tmp/$name.err" &
    prom=$!
    pids="$pids $prom"
    serving() { grep -q 'serving ' "$tmp/$name.err" 2>/dev/null; }
    until_ok 10 serving || die "the endpoint did not start: $(cat "$tmp/$name.err")"
    port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/$name.err")
}
has_sample() { py body "$1" >"$tmp/body" && grep -q "^cupool_in_use_bytes{pid=\"$2\"" "$tmp/body"; }

# ---- prom-labels: no command line in the labels by default ---------------------
start "api-token=s3cret"
main=$pid
prom_start labels --prometheus 0
until_ok 10 has_sample "$port" "$main" || die "no sample for $main: $(cat "$tmp/body")"
grep -q 's3cret' "$tmp/body" && fail "prom-labels: a command line's argument is published: $(grep s3cret "$tmp/body" | head -1)"
grep -q "^cupool_info{pid=\"$main\",command=\"live_alloc\"" "$tmp/body" ||
    fail "prom-labels: no executable name label: $(grep cupool_info "$tmp/body")"
# ---- prom-peers: another user's scrape is refused ---------------------------------
if [ "$uid" = 0 ]; then
    py nobody-tcp "$port" || fail "prom-peers: another user read the TCP endpoint"
else
    echo "test_top_neighbours: not root: another user's scrape is not tried"
fi
kill "$prom"
wait "$prom" 2>/dev/null
prom_start whole --prometheus 0 --command-lines
until_ok 10 has_sample "$port" "$main" || die "no sample for $main: $(cat "$tmp/body")"
grep -q "command=\"[^\"]*api-token=s3cret" "$tmp/body" || fail "prom-labels: --command-lines does not publish command lines"
kill "$prom"
wait "$prom" 2>/dev/null
# ---- prom-peers: a Unix socket of mode 0600 ---------------------------------------
sock=$tmp/prom.sock
prom_start unix --prometheus "$sock"
until_ok 10 test -S "$sock" || die "no socket at $sock"
mode=$(stat -c %a "$sock")
[ "$mode" = 600 ] || fail "prom-peers: the socket has mode $mode"
until_ok 10 has_sample "$sock" "$main" || fail "prom-peers: no sample over the Unix socket: $(cat "$tmp/body")"
if [ "$uid" = 0 ]; then
    chmod 755 "$tmp" # so that only the socket's own mode keeps nobody out
    py nobody-unix "$sock" || fail "prom-peers: another user read the Unix socket"
    chmod 700 "$tmp"
fi
kill "$prom"
wait "$prom" 2>/dev/null
[ -e "$sock" ] && fail "prom-peers: the socket is left after the endpoint ended"

# ---- live-ns: pages of other PID namespaces -------------------------------------
if [ "$uid" = 0 ] && unshare --pid --fork true 2>/dev/null; then
    start ns1 unshare --pid --fork
    ns1=$(cat "$dir/ready")
    start ns2 unshare --pid --fork
    ns2=$(cat "$dir/ready")
    echo "test_top_neighbours: pids in their namespaces: $ns1, $ns2"
    pages_of() { ls "$CUPOOL_LIVE_DIR" | grep -c "^cupool\.$uid\.$1\."; }
    if [ "$ns1" = "$ns2" ]; then
        [ "$(pages_of "$ns1")" = 2 ] || fail "live-ns: two processes of pid $ns1 in two namespaces: $(pages_of "$ns1") page(s)"
    fi
    for round in 1 2 3; do
        "$launcher" top --once --json >"$tmp/ns.json" || fail "live-ns: cupool top failed"
        "$launcher" stat "$ns1" >/dev/null 2>&1
    done
    [ "$(pages_of "$ns1")" -ge 1 ] && [ "$(pages_of "$ns2")" -ge 1 ] ||
        fail "live-ns: a reader removed the page of a live process of another namespace: $(ls "$CUPOOL_LIVE_DIR")"
    shown=$(grep -c "\"pid\":\($ns1\|$ns2\)," "$tmp/ns.json")
    [ "$shown" -ge 2 ] || fail "live-ns: the processes of other namespaces are not shown: $(cat "$tmp/ns.json")"
else
    echo "test_top_neighbours: not root, or no unshare: pages of other PID namespaces are not tried"
fi

# ---- top-total: a process counted once per device ---------------------------------
make_page=$builddir/tests/helpers/make_page
[ -x "$make_page" ] || die "build tests/helpers/make_page first"
mkdir "$tmp/made"
made() { "$make_page" "$tmp/made" "$@" || die "make_page failed"; }
page=$(made $$ --dup-device)
total=$("$launcher" top --once --dir "$tmp/made" | grep "^ *TOTAL ")
case $total in
*" 1 process "*) ;;
*) fail "top-total: one process with two rows on device 0 is counted as: $total" ;;
esac
rm -f "$page"

# ---- text: a command line of any bytes comes out as UTF-8, escaped ----------------
# Bytes no UTF-8 has, ESC [2J (clear the screen), BEL, then a character cut
# after its second byte (a command line cut at 255 bytes).
page=$(made $$ --command ff1b5b324a07636166c3a9e282)
"$launcher" top --once --json --dir "$tmp/made" | py utf8 json || fail "text: cupool top --json is not valid UTF-8 JSON"
"$launcher" top --once --dir "$tmp/made" | py utf8 || fail "text: cupool top --once writes raw bytes"
"$launcher" stat --dir "$tmp/made" $$ | py utf8 || fail "text: cupool stat writes raw bytes"
CUPOOL_LIVE_DIR=$tmp/made prom_start text --prometheus 0
py body "$port" | py utf8 || fail "text: /metrics is not valid UTF-8"
kill "$prom"
wait "$prom" 2>/dev/null
rm -f "$page"

# ---- budgets: slow clients and a page that never settles ----------------------------
for i in 1 2 3; do made $$ --odd >/dev/null; done
CUPOOL_LIVE_DIR=$tmp/made prom_start budget --prometheus 0
took=$(py timed "$port") || fail "budgets: no answer beside pages that never settle"
echo "test_top_neighbours: a scrape beside three pages that never settle took $took s"
"$python" -c "import sys; sys.exit(0 if float(sys.argv[1]) < 0.3 else 1)" "${took:-9}" ||
    fail "budgets: three pages that never settle made a scrape take $took s"
py slow "$port" || fail "budgets: slow clients kept scrapes out"
kill "$prom"
wait "$prom" 2>/dev/null
rm -f "$tmp/made"/*

# ---- a page cut short while it is read -----------------------------------------------
page=$(made $$)
"$make_page" --truncate "$page" 4 &
cutter=$!
pids="$pids $cutter"
rounds=0 bus=0
while kill -0 "$cutter" 2>/dev/null; do
    "$CUPOOL_TOP" --once --json --dir "$tmp/made" >/dev/null 2>&1
    [ $? -ge 128 ] && bus=$((bus + 1))
    rounds=$((rounds + 1))
done
wait "$cutter" || fail "truncate: make_page --truncate failed"
echo "test_top_neighbours: $rounds reads of a page cut short meanwhile, $bus killed by a signal"
[ "$bus" = 0 ] || fail "truncate: cupool-top was killed by a signal reading a page cut short ($bus of $rounds)"
rm -f "$page"

[ $failed = 0 ] && echo "test_top_neighbours: ok"
exit $failed
