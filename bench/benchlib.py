# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of cupool's benchmark drivers (bench/*.py).

Every driver runs each configuration in its own process (allocator settings
and LD_PRELOAD are per process), collects one JSON line or CSV per run, and
writes RESULTS/<name>.json:

    {"benchmark": name, "rows": [...], "targets": [...], "checks": [...],
     "errors": [...], "notes": [...], "config": {...}}

A target is {"name", "value", "op" ("<=" or ">="), "threshold", "unit",
"met" (true/false/null when unmeasured), "detail"}.  make_report.py and the
summary of scripts/bench-gpu.sh read only these files.
"""

import json
import math
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.path.dirname(HERE)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def median(values):
    v = sorted(x for x in values if x is not None and not math.isnan(x))
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 10 ** -digits):
            return "%.3g" % x
        return "%.*f" % (digits, x)
    return str(x)


def target(name, value, op, threshold, unit="", detail=""):
    met = None
    if value is not None:
        met = value <= threshold if op == "<=" else value >= threshold
    return {"name": name, "value": value, "op": op, "threshold": threshold,
            "unit": unit, "met": met, "detail": detail}


def table(rows, columns, out=None):
    """Prints rows (dicts) as an aligned text table; columns = [(key, title)];
    out defaults to the sys.stdout of the moment (so a redirection holds)."""
    out = out or sys.stdout
    cells = [[title for _, title in columns]]
    for r in rows:
        cells.append([fmt(r.get(k)) for k, _ in columns])
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for n, line in enumerate(cells):
        print("  ".join(c.rjust(w) if n and i else c.ljust(w)
                        for i, (c, w) in enumerate(zip(line, widths))), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)
    out.flush()


def print_targets(targets, out=None):
    rows = []
    for t in targets:
        rows.append({"target": t["name"], "value": t["value"],
                     "want": "%s %s%s" % (t["op"], fmt(t["threshold"]), t["unit"]),
                     "met": "MET" if t["met"] else ("not met" if t["met"] is False else "n/a")})
    table(rows, [("target", "target"), ("value", "value"), ("want", "want"), ("met", "")], out)


# ---- environment and processes --------------------------------------------------

def clean_env(extra=None):
    """The environment of a run without cupool: no preload, no CUPOOL_* options
    (CUPOOL_LIBRARY kept for the launcher), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not (k.startswith("CUPOOL_") and k != "CUPOOL_LIBRARY")}
    env.update(extra or {})
    return env


def library_path(launcher=None, library=None):
    """libcupool.so: --library, else $CUPOOL_LIBRARY, else beside the launcher's build."""
    if library:
        return os.path.abspath(library)
    if os.environ.get("CUPOOL_LIBRARY"):
        return os.environ["CUPOOL_LIBRARY"]
    if launcher:
        guess = os.path.join(os.path.dirname(os.path.abspath(launcher)), "..", ".libs", "libcupool.so")
        if os.path.exists(guess):
            return os.path.normpath(guess)
    return None


def cupool_prefix(launcher, free=None, log_path=None, stats=False):
    cmd = [launcher]
    if free:
        cmd += ["--free", free]
    if log_path:
        cmd += ["--log", log_path]
    if stats:
        cmd += ["--stats"]
    return cmd + ["--"]


