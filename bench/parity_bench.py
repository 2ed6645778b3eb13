#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory parity: cupool's whole-process peak device memory and step time
against the frameworks' own allocators, on four workloads that churn device
memory the way real programs do.

Workloads (each configuration in its own process):
  cnn    torchvision resnet18 (random weights, channels_last) trained with SGD
         and momentum through cuDNN, a fresh synthetic batch of 64 x 3 x 224 x
         224 every step
  cnn-stream
         the same trained on a non-blocking stream (torch.cuda.Stream()),
         synchronized every --sync-every steps only: the CPU runs several
         steps ahead of the GPU, as a training loop without a .item() does
  lm     a decoder-only language model (transformers GPT2LMHeadModel built from
         a GPT2Config: 6 layers, d 512, vocabulary 32000, no dropout) trained
         with AdamW on random tokens, batch 16 x 256; nothing is downloaded
         (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE)
  infer  a 6-layer nn.TransformerEncoder (d 512) in inference mode, a new
         random batch (1..64) and sequence length (16..512) at every call, from
         a seeded sequence: every pass sees sizes it has not seen before
  cupy   CuPy: FFT autocorrelation, matrix product, sort and reductions on fresh
         temporaries over a seeded list of square sizes (256..2048)

Configurations (PyTorch / CuPy):
  caching                  the framework's caching allocator / CuPy's MemoryPool
  async                    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync /
                           cupy.cuda.MemoryAsyncPool: the driver's stream-ordered
                           pools, what cupool is built on
  expandable               PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, the
                           caching allocator's setting against fragmentation
                           (PyTorch only; a reference with no target yet)
  nocache-native           PYTORCH_NO_CUDA_MEMORY_CACHING=1 /
                           cupy.cuda.set_allocator(None), no cupool (first round only:
                           no target compares it)
  nocache-cupool           the same under cupool, default settings
  nocache-cupool-deferred  the same with CUPOOL_FREE=deferred
  nocache-cupool-gpu       default settings but CUPOOL_DEFERRED_ORDER=gpu:
                           deferred frees back in their pools at once, ordered
                           on the GPU behind their fences, instead of held by
                           cupool until the fences complete; measured beside
                           the defaults, no target of its own

Goal, per workload: cupool's peak memory (both of its configurations) within
1.10x of caching and 1.15x of async; its step time within 1.03x of caching
and no slower than async beyond async's own spread over the rounds.

Measuring: one warm-up process first (imports, GPU clocks, the file cache);
then --rounds rounds, each running every workload's configurations in turn
(their order rotated from round to round), interleaved so a drift of the
machine moves them all.  Peak memory: NVML sampled by a thread every
--sample-ms during the whole process and after every step
(benchlib.ProcessMemory), judged round by round: the memory ratio is the
worst over the rounds both configurations ran.  Time: each process's median
step (per forward for infer, per iteration for cupy); a configuration's time
is the median of those over the rounds, its spread (max - min) / median; the
time ratio compares the medians over the rounds both ran, the paired ratio is
the median of the round-by-round ratios.  In --stats-round, cupool's runs
print CUPOOL_STATS (peak in use against peak reserved); statistics time every
pooled call, so those runs count for memory only.

  python3 bench/parity_bench.py --cupool build/scripts/cupool --out bench-results
  python3 bench/parity_bench.py --worker caching --workload cnn   (one JSON line)
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

WORKLOADS = ["cnn", "cnn-stream", "lm", "infer", "cupy"]
CONFIGS = ["caching", "async", "expandable", "nocache-native", "nocache-cupool", "nocache-cupool-deferred",
           "nocache-cupool-gpu"]
