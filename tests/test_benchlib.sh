#!/bin/sh
# bench/benchlib.py's ratios of the framework benchmarks (PyTorch, CuPy)
# against their reference configuration, with interleaved rounds: the time
# ratio compares the lowest round of each over the rounds both ran (a stage
# cut short in its last round once compared cupool's one run with the
# reference's lowest of two), the paired ratio is the median of the
# round-by-round ratios.  Also the schedule of bench/benchlib.py's
# run_configs: full rounds of every configuration, then rounds of the
# configurations the targets compare alone (a fake worker stands in for
# PyTorch).
set -u
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
[ -f "$srcdir/bench/benchlib.py" ] || { echo "test_benchlib: $srcdir/bench/benchlib.py missing" >&2; exit 99; }
command -v python3 >/dev/null 2>&1 || { echo "test_benchlib: no python3" >&2; exit 77; }
exec python3 - "$srcdir/bench" <<'PY'
import io, sys, contextlib
sys.path.insert(0, sys.argv[1])
import benchlib as B

def row(config, rounds):
    ms = dict(rounds)
    best = min(ms, key=ms.get)
    return {"workload": "train", "config": config, "ok": True, "ms_median": ms[best], "round": best,
            "rounds_ms": list(ms.values()), "round_nos": list(ms.keys()), "peak_mib": 100.0, "loss": 1.0}

def close(a, b):
    return a is not None and abs(a - b) < 1e-9

failures = []
def check(name, got, want):
    if not close(got, want):
        failures.append("%s: got %r, want %r" % (name, got, want))

ref = row("caching", {1: 15.0, 2: 20.0, 3: 14.0})
# Ran rounds 1 and 2 only (out of time in round 3): lowest of those two
# against the reference's lowest of the same two.
cut = row("cupool", {1: 16.5, 2: 17.0})
check("cut short, time ratio", B.lowest_ratio(cut, ref), 16.5 / 15.0)
check("cut short, paired ratio", B.paired_ratio(cut, ref), B.median([16.5 / 15.0, 17.0 / 20.0]))
# Every round: the lowest of each, whichever rounds they fall in.
full = row("cupool", {1: 18.0, 2: 16.2, 3: 16.8})
check("full, time ratio", B.lowest_ratio(full, ref), 16.2 / 14.0)
check("full, paired ratio", B.paired_ratio(full, ref), B.median([18.0 / 15.0, 16.2 / 20.0, 16.8 / 14.0]))
# The reference missing the only round the row ran: the row's own lowest.
alone = row("cupool", {4: 15.5})
check("no common round", B.lowest_ratio(alone, ref), 15.5 / 14.0)

# compare_to_reference writes those two ratios into the rows.
rows = [ref, cut, full]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    checks = B.compare_to_reference("torch", rows, ["train"], "caching", "caching", lambda wl: "loss", "loss",
                                    1e-6, 1e-2, lambda wl: "step")
check("compare_to_reference, reference", ref["time_ratio"], 1.0)
check("compare_to_reference, cut short", cut["time_ratio"], 16.5 / 15.0)
check("compare_to_reference, full", full["time_ratio"], 16.2 / 14.0)
if not all(c["ok"] for c in checks):
    failures.append("result checks failed: %r" % checks)

# run_configs: one full round of a, b and c, then two rounds of the focus
# pairs alone (b is skipped by skip()); the logs name every round.
import atexit, json, os, shutil, tempfile
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, True)
fake = os.path.join(tmp, "fake_worker.py")
with open(fake, "w") as f:
    f.write("import json, sys\n"
            "config, wl = sys.argv[sys.argv.index('--worker') + 1], sys.argv[sys.argv.index('--workload') + 1]\n"
            "print(json.dumps({'config': config, 'workload': wl, 'ok': True, 'peak_mib': 1.0,\n"
            "                  'ms_median': {'a': 10.0, 'b': 11.0, 'c': 12.0}[config]}))\n")
os.environ.pop("BENCH_DEADLINE", None)
with contextlib.redirect_stderr(io.StringIO()):
    got, errors = B.run_configs(fake, "fake", ["a", "b", "c"], ["w", "v"], [], lambda c: {}, lambda c: None,
                                lambda wl, free: wl == "v", None, None, 30, os.path.join(tmp, "logs"),
                                rounds=1, focus=[("w", "a"), ("w", "c"), ("x", "a")], focus_rounds=2)
nos = {r["config"]: r.get("round_nos") for r in got}
if errors or nos != {"a": [1, 2, 3], "b": [1], "c": [1, 2, 3]}:
    failures.append("run_configs schedule: got %r, errors %r" % (nos, errors))
logs = sorted(os.listdir(os.path.join(tmp, "logs")))
want_logs = sorted("w.%s.round%d.%s" % (c, n, ext) for c, ns in (("a", (1, 2, 3)), ("b", (1,)), ("c", (1, 2, 3)))
                   for n in ns for ext in ("out", "err"))
if logs != want_logs:
    failures.append("run_configs logs: got %r" % logs)

for f in failures:
    print("test_benchlib: " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
