#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/benchlib.py's ratios of the framework benchmarks (PyTorch, CuPy)
# against their reference configuration, with interleaved rounds: the time
# ratio compares the lowest round of each over the rounds both ran (a stage
# cut short in its last round once compared cupool's one run with the
# reference's lowest of two), the paired ratio is the median of the
# round-by-round ratios.  Also the schedule of bench/benchlib.py's
# run_configs: full rounds of every configuration, then rounds of the
# configurations the targets compare alone (a fake worker stands in for
# PyTorch).  Then the pieces of the memory parity suite
# (bench/parity_bench.py): benchlib.ProcessMemory against a fake NVML (the
# process's own figure, the device's above its baseline, a peak between two
# samples of the caller caught by the thread), the CUPOOL_STATS summary
# parsed from stderr, the schedule, the ratios and targets over rounds (the
# statistics round counting for memory only), a whole run of the driver with
# a fake worker and a fake launcher, and its section of the report.
set -u
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
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

# ---- the memory parity suite ---------------------------------------------------------
import threading, time, types
import parity_bench as P
import make_report as R

class FakeNvml(object):
    """Device used = base + process; the process figure follows `levels`, one
    value per read, the last one kept."""
    def __init__(self, levels, pid, base=1000 << 20, listed=True):
        self.levels, self.pid, self.base, self.listed, self.reads = list(levels), pid, base, listed, 0
        self.lock = threading.Lock()
    def now(self):
        with self.lock:
            v = self.levels[min(self.reads, len(self.levels) - 1)]
            self.reads += 1
            return v
    def nvmlInit(self): pass
    def nvmlDeviceGetHandleByIndex(self, i): return "h%d" % i
    def nvmlDeviceGetComputeRunningProcesses(self, h):
        v = self.now()
        procs = [types.SimpleNamespace(pid=self.pid + 1, usedGpuMemory=77 << 20)]
        if self.listed:
            procs.append(types.SimpleNamespace(pid=self.pid, usedGpuMemory=v))
        return procs
    def nvmlDeviceGetMemoryInfo(self, h):
        with self.lock:
            v = self.levels[min(max(self.reads - 1, 0), len(self.levels) - 1)]
        return types.SimpleNamespace(used=self.base + v)

MiB = 1 << 20
fake = FakeNvml([0, 100 * MiB, 900 * MiB, 300 * MiB], os.getpid())
m = B.ProcessMemory(interval=0.001, nvml=fake)
m.start()
deadline = time.time() + 5
while fake.reads < 6 and time.time() < deadline:
    time.sleep(0.005)
m.stop()
res = m.result()
if res["mem_source"] != "nvml-process" or not close(res["peak_mib"], 900.0) or res["samples"] < 3:
    failures.append("ProcessMemory, pid listed: %r" % res)
fake = FakeNvml([0, 400 * MiB, 250 * MiB], os.getpid(), listed=False)
m = B.ProcessMemory(interval=60, nvml=fake)
m.sample(); m.sample(); m.sample()
res = m.result()
if res["mem_source"] != "nvml-device" or not close(res["peak_mib"], 400.0) or res["peak_process_mib"] is not None:
    failures.append("ProcessMemory, pid not listed: %r" % res)

class NoNvml(object):
    def nvmlInit(self): raise RuntimeError("no NVML")
m = B.ProcessMemory(nvml=NoNvml()).start()
m.stop()
if m.ctypes_mem is None and m.result()["mem_source"] != "none":
    failures.append("ProcessMemory without NVML: %r" % m.result())

STATS = """\
some program output
cupool: statistics for pid 4242 (policy dedicated, free mode deferred)
cupool:   calls seen:
cupool:     cuMemAlloc_v2                      812
cupool:   device 0:
cupool:     pooled allocations  812 (41.5 GiB), frees 800
cupool:     native allocations  0 (0 B), frees 0
cupool:     peak in use 1.0 GiB, peak reserved 3.4 GiB
cupool:     trims 0, OOM retries 0, rewritten memsets 0
cupool:     allocations served by a ready block 700 (events recorded for them 12)
cupool:   time in cupool 1.234 ms; native calls would have cost about 80.000 ms (saved about 78.766 ms)
"""
text, st = B.cupool_stats(STATS)
want = {"pooled_allocs": 812, "pooled_frees": 800, "native_allocs": 0, "trims": 0, "oom_retries": 0,
        "ready_reuses": 700, "peak_in_use_mib": 1024.0, "peak_reserved_mib": 3.4 * 1024}
if st != want or not text.startswith("cupool: statistics") or "some program" in text:
    failures.append("cupool_stats: %r" % st)