def run(cmd, env, timeout, logdir=None, name=None):
    """Runs cmd; returns (rc, stdout, stderr).  rc is None on a timeout, a
    failure to start, or when $BENCH_DEADLINE (epoch seconds) is near: then
    the remaining runs are skipped so that the driver still writes results.  stdout/stderr are saved in logdir/name.{out,err}."""
    deadline = float(os.environ.get("BENCH_DEADLINE") or 0)
    if deadline:
        left = deadline - time.time()
        if left < 10:
            log("- skipped (past BENCH_DEADLINE): " + " ".join(shlex.quote(c) for c in cmd))
            return None, "", "skipped: the run was out of time (BENCH_DEADLINE)\n"
        timeout = min(timeout, int(left))
    log("+ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, universal_newlines=True)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
        err += "\n[timed out after %ss]\n" % timeout
    except OSError as e:
        rc, out, err = None, "", "cannot run: %s\n" % e
    if logdir and name:
        os.makedirs(logdir, exist_ok=True)
        with open(os.path.join(logdir, name + ".out"), "w") as f:
            f.write(out)
        with open(os.path.join(logdir, name + ".err"), "w") as f:
            f.write(err)
    log("  rc=%s in %.1fs" % (rc, time.time() - t0))
    return rc, out, err


def json_lines(text):
    """The JSON objects printed one per line in text (other lines ignored)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    return found


def tail(text, n=6):
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join(lines[-n:])


def write_results(outdir, name, data):
    os.makedirs(outdir, exist_ok=True)
    data.setdefault("benchmark", name)
    path = os.path.join(outdir, name + ".json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    log("wrote " + path)
    return path


# ---- framework drivers (torch_bench.py, cupy_bench.py) -------------------------------

def run_configs(script, bench, configs, workloads, worker_args, config_env, config_free, skip, launcher, lib,
                timeout, logdir, rounds=1, focus=(), focus_rounds=0):
    """Runs `script --worker CONFIG --workload WL worker_args...` for every
    workload and configuration, each in its own process: under cupool (with
    CUPOOL_FREE) when config_free(config) is not None ("" = default
    settings), with config_env(config) added to a clean environment, unless
    skip(workload, free).  With rounds > 1 the whole list runs that many
    times, interleaved (a run moves by a few percent from one process to the
    next), and each configuration keeps its run with the lowest ms_median
    (all of them in "rounds_ms", their numbers in "round_nos").  Then up to
    focus_rounds further rounds run the (workload, config) pairs of `focus`
    alone, interleaved the same way, while $BENCH_DEADLINE leaves time: the
    configurations the targets compare, whose time moves from one process to
    the next, get the most runs the stage can afford.  Returns (rows,
    errors)."""
    full = max(1, rounds)
    schedule = [(n, wl, config) for n in range(1, full + 1) for wl in workloads for config in configs]
    wanted = [(wl, config) for wl, config in focus if wl in workloads and config in configs]
    schedule += [(n, wl, config) for n in range(full + 1, full + 1 + focus_rounds) for wl, config in wanted]
    several = len(set(n for n, _, _ in schedule)) > 1
    best, errors = {}, []
    for round_no, wl, config in schedule:
        free = config_free(config)
        if skip(wl, free):
            continue
        name = "%s.%s" % (wl, config) + (".round%d" % round_no if several else "")
        env = clean_env(config_env(config))
        cmd = [sys.executable, script, "--worker", config, "--workload", wl] + worker_args
        if free is not None:
            if not lib:
                errors.append("%s: no libcupool.so (--library or CUPOOL_LIBRARY)" % name)
                continue
            env["CUPOOL_LIBRARY"] = lib
            cmd = cupool_prefix(launcher, free=free or None) + cmd
        rc, out, err = run(cmd, env, timeout, logdir, name)
        if rc is None and round_no > 1:
            continue  # out of time for a further round: the earlier rounds stand
        found = json_lines(out)
        if rc != 0 or not found:
            errors.append("%s: exit %s: %s" % (name, rc, tail(err, 4)))
            best.setdefault((wl, config), {"config": config, "workload": wl, "ok": False})
            continue
        r = found[-1]
        if (free is not None) != bool(r.get("cupool")):
            errors.append("%s: cupool %s loaded" % (name, "was not" if free is not None else "was"))
        elif free is not None and not r["cupool"].get("pooled_allocs"):
            errors.append("%s: cupool served no allocation from a pool" % name)
        old = best.get((wl, config))
        r["round"] = round_no
        r["rounds_ms"] = (old or {}).get("rounds_ms", []) + [r["ms_median"]]
        r["round_nos"] = (old or {}).get("round_nos", []) + [round_no]
        if not old or not old.get("ok") or r["ms_median"] < old["ms_median"]:
            best[(wl, config)] = r
        else:
            old["rounds_ms"], old["round_nos"] = r["rounds_ms"], r["round_nos"]
    return [best[(wl, c)] for wl in workloads for c in configs if (wl, c) in best], errors


def rounds_both(row, ref):
    """The rounds both rows ran, as (row's ms, ref's ms) pairs in that round."""
    def by_round(r):
        ms = r.get("rounds_ms") or []
        nos = r.get("round_nos") or list(range(1, len(ms) + 1))
        return dict(zip(nos, ms))
    mine, theirs = by_round(row), by_round(ref)
    return [(mine[k], theirs[k]) for k in mine if k in theirs]


def lowest_ratio(row, ref):
    """The lowest of row's round medians over the lowest of ref's, both taken
    over the rounds both ran: a stage that ran out of time in its last round
    leaves some configurations one run fewer, and the lowest of two runs
    against one favours the configuration with two."""
    both = rounds_both(row, ref)
    if not both:
        return ratio(row["ms_median"], ref["ms_median"])
    return ratio(min(a for a, _ in both), min(b for _, b in both))


def paired_ratio(row, ref):
    """The median over the rounds both ran of row's time / ref's time in that
    round: neighbours in time, so a drift between processes that moves both
    cancels, where the ratio of the lowest rounds keeps each one's luckiest."""
    return median(ratio(a, b) for a, b in rounds_both(row, ref))


def compare_to_reference(bench, rows, workloads, reference, ref_label, result_key, what, floor, tolerance, unit_of):
    """Time and peak-memory ratios of every row against the reference
    configuration of its workload, a check that its result (result_key(wl))
    matches the reference's within `tolerance` (relative, denominator at
    least `floor`), and a table per workload.  Returns the checks."""
    checks = []
    for wl in workloads:
        ref = next((r for r in rows if r["workload"] == wl and r["config"] == reference and r.get("ok")), None)
        key = result_key(wl)
        for r in rows:
            if r["workload"] != wl or not r.get("ok"):
                continue
            r["time_ratio"] = lowest_ratio(r, ref) if ref else None
            r["time_ratio_paired"] = paired_ratio(r, ref) if ref else None
            r["mem_ratio"] = ratio(r["peak_mib"], ref["peak_mib"]) if ref else None
            if ref and ref.get(key) is not None and r.get(key) is not None:
                diff = abs(r[key] - ref[key]) / max(abs(ref[key]), floor)
                r["result_diff"] = diff
                checks.append({"name": "%s %s %s: %s matches %s (rel. diff %.2g)"
                                       % (bench, wl, r["config"], what, ref_label, diff),
                               "ok": diff <= tolerance})
        print("\n%s %s: ms per %s (median), peak device memory above baseline (MiB)\n" % (bench, wl, unit_of(wl)))
        table([r for r in rows if r["workload"] == wl],
              [("config", "config"), ("ms_median", "ms"), ("time_ratio", "vs " + ref_label),
               ("time_ratio_paired", "paired"), ("peak_mib", "peak MiB"), ("mem_ratio", "vs " + ref_label),
               ("result_diff", "result diff")])
    return checks


def find_row(rows, workload, config):
    """The successful row of a configuration, or {}."""
    return next((r for r in rows if r["workload"] == workload and r["config"] == config and r.get("ok")), {})


def finish(outdir, bench, rows, targets, checks, errors, config, notes=None):
    """Prints the targets, failed checks and errors (and notes, when given),
    writes RESULTS/<bench>.json; returns the exit status (1 when a run
    failed)."""
    print()
    print_targets(targets)
    for c in checks:
        if not c["ok"]:
            print("check failed: " + c["name"])
    for e in errors:
        print("error: " + e)
    data = {"benchmark": bench, "rows": rows, "targets": targets, "checks": checks, "errors": errors,
            "config": config}
    if notes:
        for n in notes:
            print("note: " + n)
        data["notes"] = notes
    write_results(outdir, bench, data)
    return 1 if errors else 0


# ---- inside a worker process ------------------------------------------------------

def cupool_info():
    """What the preloaded cupool (if any) says about itself: version and the
    stats of device 0 (peak_reserved is tracked only with CUPOOL_LOG/STATS)."""
    try:
        import ctypes
        lib = ctypes.CDLL(None)
        version = lib.cupool_version()
    except (OSError, AttributeError):
        return None
    info = {"version": version}
    try:
        import ctypes

        class Stats(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in (
                "pooled_allocs", "native_allocs", "pooled_frees", "in_use", "peak_in_use",
                "peak_reserved", "trims", "oom_retries", "rewritten_memsets")]

        s = Stats()
        if lib.cupool_get_stats(0, ctypes.byref(s)) == 0:
            info.update({n: getattr(s, n) for n, _ in Stats._fields_})
    except (OSError, AttributeError):
        pass
    return info


def cupy_start(cp, allocator):
    """Sets CuPy's device allocator ("pool": its MemoryPool, the default;
    "async": MemoryAsyncPool, the driver's stream-ordered pool; "none":
    every array straight from cudaMalloc, which is what cupool serves),
    turns its pinned-memory pool off, and initialises device 0."""
    if allocator == "async":
        cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    elif allocator == "none":
        cp.cuda.set_allocator(None)
    cp.cuda.set_pinned_memory_allocator(None)
    cp.cuda.Device(0).use()
    cp.zeros(1)
    cp.cuda.Device(0).synchronize()


class DeviceMemory(object):
    """Device memory in use as NVML sees it (the real number, whatever the
    allocator and whatever cupool reports through cuMemGetInfo); falls back to
    a callable giving (free, total) through the CUDA API."""

    def __init__(self, mem_get_info=None, index=0):
        self.fallback = mem_get_info
        self.nvml = None
        self.handle = None
        self.source = "none"
        try:
            import ctypes
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() == 0:
                handle = ctypes.c_void_p()
                if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                    self.nvml, self.handle, self.source = nvml, handle, "nvml"
        except (OSError, AttributeError):
            pass
        if not self.nvml and mem_get_info:
            self.source = "cuMemGetInfo"
        self.baseline = self.used()
        self.peak = self.baseline

    def used(self):
        if self.nvml:
            import ctypes

            class Memory(ctypes.Structure):
                _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                            ("used", ctypes.c_ulonglong)]

            m = Memory()
            if self.nvml.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(m)) == 0:
                return int(m.used)
        if self.fallback:
            try:
                free, total = self.fallback()
                return int(total - free)
            except Exception:  # noqa: BLE001 - a sample is optional
                return None
        return None

    def sample(self):
        u = self.used()
        if u is not None and (self.peak is None or u > self.peak):
            self.peak = u
        return u

    def peak_mib(self):
        if self.peak is None or self.baseline is None:
            return None
        return (self.peak - self.baseline) / 2.0 ** 20


