#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CuPy under cupool against CuPy's own memory pool.

Workload: many temporaries - elementwise chains, reductions and matmuls over
a fixed, seeded list of square shapes (256..2048), accumulated into a device
scalar (checksum compared across configurations).  `default` runs on CuPy's
default (legacy) stream, `stream` inside a non-blocking cupy.cuda.Stream.

Configurations (each in its own process):
  pool            CuPy's default MemoryPool (the reference)
  async-pool      cupy.cuda.MemoryAsyncPool (stream-ordered, the driver's pool)
  nopool-native   cupy.cuda.set_allocator(None): every array is cudaMalloc/cudaFree
  nopool-cupool   the same under cupool (default settings)
  nopool-cupool-{ordered,deferred,sync}   with CUPOOL_FREE set
  (ordered is not run on `stream`: it is unsafe with non-blocking streams)

Target: nopool-cupool within 1.02x of pool on the default stream.  Every
configuration runs --rounds times, interleaved; then those two up to
--focus-rounds more times while $BENCH_DEADLINE leaves time (an iteration's
time moves from one process to the next: 0.34-0.65 ms with CuPy's pool
over nine processes on one H200).  Ratios as in torch_bench.py.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

CONFIGS = ["pool", "async-pool", "nopool-native", "nopool-cupool", "nopool-cupool-ordered",
           "nopool-cupool-deferred", "nopool-cupool-sync"]
WORKLOADS = ["default", "stream"]
REFERENCE = "pool"
# What the time target compares: these get the rounds left after the full ones.
FOCUS = [("default", REFERENCE), ("default", "nopool-cupool")]


def config_free(config):
    if not config.startswith("nopool-cupool"):
        return None
    return config[len("nopool-cupool-"):] if config != "nopool-cupool" else ""


def worker(config, workload, iters, passes):
    import cupy as cp

    B.cupy_start(cp, "async" if config == "async-pool" else "none" if config.startswith("nopool") else "pool")
    mem = B.DeviceMemory(cp.cuda.runtime.memGetInfo)

    import random
    rng = random.Random(4321)
    sizes = [256, 384, 512, 768, 1024, 1536, 2048]
    shapes = [rng.choice(sizes) for _ in range(iters)]
    inputs = {n: cp.random.RandomState(n).standard_normal((n, n), dtype=cp.float32) / n for n in sizes}
    stream = cp.cuda.Stream(non_blocking=True) if workload == "stream" else cp.cuda.Stream.null

    times = []
    acc = None
    with stream:
        acc = cp.zeros((), dtype=cp.float64)
        for p in range(1 + passes):   # the first pass is the warm-up
            cp.cuda.Device(0).synchronize()
            t0 = time.perf_counter()
            for i, n in enumerate(shapes):
                a = inputs[n]
                b = (a * 2.0 + 1.0) ** 2 - a                 # elementwise chain
                c = cp.tanh(b).sum(axis=0)                   # reduction
                d = a @ b                                    # matmul
                e = cp.sqrt(cp.abs(d)) + c[None, :]          # broadcast
                f = cp.exp(-e).mean(axis=1)                  # another reduction
                g = cp.concatenate([f, c]).astype(cp.float64)
                if p:
                    acc += g.sum() / n
                if i % 20 == 19:
                    mem.sample()
            cp.cuda.Device(0).synchronize()
            t = time.perf_counter() - t0
            mem.sample()
            if p:
                times.append(t * 1e3 / len(shapes))
    checksum = float(acc)
    import json
    print(json.dumps({
        "config": config, "workload": workload, "ok": True,
        "ms_median": B.median(times), "ms_min": min(times), "ms_max": max(times), "n": len(times),
        "ms_all": [round(t, 5) for t in times],
        "peak_mib": mem.peak_mib(), "mem_source": mem.source, "checksum": checksum,
        "cupy": cp.__version__, "cupool": B.cupool_info(),
    }), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", metavar="CONFIG", choices=CONFIGS)
    ap.add_argument("--workload", choices=WORKLOADS, default="default")
    ap.add_argument("--cupool", default="scripts/cupool")
    ap.add_argument("--library")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--iters", type=int, default=200, help="shapes per pass")
    ap.add_argument("--passes", type=int, default=5, help="timed passes (after one warm-up pass)")
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--rounds", type=int, default=1, help="interleaved runs of every configuration; the best is kept")
    ap.add_argument("--focus-rounds", type=int, default=8,
                    help="further rounds of the configurations the target compares, while time is left")
    args = ap.parse_args()

    if args.worker:
        worker(args.worker, args.workload, args.iters, args.passes)
        return 0

    lib = B.library_path(args.cupool, args.library)
    workloads = [w for w in args.workloads.split(",") if w]
    rows, errors = B.run_configs(
        os.path.abspath(__file__), "cupy", [c for c in args.configs.split(",") if c], workloads,
        ["--iters", str(args.iters), "--passes", str(args.passes)],
        lambda config: {}, config_free, lambda wl, free: wl == "stream" and free == "ordered",
        args.cupool, lib, args.timeout, os.path.join(args.out, "logs", "cupy"), args.rounds, FOCUS,
        args.focus_rounds)
    checks = B.compare_to_reference("cupy", rows, workloads, REFERENCE, "pool", lambda wl: "checksum", "checksum",
                                    1e-12, 1e-6, lambda wl: "iteration")
    targets = [B.target("cupy (default stream): nopool+cupool / CuPy pool, time",
                        B.find_row(rows, "default", "nopool-cupool").get("time_ratio"), "<=", 1.02, "x")]
    return B.finish(args.out, "cupy", rows, targets, checks, errors, dict(vars(args), focus=FOCUS))


if __name__ == "__main__":
    sys.exit(main())