CUPOOL_CONFIGS = ["nocache-cupool", "nocache-cupool-deferred"]  # the goal's: each has targets
# nocache-cupool-gpu: deferred frees ordered on the GPU, the other value of
# CUPOOL_DEFERRED_ORDER.
GPU_ORDER_ENV = {"CUPOOL_DEFERRED_ORDER": "gpu"}
FIRST_ROUND_ONLY = ["nocache-native"]
PYTORCH_ONLY = ["expandable"]
REFERENCES = ("caching", "async")
# The goal: peak memory and time thresholds against each reference.
MEM_LIMIT = {"caching": 1.10, "async": 1.15}
TIME_LIMIT_CACHING = 1.03
UNIT = {"cnn": "step", "cnn-stream": "step", "lm": "step", "infer": "forward", "cupy": "iteration"}
RESULT_KEY = {"cnn": "loss", "cnn-stream": "loss", "lm": "loss", "infer": "checksum", "cupy": "checksum"}
RESULT_TOLERANCE = {"cnn": 1e-2, "cnn-stream": 1e-2, "lm": 1e-2, "infer": 1e-2, "cupy": 1e-4}
# Model downloads are impossible by construction (models are built from a
# config); these make an accidental attempt fail at once instead of waiting
# on the network.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def config_env(workload, config):
    env = dict(OFFLINE)
    if config == "nocache-cupool-gpu":
        env.update(GPU_ORDER_ENV)
    if workload == "cupy" or config == "caching":
        return env  # CuPy chooses its allocator in the process
    if config == "async":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    elif config == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return env


def config_free(config):
    """None = no cupool; "" = cupool with its default free mode; else CUPOOL_FREE."""
    if not config.startswith("nocache-cupool"):
        return None
    if config in ("nocache-cupool", "nocache-cupool-gpu"):
        return ""
    return config[len("nocache-cupool-"):]


# ---- the worker (runs in its own process) -----------------------------------------