class ProcessMemory(object):
    """Peak device memory of this whole process while it runs: a background
    thread samples NVML every `interval` seconds (and sample() adds a sample
    wherever the caller knows a peak may be, e.g. after a step), because a
    figure read at the end misses what an allocator held and gave back
    in between.  The process's own figure is NVML's usedGpuMemory for this
    pid (context, libraries' workspaces and every allocator's reserve
    included); where NVML does not list the pid (a container whose pids are
    not the host's) the device's used memory above what was in use when this
    object was made stands in for it, so make it before CUDA starts.
    `nvml` is the pynvml module (imported when None; a fake in tests); without
    pynvml, libnvidia-ml through ctypes gives the device figure only."""

    def __init__(self, interval=0.015, index=0, nvml=None):
        import threading
        self.interval = interval
        self.nvml, self.handle, self.ctypes_mem = None, None, None
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self.nvml = nvml
        except Exception:  # noqa: BLE001 - no NVML: the ctypes reading, else nothing
            self.nvml = None
            dm = DeviceMemory(None, index)
            self.ctypes_mem = dm if dm.source == "nvml" else None
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.samples = 0
        self.peak_process = None
        self.peak_device = None
        self.baseline = self.device_used()
        self.stop_event = threading.Event()
        self.thread = None

    def device_used(self):
        try:
            if self.nvml:
                return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            if self.ctypes_mem:
                return self.ctypes_mem.used()
        except Exception:  # noqa: BLE001 - a sample is optional
            pass
        return None

    def process_used(self):
        if not self.nvml:
            return None
        try:
            for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
                if p.pid == self.pid and p.usedGpuMemory is not None:
                    return int(p.usedGpuMemory)
        except Exception:  # noqa: BLE001
            pass
        return None

    def sample(self):
        proc, dev = self.process_used(), self.device_used()
        with self.lock:
            self.samples += 1
            if proc is not None and (self.peak_process is None or proc > self.peak_process):
                self.peak_process = proc
            if dev is not None and (self.peak_device is None or dev > self.peak_device):
                self.peak_device = dev

    def _loop(self):
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def start(self):
        import threading
        if self.thread is None and (self.nvml or self.ctypes_mem):
            self.thread = threading.Thread(target=self._loop, name="ProcessMemory", daemon=True)
            self.thread.start()
        return self

    def stop(self):
        if self.thread is not None:
            self.stop_event.set()
            self.thread.join()
            self.thread = None
        self.sample()

    def result(self):
        """{"peak_mib", "mem_source", "peak_process_mib", "peak_device_mib",
        "samples"}: peak_mib is the process's own figure where NVML gave one,
        else the device's above the baseline (None without NVML)."""
        mib = 2.0 ** 20
        with self.lock:
            proc = self.peak_process / mib if self.peak_process is not None else None
            dev = ((self.peak_device - self.baseline) / mib
                   if self.peak_device is not None and self.baseline is not None else None)
            n = self.samples
        source = "nvml-process" if proc is not None else ("nvml-device" if dev is not None else "none")
        return {"peak_mib": proc if proc is not None else dev, "mem_source": source,
                "peak_process_mib": proc, "peak_device_mib": dev, "samples": n}