if B.cupool_stats("no summary here\n") != ("", {}):
    failures.append("cupool_stats without a summary")

sched = P.schedule(["w"], ["caching", "async", "nocache-native", "nocache-cupool"], 3)
if [c for n, _, c in sched if n == 1] != ["caching", "async", "nocache-native", "nocache-cupool"] or \
        [c for n, _, c in sched if n == 2] != ["async", "nocache-cupool", "caching"] or \
        [c for n, _, c in sched if n == 3] != ["nocache-cupool", "caching", "async"]:
    failures.append("parity schedule: %r" % sched)

def prow(config, runs, wl="cnn"):
    """runs: {round: (ms, peak MiB)}; round 1 of cupool's runs has statistics on."""
    cup = config.startswith("nocache-cupool")
    return {"workload": wl, "config": config, "ok": True, "runs": [
        dict({"round": n, "ms": ms, "peak_mib": peak, "result": 2.0, "mem_source": "nvml-process",
              "stats": cup and n == 1}, **({"cupool_stats": {"peak_in_use_mib": 1000.0, "peak_reserved_mib": 3000.0}}
                                           if cup and n == 1 else {}))
        for n, (ms, peak) in runs.items()]}

prows = [prow("caching", {1: (10.0, 2000.0), 2: (11.0, 2000.0), 3: (10.5, 2010.0)}),
         prow("async", {1: (10.2, 1900.0), 2: (10.4, 1900.0), 3: (10.6, 1900.0)}),
         prow("nocache-native", {1: (40.0, 1500.0)}),
         prow("nocache-cupool", {1: (99.0, 2100.0), 2: (10.9, 2190.0), 3: (10.6, 2050.0)}),
         prow("nocache-cupool-deferred", {1: (99.0, 4000.0), 2: (10.0, 2000.0)})]
for r in prows:
    P.summarize(r)
targets, pchecks = P.compare(prows, ["cnn"])
cup = B.find_row(prows, "cnn", "nocache-cupool")
deferred = B.find_row(prows, "cnn", "nocache-cupool-deferred")
check("parity: the statistics round's time does not count", cup["ms_median"], (10.9 + 10.6) / 2)
check("parity: memory counts every round", cup["peak_mib"], 2100.0)
check("parity: worst round against caching", cup["mem_vs_caching"], 2190.0 / 2000.0)
check("parity: worst round against async", deferred["mem_vs_async"], 4000.0 / 1900.0)
check("parity: time over the rounds both ran", cup["time_vs_caching"], ((10.9 + 10.6) / 2) / ((11.0 + 10.5) / 2))
check("parity: time against async, one round", deferred["time_vs_async"], 10.0 / 10.4)
check("parity: paired ratio", cup["paired_vs_caching"], B.median([10.9 / 11.0, 10.6 / 10.5]))
check("parity: async's spread", B.find_row(prows, "cnn", "async")["ms_spread"], 0.4 / 10.4)
check("parity: cupool's peak reserved", cup["cupool_peak_reserved_mib"], 3000.0)
by_name = {t["name"]: t for t in targets}
want_met = {"parity cnn: cupool / caching, peak memory (worst round)": True,
            "parity cnn: cupool / async, peak memory (worst round)": False,
            "parity cnn: cupool / caching, time (median of rounds)": True,
            "parity cnn: cupool / async, time (median of rounds)": True,
            "parity cnn: cupool-deferred / caching, peak memory (worst round)": False,
            "parity cnn: cupool-deferred / async, time (median of rounds)": True}
for name, met in want_met.items():
    if name not in by_name or by_name[name]["met"] is not met:
        failures.append("parity target %s: %r" % (name, by_name.get(name)))
check("parity: async time threshold is 1 + its spread",
      by_name["parity cnn: cupool / async, time (median of rounds)"]["threshold"], round(1 + 0.4 / 10.4, 4))
if len(targets) != 8 or not pchecks or not all(c["ok"] for c in pchecks):
    failures.append("parity targets/checks: %d targets, checks %r" % (len(targets), pchecks))

