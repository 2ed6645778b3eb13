#!/usr/bin/env python3
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

Target: nopool-cupool within 1.02x of pool on the default stream.
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


def config_free(config):
    if not config.startswith("nopool-cupool"):
        return None
    return config[len("nopool-cupool-"):] if config != "nopool-cupool" else ""


def worker(config, workload, iters, passes):
    import cupy as cp

    if config == "async-pool":
        cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    elif config.startswith("nopool"):
        cp.cuda.set_allocator(None)
    cp.cuda.set_pinned_memory_allocator(None)
    cp.cuda.Device(0).use()
    cp.zeros(1)
    cp.cuda.Device(0).synchronize()
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
    args = ap.parse_args()

    if args.worker:
        worker(args.worker, args.workload, args.iters, args.passes)
        return 0

    lib = B.library_path(args.cupool, args.library)
    logdir = os.path.join(args.out, "logs", "cupy")
    workloads = [w for w in args.workloads.split(",") if w]
    rows, errors, checks = [], [], []
    for wl in workloads:
        for config in [c for c in args.configs.split(",") if c]:
            free = config_free(config)
            if wl == "stream" and free == "ordered":
                continue
            name = "%s.%s" % (wl, config)
            env = B.clean_env()
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", config, "--workload", wl,
                   "--iters", str(args.iters), "--passes", str(args.passes)]
            if free is not None:
                if not lib:
                    errors.append("%s: no libcupool.so (--library or CUPOOL_LIBRARY)" % name)
                    continue
                env["CUPOOL_LIBRARY"] = lib
                cmd = B.cupool_prefix(args.cupool, free=free or None) + cmd
            rc, out, err = B.run(cmd, env, args.timeout, logdir, name)
            found = B.json_lines(out)
            if rc != 0 or not found:
                errors.append("%s: exit %s: %s" % (name, rc, B.tail(err, 4)))
                rows.append({"config": config, "workload": wl, "ok": False})
                continue
            r = found[-1]
            if (free is not None) != bool(r.get("cupool")):
                errors.append("%s: cupool %s loaded" % (name, "was not" if free is not None else "was"))
            elif free is not None and not r["cupool"].get("pooled_allocs"):
                errors.append("%s: cupool served no allocation from a pool" % name)
            rows.append(r)

    for wl in workloads:
        ref = next((r for r in rows if r["workload"] == wl and r["config"] == REFERENCE and r.get("ok")), None)
        for r in rows:
            if r["workload"] != wl or not r.get("ok"):
                continue
            r["time_ratio"] = B.ratio(r["ms_median"], ref["ms_median"]) if ref else None
            r["mem_ratio"] = B.ratio(r["peak_mib"], ref["peak_mib"]) if ref else None
            if ref and ref.get("checksum") is not None:
                diff = abs(r["checksum"] - ref["checksum"]) / max(abs(ref["checksum"]), 1e-12)
                r["result_diff"] = diff
                checks.append({"name": "cupy %s %s: checksum matches pool (rel. diff %.2g)" % (wl, r["config"], diff),
                               "ok": diff <= 1e-6})
        print("\ncupy %s: ms per iteration (median), peak device memory above baseline (MiB)\n" % wl)
        B.table([r for r in rows if r["workload"] == wl],
                [("config", "config"), ("ms_median", "ms"), ("time_ratio", "vs pool"),
                 ("peak_mib", "peak MiB"), ("mem_ratio", "vs pool"), ("result_diff", "result diff")])

    def get(wl, config):
        return next((r for r in rows if r["workload"] == wl and r["config"] == config and r.get("ok")), {})

    targets = [B.target("cupy (default stream): nopool+cupool / CuPy pool, time",
                        get("default", "nopool-cupool").get("time_ratio"), "<=", 1.02, "x")]
    print()
    B.print_targets(targets)
    for c in checks:
        if not c["ok"]:
            print("check failed: " + c["name"])
    for e in errors:
        print("error: " + e)
    B.write_results(args.out, "cupy", {"benchmark": "cupy", "rows": rows, "targets": targets, "checks": checks,
                                       "errors": errors, "config": vars(args)})
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