class _nothing:
    """A context manager that does nothing (no stream of its own)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def torch_worker(config, workload, args, mem):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("parity_bench: CUDA is not available")
    dev = torch.device(args.device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    torch.manual_seed(0)
    torch.zeros(1, device=dev)
    sync()
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    times, loss, checksum = [], None, None

    if workload in ("cnn", "cnn-stream", "lm"):
        if workload != "lm":
            import torchvision
            info["torchvision"] = torchvision.__version__
            model = torchvision.models.resnet18(weights=None, num_classes=1000)
            model = model.to(dev).to(memory_format=torch.channels_last)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            size = args.image_size

            def batch():
                x = torch.randn(args.batch, 3, size, size, device=dev).to(memory_format=torch.channels_last)
                return x, torch.randint(0, 1000, (args.batch,), device=dev)

            def loss_of(data):
                return F.cross_entropy(model(data[0]), data[1])
        else:
            for k, v in OFFLINE.items():
                os.environ.setdefault(k, v)
            import transformers
            info["transformers"] = transformers.__version__
            cfg = transformers.GPT2Config(vocab_size=args.vocab, n_positions=args.seq, n_embd=512, n_layer=6,
                                          n_head=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                          use_cache=False)
            model = transformers.GPT2LMHeadModel(cfg).to(dev)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

            def batch():
                ids = torch.randint(0, args.vocab, (args.lm_batch, args.seq), device=dev)
                return ids

            def loss_of(ids):
                return model(input_ids=ids, labels=ids).loss

        model.train()
        sync()
        # cnn-stream: every step on a non-blocking stream, a synchronization
        # every `every` steps only; a step's time is its window's over its
        # steps.
        every = args.sync_every if workload == "cnn-stream" else 1
        stream = torch.cuda.Stream() if cuda and workload == "cnn-stream" else None
        total = args.warmup + args.steps
        total += -total % every
        t0 = time.perf_counter()
        for i in range(total):
            with torch.cuda.stream(stream) if stream is not None else _nothing():
                l = loss_of(batch())
                opt.zero_grad(set_to_none=True)
                l.backward()
                opt.step()
            if (i + 1) % every == 0:
                sync()
                t = time.perf_counter() - t0
                mem.sample()
                if i >= args.warmup:
                    times += [t * 1e3 / every] * every
                t0 = time.perf_counter()
        loss = float(l)
    else:
        layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).to(dev)
        model.eval()
        rng = random.Random(1234)
        acc = torch.zeros((), device=dev)
        with torch.inference_mode():
            for p in range(1 + args.passes):   # the first pass is the warm-up
                shapes = [(rng.randint(1, args.max_batch), rng.randint(16, args.max_seq))
                          for _ in range(args.shapes)]
                sync()
                t0 = time.perf_counter()
                for b, s in shapes:
                    out = model(torch.randn(b, s, 512, device=dev))
                    if p:
                        acc += out.float().abs().mean()
                sync()
                t = time.perf_counter() - t0
                mem.sample()
                if p:
                    times.append(t * 1e3 / len(shapes))
        checksum = float(acc)

    info.update({"loss": loss, "checksum": checksum})
    if cuda:
        try:   # what the caching allocator reserved; not every backend keeps it
            info["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved() / 2.0 ** 20
        except Exception:  # noqa: BLE001
            pass
    return times, info


def cupy_worker(config, args, mem):
    import cupy as cp

    B.cupy_start(cp, "async" if config == "async" else "none" if config.startswith("nocache") else "pool")

    rng = random.Random(2468)
    sizes = [n for n in (256, 384, 512, 768, 1024, 1536, 2048) if n <= args.max_n] or [args.max_n]
    inputs = {n: cp.random.RandomState(n).standard_normal((n, n), dtype=cp.float32) for n in sizes}
    times = []
    acc = cp.zeros((), dtype=cp.float64)
    for p in range(1 + args.passes):   # the first pass is the warm-up
        shapes = [rng.choice(sizes) for _ in range(args.iters)]
        cp.cuda.Device(0).synchronize()
        t0 = time.perf_counter()
        for n in shapes:
            a = inputs[n]
            f = cp.fft.rfft2(a)                                        # FFT
            c = cp.fft.irfft2(f * cp.conj(f), s=a.shape) / (n * n)     # autocorrelation
            m = (a @ c) / n                                            # matrix product
            s = cp.sort(m.ravel())                                     # sort
            r = cp.absolute(s[::n]).sum() + m.max(axis=0).mean() + c.std(axis=1).mean()   # reductions
            if p:
                acc += r / n
        cp.cuda.Device(0).synchronize()
        t = time.perf_counter() - t0
        mem.sample()
        if p:
            times.append(t * 1e3 / len(shapes))
    name = cp.cuda.runtime.getDeviceProperties(0).get("name", b"?")
    return times, {"checksum": float(acc), "cupy": cp.__version__,
                   "device": name.decode(errors="replace") if isinstance(name, bytes) else str(name)}


def warm_up(args, mem):
    """Imports every framework the suite uses and runs a little of each on the
    GPU: the first process of a machine pays for the file cache, the clocks
    and CuPy's kernel compilation (kept on disk), and no measured process
    should."""
    import torch
    if args.device == "cuda":
        x = torch.randn(8, 3, 64, 64, device="cuda", requires_grad=True)
        torch.nn.functional.conv2d(x, torch.randn(16, 3, 3, 3, device="cuda")).sum().backward()
        (x.flatten(1) @ x.flatten(1).t()).sum().item()
    for name in ("torchvision", "transformers"):
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001 - its workload will say so
            B.log("warm-up: import %s: %s" % (name, e))
    try:
        small = argparse.Namespace(**dict(vars(args), passes=1, iters=2, max_n=256))
        cupy_worker("caching", small, mem)
    except Exception as e:  # noqa: BLE001
        B.log("warm-up: cupy: %s" % e)


def worker(config, workload, args):
    mem = B.ProcessMemory(interval=args.sample_ms / 1000.0).start()   # before CUDA starts
    t0 = time.time()
    if workload == "warmup":
        warm_up(args, mem)
        times, info = [0.0], {}
    elif workload == "cupy":
        times, info = cupy_worker(config, args, mem)
    else:
        times, info = torch_worker(config, workload, args, mem)
    mem.stop()
    result = {"config": config, "workload": workload, "ok": True,
              "ms_median": B.median(times), "ms_min": min(times), "ms_max": max(times), "n": len(times),
              "ms_all": [round(t, 4) for t in times], "seconds": round(time.time() - t0, 2),
              "cupool": B.cupool_info(),
              "env": {k: os.environ.get(k) for k in ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF",
                                                    "CUPOOL_FREE", "CUPOOL_DEFERRED_ORDER")
                     if os.environ.get(k)}}
    result.update(mem.result())
    result.update(info)
    print(json.dumps(result), flush=True)


# ---- the driver ---------------------------------------------------------------------

def schedule(workloads, configs, rounds):
    """(round, workload, config) in running order: every configuration in the
    first round, those a target compares in the later ones, in an order
    rotated by one from round to round (so no configuration always follows
    the same one)."""
    out = []
    for n in range(1, max(1, rounds) + 1):
        these = [c for c in configs if n == 1 or c not in FIRST_ROUND_ONLY]
        k = (n - 1) % len(these) if these else 0
        these = these[k:] + these[:k]
        out += [(n, wl, c) for wl in workloads for c in these if not (wl == "cupy" and c in PYTORCH_ONLY)]
    return out


def run_all(script, workloads, configs, rounds, stats_round, worker_args, launcher, lib, timeout, logdir):
    """Runs the warm-up process, then the schedule; returns (rows, errors,
    notes): a row per (workload, config) with every round's run in
    "runs"."""
    rows, errors, notes = {}, [], []
    env = B.clean_env(OFFLINE)
    rc, out, err = B.run([sys.executable, script, "--worker", "caching", "--workload", "warmup"] + worker_args,
                         env, timeout, logdir, "warmup")
    if rc != 0:
        notes.append("the warm-up process failed (exit %s): %s" % (rc, B.tail(err, 3)))
    for round_no, wl, config in schedule(workloads, configs, rounds):
        row = rows.setdefault((wl, config), {"workload": wl, "config": config, "ok": False, "runs": []})
        free = config_free(config)
        name = "%s.%s.round%d" % (wl, config, round_no)
        env = B.clean_env(config_env(wl, config))
        cmd = [sys.executable, script, "--worker", config, "--workload", wl] + worker_args
        stats = free is not None and round_no == stats_round
        if free is not None:
            if not lib:
                errors.append("%s: no libcupool.so (--library or CUPOOL_LIBRARY)" % name)
                continue
            env["CUPOOL_LIBRARY"] = lib
            cmd = B.cupool_prefix(launcher, free=free or None, stats=stats) + cmd
        rc, out, err = B.run(cmd, env, timeout, logdir, name)
        if rc is None and round_no > 1:
            continue  # out of time for a further round: the earlier rounds stand
        found = B.json_lines(out)
        if rc != 0 or not found:
            errors.append("%s: exit %s: %s" % (name, rc, B.tail(err, 4)))
            continue
        r = found[-1]
        if (free is not None) != bool(r.get("cupool")):
            errors.append("%s: cupool %s loaded" % (name, "was not" if free is not None else "was"))
            continue
        if free is not None and not r["cupool"].get("pooled_allocs"):
            errors.append("%s: cupool served no allocation from a pool" % name)
        run = {"round": round_no, "ms": r["ms_median"], "peak_mib": r.get("peak_mib"),
               "peak_device_mib": r.get("peak_device_mib"), "mem_source": r.get("mem_source"),
               "samples": r.get("samples"), "stats": stats, "seconds": r.get("seconds"),
               "result": r.get(RESULT_KEY.get(wl, "checksum"))}
        if stats:
            run["cupool_stats_text"], run["cupool_stats"] = B.cupool_stats(err)
        row["runs"].append(run)
        row["ok"] = True
        for k in ("torch", "torchvision", "transformers", "cupy", "cuda", "device", "max_memory_reserved_mib"):
            if r.get(k) is not None:
                row[k] = r[k]
    return [rows[(wl, c)] for wl in workloads for c in configs if (wl, c) in rows], errors, notes


def spread(values):
    m = B.median(values)
    if m is None or not m:
        return None
    return (max(values) - min(values)) / m


def summarize(row):
    """A row's figures over its runs: rounds_ms/round_nos (the runs whose time
    counts: not those with statistics on), ms_median and ms_spread over
    them, and peak_mib (median over every run) with peak_max."""
    timed = [r for r in row["runs"] if not r.get("stats") and r.get("ms") is not None]
    row["rounds_ms"] = [r["ms"] for r in timed]
    row["round_nos"] = [r["round"] for r in timed]
    row["rounds"] = len(row["runs"])
    row["ms_median"] = B.median(row["rounds_ms"])
    row["ms_spread"] = spread(row["rounds_ms"]) if row["rounds_ms"] else None
    peaks = [r["peak_mib"] for r in row["runs"] if r.get("peak_mib") is not None]
    row["peak_mib"] = B.median(peaks)
    row["peak_max_mib"] = max(peaks) if peaks else None
    row["mem_sources"] = sorted({r.get("mem_source") or "none" for r in row["runs"]})
    st = next((r["cupool_stats"] for r in row["runs"] if r.get("cupool_stats")), None)
    if st:
        row["cupool_peak_in_use_mib"] = st.get("peak_in_use_mib")
        row["cupool_peak_reserved_mib"] = st.get("peak_reserved_mib")
    results = [r["result"] for r in row["runs"] if r.get("result") is not None]
    row["result"] = results[0] if results else None
    return row


def mem_ratio(row, ref):
    """The worst round: the highest of row's peak / ref's peak over the rounds
    both ran (memory is steady from run to run, so every round must meet it)."""
    mine = {r["round"]: r["peak_mib"] for r in row["runs"] if r.get("peak_mib") is not None}
    theirs = {r["round"]: r["peak_mib"] for r in ref["runs"] if r.get("peak_mib") is not None}
    ratios = [B.ratio(mine[k], theirs[k]) for k in mine if k in theirs]
    ratios = [x for x in ratios if x is not None]
    return max(ratios) if ratios else None


def time_ratio(row, ref):
    """Median of row's times over the median of ref's, both over the rounds
    both ran with their times counted."""
    both = B.rounds_both(row, ref)
    if not both:
        return None
    return B.ratio(B.median([a for a, _ in both]), B.median([b for _, b in both]))


def compare(rows, workloads):
    """Every ratio the goal names, into the rows (mem_vs_caching, mem_vs_async,
    time_vs_caching, time_vs_async, paired_vs_caching, paired_vs_async,
    result_diff), and the targets and result checks."""
    targets, checks = [], []
    for wl in workloads:
        refs = {c: B.find_row(rows, wl, c) for c in REFERENCES}
        for r in rows:
            if r["workload"] != wl or not r.get("ok"):
                continue
            for c, ref in refs.items():
                r["mem_vs_" + c] = mem_ratio(r, ref) if ref else None
                r["time_vs_" + c] = time_ratio(r, ref) if ref else None
                r["paired_vs_" + c] = B.paired_ratio(r, ref) if ref else None
            ref = refs["caching"]
            if ref and ref.get("result") is not None and r.get("result") is not None:
                diff = abs(r["result"] - ref["result"]) / max(abs(ref["result"]), 1e-6)
                r["result_diff"] = diff
                checks.append({"name": "parity %s %s: %s matches caching (rel. diff %.2g)"
                                       % (wl, r["config"], RESULT_KEY[wl], diff),
                               "ok": diff <= RESULT_TOLERANCE[wl]})
            if r.get("mem_sources") and refs["caching"] and r["mem_sources"] != refs["caching"].get("mem_sources"):
                checks.append({"name": "parity %s %s: memory read as %s, caching's as %s"
                                       % (wl, r["config"], "/".join(r["mem_sources"]),
                                          "/".join(refs["caching"].get("mem_sources") or [])), "ok": False})
        async_spread = (refs["async"] or {}).get("ms_spread")
        for config in CUPOOL_CONFIGS:
            row = B.find_row(rows, wl, config)
            label = "parity %s: %s" % (wl, config.replace("nocache-", ""))
            for c in REFERENCES:
                targets.append(B.target("%s / %s, peak memory (worst round)" % (label, c),
                                        row.get("mem_vs_" + c), "<=", MEM_LIMIT[c], "x"))
            targets.append(B.target("%s / caching, time (median of rounds)" % label,
                                    row.get("time_vs_caching"), "<=", TIME_LIMIT_CACHING, "x"))
            targets.append(B.target("%s / async, time (median of rounds)" % label,
                                    row.get("time_vs_async"), "<=",
                                    round(1 + (async_spread or 0.0), 4), "x",
                                    "1 + async's spread over its rounds"))
    return targets, checks


COLUMNS = [("config", "config"), ("rounds", "runs"), ("ms_median", "ms"), ("ms_spread", "spread"),
           ("time_vs_caching", "t/caching"), ("time_vs_async", "t/async"), ("peak_mib", "peak MiB"),
           ("mem_vs_caching", "m/caching"), ("mem_vs_async", "m/async"),
           ("cupool_peak_in_use_mib", "cupool in use"), ("cupool_peak_reserved_mib", "cupool reserved")]


def print_tables(rows, workloads):
    for wl in workloads:
        print("\nparity %s: ms per %s (median of rounds), peak device memory of the process (MiB, median of "
              "rounds; ratios: worst round)\n" % (wl, UNIT[wl]))
        B.table([r for r in rows if r["workload"] == wl], COLUMNS)


def merge_earlier(path, workloads, rows, targets, checks, notes):
    """--merge: the rows, targets and checks of the workloads this run did not
    measure, from an earlier parity.json in --out, when that run measured the
    same GPU model (one suite is too long for one call of a machine whose
    calls are capped: its workloads run in two, one after the other).  Every
    ratio still compares runs of one call.  Returns the merged lists and the
    workloads of the earlier run kept."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return rows, targets, checks, []
    devices = lambda rs: {r.get("device") for r in rs if r.get("device")}
    if devices(old.get("rows", [])) != devices(rows):
        notes.append("not merged with %s: measured on %s, this run on %s" % (
            path, ", ".join(sorted(devices(old.get("rows", [])))) or "?", ", ".join(sorted(devices(rows))) or "?"))
        return rows, targets, checks, []
    mine = lambda name: any(name.startswith("parity %s:" % wl) or name.startswith("parity %s " % wl) for wl in workloads)
    kept = [r for r in old.get("rows", []) if r.get("workload") not in workloads]
    kept_workloads = sorted({r["workload"] for r in kept}, key=lambda w: WORKLOADS.index(w) if w in WORKLOADS else 99)
    if kept_workloads:
        notes.append("%s from an earlier call of the suite on the same GPU model (%s), %s from this one" % (
            ",".join(kept_workloads), ", ".join(sorted(devices(rows))), ",".join(workloads)))
    return (kept + rows, [t for t in old.get("targets", []) if not mine(t["name"])] + targets,
            [c for c in old.get("checks", []) if not mine(c["name"])] + checks, kept_workloads)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", metavar="CONFIG", choices=CONFIGS, help="run one measurement, print JSON")
    ap.add_argument("--workload", choices=WORKLOADS + ["warmup"], default="cnn")
    ap.add_argument("--cupool", default="scripts/cupool", help="the cupool launcher")
    ap.add_argument("--library", help="libcupool.so (default $CUPOOL_LIBRARY)")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (fewer when the deadline comes)")
    ap.add_argument("--stats-round", type=int, default=1, help="the round whose cupool runs print CUPOOL_STATS "
                    "(their time is not counted); 0 = none")
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--merge", action="store_true", help="keep the results of the other workloads from an earlier "
                    "parity.json in --out measured on the same GPU model (the suite in two calls)")
    ap.add_argument("--sample-ms", type=float, default=15.0, help="NVML sampling interval")
    ap.add_argument("--steps", type=int, default=15, help="timed training steps (cnn, lm)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed training steps first")
    ap.add_argument("--sync-every", type=int, default=4, help="cnn-stream: steps between synchronizations")
    ap.add_argument("--batch", type=int, default=64, help="cnn batch")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--lm-batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256, help="lm sequence length")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--shapes", type=int, default=40, help="infer: random shapes per pass")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--passes", type=int, default=4, help="infer and cupy: timed passes after a warm-up pass")
    ap.add_argument("--iters", type=int, default=150, help="cupy: iterations per pass")
    ap.add_argument("--max-n", type=int, default=2048, help="cupy: the largest square size")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: the CPU test of the worker
    args = ap.parse_args()

    if args.worker:
        worker(args.worker, args.workload, args)
        return 0

    lib = B.library_path(args.cupool, args.library)
    workloads = [w for w in args.workloads.split(",") if w]
    configs = [c for c in args.configs.split(",") if c]
    worker_args = []
    for k in ("sample_ms", "steps", "warmup", "sync_every", "batch", "image_size", "lm_batch", "seq", "vocab", "shapes",
              "max_batch", "max_seq", "passes", "iters", "max_n", "device"):
        worker_args += ["--" + k.replace("_", "-"), str(getattr(args, k))]
    rows, errors, notes = run_all(os.path.abspath(__file__), workloads, configs, args.rounds, args.stats_round,
                                  worker_args, args.cupool, lib, args.timeout,
                                  os.path.join(args.out, "logs", "parity"))
    for r in rows:
        summarize(r)
    targets, checks = compare(rows, workloads)
    print_tables(rows, workloads)
    kept_workloads = []
    if args.merge:
        rows, targets, checks, kept_workloads = merge_earlier(os.path.join(args.out, "parity.json"), workloads, rows,
                                                              targets, checks, notes)
    config = dict(vars(args), first_round_only=FIRST_ROUND_ONLY,
                  rounds_done=min((max(r["rounds"] for r in rows if r["workload"] == wl)
                                   for wl in {r["workload"] for r in rows}), default=0),
                  workloads=",".join(kept_workloads + workloads))
    return B.finish(args.out, "parity", rows, targets, checks, errors, config, notes)


if __name__ == "__main__":
    sys.exit(main())