# The driver end to end: a fake worker (the JSON of parity_bench's worker) and
# a fake launcher (sets CUPOOL_FREE, prints a statistics summary with --stats).
pw = os.path.join(tmp, "parity_worker.py")
with open(pw, "w") as f:
    f.write("import json, os, sys\n"
            "a = sys.argv\n"
            "config, wl = a[a.index('--worker') + 1], a[a.index('--workload') + 1]\n"
            "assert os.environ.get('HF_HUB_OFFLINE') == '1' and os.environ.get('TRANSFORMERS_OFFLINE') == '1'\n"
            "cup = 'CUPOOL_FAKE' in os.environ\n"
            "assert cup == config.startswith('nocache-cupool')\n"
            "assert (os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING') == '1') == (wl != 'cupy' and config.startswith('nocache'))\n"
            "assert (os.environ.get('PYTORCH_CUDA_ALLOC_CONF') == 'backend:cudaMallocAsync') == (wl != 'cupy' and config == 'async')\n"
            "ms = {'caching': 10.0, 'async': 10.1, 'nocache-native': 30.0}.get(config, 10.2)\n"
            "peak = {'caching': 2000.0, 'async': 1950.0, 'nocache-native': 1500.0}.get(config, 2100.0)\n"
            "print('a line that is not JSON')\n"
            "print(json.dumps({'config': config, 'workload': wl, 'ok': True, 'ms_median': ms, 'peak_mib': peak,\n"
            "                  'mem_source': 'nvml-process', 'loss': 3.0, 'checksum': 3.0, 'torch': 'fake',\n"
            "                  'cupool': {'pooled_allocs': 9} if cup else None}))\n")
launcher = os.path.join(tmp, "fake_cupool")
with open(launcher, "w") as f:
    f.write("#!/bin/sh\nstats=\nwhile [ $# -gt 0 ]; do case $1 in\n"
            "--free) export CUPOOL_FREE=$2; shift 2 ;; --stats) stats=1; shift ;; --) shift; break ;;\n"
            "*) shift ;; esac; done\nexport CUPOOL_FAKE=1\n\"$@\"; rc=$?\n"
            "[ -n \"$stats\" ] && printf '%s' \"$STATS\" >&2\nexit $rc\n")
os.chmod(launcher, 0o755)
os.environ["STATS"] = STATS
out = os.path.join(tmp, "presults")
with contextlib.redirect_stderr(io.StringIO()):
    prows, perrors, pnotes = P.run_all(pw, ["cnn", "cupy"], P.CONFIGS, 3, 1, [], launcher, "/nonexistent/libcupool.so",
                                       30, os.path.join(out, "logs"))
if perrors or pnotes:
    failures.append("parity run_all: errors %r, notes %r" % (perrors, pnotes))
runs = {(r["workload"], r["config"]): [x["round"] for x in r["runs"]] for r in prows}
if runs.get(("cnn", "nocache-native")) != [1] or runs.get(("cupy", "nocache-cupool")) != [1, 2, 3] or len(runs) != 2 * len(P.CONFIGS) - len(P.PYTORCH_ONLY) or ("cupy", "expandable") in runs:
    failures.append("parity run_all rounds: %r" % runs)
st = [x.get("cupool_stats") for r in prows for x in r["runs"] if x.get("stats")]
under_cupool = [c for c in P.CONFIGS if P.config_free(c) is not None]  # each gets a statistics run
if len(under_cupool) != 3 or len(st) != 2 * len(under_cupool) or any(s != want for s in st):
    failures.append("parity run_all statistics: %r" % st)
for r in prows:
    P.summarize(r)
ptargets, pchecks = P.compare(prows, ["cnn", "cupy"])
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    P.print_tables(prows, ["cnn", "cupy"])
    B.finish(out, "parity", prows, ptargets, pchecks, perrors, {"rounds": 3, "rounds_done": 3}, ["a note"])
if not all(c["ok"] for c in pchecks) or len(ptargets) != 16:
    failures.append("parity compare after run_all: %r" % pchecks)
section = R.section_parity(out)
for want_text in ("**cnn** (ms per step)", "**cupy** (ms per iteration)", "of 16 parity targets met",
                  "| nocache-cupool-deferred | 3 |", "- a note", "3481.600"):
    if want_text not in section:
        failures.append("parity report section lacks %r" % want_text)
if "Not measured yet" not in R.section_parity(os.path.join(tmp, "nothing")):
    failures.append("parity report section without results")

# --merge: a second call measuring cnn again keeps cupy from the first (same
# GPU model) and replaces cnn's rows, targets and checks; a run on another
# GPU model merges nothing and says so.
def devices(rows, name):
    for r in rows:
        r["device"] = name
    return rows
with open(os.path.join(out, "parity.json")) as f:
    first = json.load(f)
devices(first["rows"], "GPU A")
with open(os.path.join(out, "parity.json"), "w") as f:
    json.dump(first, f)
