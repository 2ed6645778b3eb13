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
  3. beside the holder, each configuration (caching, then cupool) trains at
     --batch and goes up by --step while a batch trains, or down while none
     has: the largest batch that trained and its median step are its result.

A batch that runs out of memory ends its process with an error (PyTorch's
OutOfMemoryError): that is what a user would see.  The time target compares
the two at the caching allocator's largest batch, which both trained.

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


def train(config, batch, args, env_base, logdir):
    """One process of the parity suite's cnn worker at this batch: its JSON,
    or None when it failed (out of memory, or anything else: its stderr's
    tail goes to the log)."""
    env = B.clean_env(env_base)
    cmd = [sys.executable, PARITY, "--worker", config, "--workload", "cnn", "--batch", str(batch),
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if config == "nocache-cupool":
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        env["CUPOOL_LIBRARY"] = args.lib
        cmd = B.cupool_prefix(args.cupool) + cmd
    rc, out, err = B.run(cmd, env, args.timeout, logdir, "%s.b%d" % (config, batch))
    found = B.json_lines(out)
    if rc != 0 or not found:
        oom = "out of memory" in (err or "").lower() or "OutOfMemoryError" in (err or "")
        B.log("capacity: %s at batch %d: %s" % (config, batch, "out of memory" if oom else B.tail(err, 3)))
        return {"ok": False, "oom": oom}
    r = found[-1]
    return {"ok": True, "ms": r["ms_median"], "peak_mib": r.get("peak_mib")}


def largest(config, args, env, logdir):
    """Walks the batch from --batch by --step: up while it trains, down while
    it does not; returns (largest batch that trained or None, every run)."""
    runs, best = {}, None
    b = args.batch
    while args.min_batch <= b <= args.max_batch and len(runs) < args.max_tries:
        runs[b] = train(config, b, args, env, logdir)
        if runs[b]["ok"]:
            best = b
            if b + args.step in runs:
                break
            b += args.step
        else:
            if best is not None or b - args.step in runs:
                break
            b -= args.step
    return best, runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cupool", default="scripts/cupool", help="the cupool launcher")
    ap.add_argument("--library", help="libcupool.so (default $CUPOOL_LIBRARY)")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--batch", type=int, default=64, help="the batch whose caching peak sets the free memory")
    ap.add_argument("--step", type=int, default=8)
    ap.add_argument("--min-batch", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-tries", type=int, default=6, help="processes per configuration")
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
    finally:
        holder.kill()
        holder.wait()
    (cb, cruns), (pb, pruns) = found["caching"], found["nocache-cupool"]
    targets.append(B.target("capacity: cupool's largest batch / caching's", B.ratio(pb, cb), ">=", 1.0, "x",
                            "largest batches %s and %s" % (pb, cb)))
    same = cb if cb is not None and cb in pruns and pruns[cb]["ok"] else None
    t = B.ratio(pruns[same]["ms"], cruns[same]["ms"]) if same else None
    targets.append(B.target("capacity: cupool / caching, step time at caching's largest batch", t, "<=",
                            TIME_LIMIT, "x"))
    B.table(rows, [("config", "config"), ("largest_batch", "largest batch"), ("ms_at_largest", "ms")])
    return B.finish(args.out, "capacity", rows, targets, [], errors, vars(args), notes)


if __name__ == "__main__":
    sys.exit(main())