_UNITS = {"B": 1.0, "KiB": 2.0 ** 10, "MiB": 2.0 ** 20, "GiB": 2.0 ** 30, "TiB": 2.0 ** 40}


def cupool_stats(stderr):
    """cupool's CUPOOL_STATS summary in a process's stderr: (its text, the
    figures of its first device as {"pooled_allocs", "pooled_frees",
    "native_allocs", "peak_in_use_mib", "peak_reserved_mib", "trims",
    "oom_retries", "ready_reuses"}); ("", {}) when there is none."""
    import re
    lines = [l for l in stderr.splitlines() if l.startswith("cupool: statistics") or l.startswith("cupool:   ")]
    if not lines:
        return "", {}
    text = "\n".join(lines)
    size = r"([0-9.]+) (B|KiB|MiB|GiB|TiB)"
    figures = {}
    patterns = [(r"pooled allocations\s+(\d+) \(.*?\), frees (\d+)", ("pooled_allocs", "pooled_frees")),
                (r"native allocations\s+(\d+)", ("native_allocs",)),
                (r"trims (\d+), OOM retries (\d+)", ("trims", "oom_retries")),
                (r"allocations served by a ready block (\d+)", ("ready_reuses",))]
    for pattern, names in patterns:
        m = re.search(pattern, text)
        if m:
            figures.update({n: int(v) for n, v in zip(names, m.groups())})
    m = re.search(r"peak in use %s, peak reserved %s" % (size, size), text)
    if m:
        figures["peak_in_use_mib"] = float(m.group(1)) * _UNITS[m.group(2)] / _UNITS["MiB"]
        figures["peak_reserved_mib"] = float(m.group(3)) * _UNITS[m.group(4)] / _UNITS["MiB"]
    return text, figures