again = devices([dict(r, ms_median=1.0) for r in prows if r["workload"] == "cnn"], "GPU A")
again_targets = [t for t in ptargets if t["name"].startswith("parity cnn:")]
again_checks = [c for c in pchecks if c["name"].startswith("parity cnn ")]
notes = []
mrows, mtargets, mchecks, kept = P.merge_earlier(os.path.join(out, "parity.json"), ["cnn"], again, again_targets,
                                                 again_checks, notes)
if kept != ["cupy"] or sorted({r["workload"] for r in mrows}) != ["cnn", "cupy"] or \
        any(r["workload"] == "cnn" and r.get("ms_median") != 1.0 for r in mrows) or \
        len(mrows) != len(first["rows"]) or len(mtargets) != 16 or len(mchecks) != len(first["checks"]) or \
        not any("cupy from an earlier call" in n for n in notes):
    failures.append("parity merge: kept %r, %d rows, %d targets, %d checks, notes %r" % (
        kept, len(mrows), len(mtargets), len(mchecks), notes))
notes = []
other = devices([dict(r) for r in again], "GPU B")
mrows, mtargets, mchecks, kept = P.merge_earlier(os.path.join(out, "parity.json"), ["cnn"], other, again_targets,
                                                 again_checks, notes)
if kept or mrows != other or not any("not merged" in n and "GPU A" in n and "GPU B" in n for n in notes):
    failures.append("parity merge across GPU models: kept %r, notes %r" % (kept, notes))

# ---- the capacity test's walk over batches --------------------------------------------
import capacity_bench as C
def walk(fits, start=64, runs_before_deadline=None):
    """largest() against a fake process that trains every batch up to
    `fits` (and is skipped, as past BENCH_DEADLINE, after so many runs)."""
    tried = []
    def fake_train(config, batch, args, env, logdir):
        tried.append(batch)
        if runs_before_deadline is not None and len(tried) > runs_before_deadline:
            return {"ok": False, "skipped": True}
        return {"ok": batch <= fits, "ms": float(batch), "oom": batch > fits}
    saved, C.train = C.train, fake_train
    try:
        a = types.SimpleNamespace(batch=start, step=8, min_batch=8, max_batch=256, max_tries=9)
        best, runs = C.largest("caching", a, {}, None)
    finally:
        C.train = saved
    return best, tried
for fits, want in ((80, (80, [64, 72, 88, 80])), (50, (48, [64, 56, 40, 48])), (4, (None, [64, 56, 40, 8])),
                   (1000, (256, [64, 72, 88, 120, 184, 256])), (107, (104, [64, 72, 88, 120, 104, 112])),
                   (20, (16, [64, 56, 40, 8, 24, 16]))):
    if walk(fits) != want:
        failures.append("capacity walk, batches up to %d fit: %r, want %r" % (fits, walk(fits), want))
if walk(107, runs_before_deadline=3) != (88, [64, 72, 88, 120]):
    failures.append("capacity walk past the deadline: %r" % (walk(107, runs_before_deadline=3),))

# The rounds at caching's largest batch: the walks' runs there count, then
# --rounds of each, interleaved, then one cupool run under CUPOOL_STATS.
order = []
def fake_round(config, batch, args, env, logdir, stats=False):
    order.append((config, batch, stats))
    got = {"ok": True, "ms": 10.0 + len(order) if config == "caching" else 20.0 + len(order)}
    if stats:
        got["stats"] = ["cupool:     peak in use 1.6 GiB, peak reserved 2.4 GiB", "cupool:     pooled allocations 9",
                        "cupool:     trims 0, OOM retries 2, rewritten memsets 0"]
    return got
saved, C.train = C.train, fake_round
try:
    notes = []
    a = types.SimpleNamespace(rounds=2)
    at = C.timed_at(104, {104: {"ok": True, "ms": 9.0}}, {96: {"ok": True, "ms": 8.0}}, a, {}, None, notes)
finally:
    C.train = saved
want_order = [("nocache-cupool", 104, False), ("caching", 104, False), ("nocache-cupool", 104, False),
              ("caching", 104, False), ("nocache-cupool", 104, False), ("nocache-cupool", 104, True)]
if order != want_order or at != {"caching": [9.0, 12.0, 14.0], "nocache-cupool": [21.0, 23.0, 25.0]} or \
        notes != ["cupool at batch 104 (CUPOOL_STATS): peak in use 1.6 GiB, peak reserved 2.4 GiB; "
                  "trims 0, OOM retries 2, rewritten memsets 0"]:
    failures.append("capacity rounds: order %r, times %r, notes %r" % (order, at, notes))
if C.timed_at(None, {}, {}, a, {}, None, []) != {"caching": [], "nocache-cupool": []}:
    failures.append("capacity rounds with no common batch ran something")

for f in failures:
    print("test_benchlib: " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
