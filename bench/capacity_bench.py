#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Capacity parity: on a card whose free memory is held down to just above
what PyTorch's caching allocator needs for the CNN of the parity suite
(bench/parity_bench.py, workload cnn), the largest batch that trains under
cupool (default settings, PyTorch's caching off) is at least the caching
allocator's, at a step time within 1.03x of it.

  1. the caching allocator trains the CNN at --batch; its whole-process peak
     P is read by NVML (benchlib.ProcessMemory);
  2. a holder process allocates the card's free memory down to P x
     --headroom and sleeps;
  3. beside the holder, each configuration (caching, then cupool) finds the
     largest batch that trains, in multiples of --step from --batch: up by a
     stride that doubles while batches train, then halving the gap between
     the last batch that trained and the first that did not (down the same
     way when --batch does not train), at most --max-tries processes;
  4. at the caching allocator's largest batch, --rounds more processes of
     each, interleaved: the time target compares their medians (the walk's
     run counts as one round), and one more cupool process prints its
     statistics (CUPOOL_STATS: out-of-memory retries, trims) into the notes.

A batch that runs out of memory ends its process with an error (PyTorch's
OutOfMemoryError): that is what a user would see.

  python3 bench/capacity_bench.py --cupool build/scripts/cupool --out bench-results
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PARITY = os.path.join(HERE, "parity_bench.py")
CONFIGS = ["caching", "nocache-cupool"]
TIME_LIMIT = 1.03

HOLDER = r"""
import sys, time, torch
target = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
held = []
chunk = 1 << 28
while free - target > (64 << 20):
    n = min(chunk, free - target - (32 << 20))
    try:
        held.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    except RuntimeError:
        chunk //= 2
        if chunk < (1 << 20):
            break
    free, _ = torch.cuda.mem_get_info()
print("free %d total %d" % (free, total), flush=True)
time.sleep(3600)
"""


def train(config, batch, args, env_base, logdir, stats=False):
    """One process of the parity suite's cnn worker at this batch: ok, its
    median step and peak, or not ok (out of memory, or anything else: its
    stderr's tail goes to the log; skipped: past $BENCH_DEADLINE); with
    stats, under CUPOOL_STATS, whose lines come back too."""
    env = B.clean_env(env_base)
    cmd = [sys.executable, PARITY, "--worker", config, "--workload", "cnn", "--batch", str(batch),
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if config == "nocache-cupool":
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        env["CUPOOL_LIBRARY"] = args.lib
        cmd = B.cupool_prefix(args.cupool) + cmd
    if stats:
        env["CUPOOL_STATS"] = "1"
    rc, out, err = B.run(cmd, env, args.timeout, logdir, "%s.b%d%s" % (config, batch, ".stats" if stats else ""))
    if rc is None:
        return {"ok": False, "skipped": True}
    found = B.json_lines(out)
    if rc != 0 or not found:
        oom = "out of memory" in (err or "").lower() or "OutOfMemoryError" in (err or "")
        B.log("capacity: %s at batch %d: %s" % (config, batch, "out of memory" if oom else B.tail(err, 3)))
        return {"ok": False, "oom": oom}
    r = found[-1]
    got = {"ok": True, "ms": r["ms_median"], "peak_mib": r.get("peak_mib")}
    if stats:
        got["stats"] = [l for l in (err or "").splitlines() if l.startswith("cupool:")]
    return got


def largest(config, args, env, logdir):
    """The largest batch that trains, among --batch + k x --step within
    [--min-batch, --max-batch]: a stride that doubles away from --batch
    until one batch trains and another does not, then the gap between them
    halved down to --step; at most --max-tries processes, and none past
    $BENCH_DEADLINE.  Returns (largest batch that trained or None, every
    run)."""
    runs = {}
    step = args.step
    top = args.batch + (args.max_batch - args.batch) // step * step
    bottom = args.batch - (args.batch - args.min_batch) // step * step

    def trains(b):
        if b not in runs:
            runs[b] = train(config, b, args, env, logdir)
        return runs[b]["ok"]

    def more():
        return len(runs) < args.max_tries and not any(r.get("skipped") for r in runs.values())

    lo, hi = (args.batch, None) if trains(args.batch) else (None, args.batch)
    stride = step
    # Away from --batch until one batch trains and another does not.
    while (lo is None) != (hi is None) and more():
        if hi is None and lo >= top or lo is None and hi <= bottom:
            break
        b = min(lo + stride, top) if hi is None else max(hi - stride, bottom)
        if trains(b):
            lo = b
        else:
            hi = b
        stride *= 2
    while lo is not None and hi is not None and hi - lo > step and more():
        b = lo + max(1, (hi - lo) // 2 // step) * step
        if trains(b):
            lo = b
        else:
            hi = b
    return lo, runs


def timed_at(batch, cruns, pruns, args, env, logdir, notes):
    """Step times of both configurations at `batch` (caching's largest, if
    cupool trained it too; None: none): the walks' runs there, then
    --rounds more of each, interleaved; then one cupool process under
    CUPOOL_STATS, whose out-of-memory retries and peaks go to the notes.
    Returns {config: [ms, ...]}."""
    at = {config: [] for config in CONFIGS}
    if batch is None:
        return at
    if batch not in pruns:
        pruns[batch] = train("nocache-cupool", batch, args, env, logdir)
    for config, runs in (("caching", cruns), ("nocache-cupool", pruns)):
        if runs[batch]["ok"]:
            at[config].append(runs[batch]["ms"])
    for _ in range(args.rounds):
        for config in CONFIGS:
            r = train(config, batch, args, env, logdir)
            if r["ok"]:
                at[config].append(r["ms"])
    r = train("nocache-cupool", batch, args, env, logdir, stats=True)
    picked = [l.split(":", 1)[1].strip() for l in r.get("stats", [])
              if any(k in l for k in ("peak in use", "at the peak reserved", "OOM retries", "time in cupool"))]
    if picked:
        notes.append("cupool at batch %d (CUPOOL_STATS): %s" % (batch, "; ".join(picked)))
    return at


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cupool", default="scripts/cupool", help="the cupool launcher")
    ap.add_argument("--library", help="libcupool.so (default $CUPOOL_LIBRARY)")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--batch", type=int, default=64, help="the batch whose caching peak sets the free memory")
    ap.add_argument("--step", type=int, default=8)
    ap.add_argument("--min-batch", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-tries", type=int, default=9, help="processes per configuration's walk")
    ap.add_argument("--rounds", type=int, default=3,
                    help="more processes of each at the caching allocator's largest batch, interleaved")
    ap.add_argument("--headroom", type=float, default=1.05, help="free memory = caching peak x this")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    args.lib = B.library_path(args.cupool, args.library)
    logdir = os.path.join(args.out, "logs", "capacity")
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    errors, notes, rows, targets = [], [], [], []

    base = train("caching", args.batch, args, env, logdir)
    if not base["ok"] or not base.get("peak_mib"):
        errors.append("caching at batch %d did not train or gave no peak" % args.batch)
        return B.finish(args.out, "capacity", rows, targets, [], errors, vars(args), notes)
    target_free = int(base["peak_mib"] * args.headroom * (1 << 20))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(target_free)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, env=B.clean_env(env))
    try:
        line = holder.stdout.readline().split()
        if len(line) < 4:
            errors.append("the holder did not start: %s" % B.tail(holder.stderr.read(), 3))
            return B.finish(args.out, "capacity", rows, targets, [], errors, vars(args), notes)
        free_mib = int(line[1]) / 2.0 ** 20
        notes.append("caching's peak at batch %d: %.0f MiB; the holder left %.0f MiB free (target %.0f)"
                     % (args.batch, base["peak_mib"], free_mib, target_free / 2.0 ** 20))
        found = {}
        for config in CONFIGS:
            best, runs = largest(config, args, env, logdir)
            found[config] = (best, runs)
            rows.append({"config": config, "largest_batch": best,
                         "ms_at_largest": runs[best]["ms"] if best else None,
                         "runs": {str(b): r for b, r in sorted(runs.items())}})
        (cb, cruns), (pb, pruns) = found["caching"], found["nocache-cupool"]
        at = timed_at(cb if cb is not None and (pb or 0) >= cb else None, cruns, pruns, args, env, logdir, notes)
    finally:
        holder.kill()
        holder.wait()
    for row in rows:
        row["ms_rounds_at_caching_largest"] = at[row["config"]]
        row["ms_median_at_caching_largest"] = B.median(at[row["config"]]) if at[row["config"]] else None
    targets.append(B.target("capacity: cupool's largest batch / caching's", B.ratio(pb, cb), ">=", 1.0, "x",
                            "largest batches %s and %s" % (pb, cb)))
    t = B.ratio(B.median(at["nocache-cupool"]), B.median(at["caching"])) \
        if at["caching"] and at["nocache-cupool"] else None
    targets.append(B.target("capacity: cupool / caching, step time at caching's largest batch", t, "<=",
                            TIME_LIMIT, "x", "medians of %d and %d processes at batch %s"
                            % (len(at["nocache-cupool"]), len(at["caching"]), cb)))
    B.table(rows, [("config", "config"), ("largest_batch", "largest batch"), ("ms_at_largest", "ms"),
                   ("ms_median_at_caching_largest", "median ms at caching's largest")])
    return B.finish(args.out, "capacity", rows, targets, [], errors, vars(args), notes)


if __name__ == "__main__":
    sys.exit(main())
