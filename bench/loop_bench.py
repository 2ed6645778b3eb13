#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the loop.cu binaries (cudart static and shared) natively and under
cupool, and proves that cupool sees their cudaMalloc calls.

  alloc    cudaMalloc/cudaFree every iteration around kernels on two
           non-blocking streams: native, cupool (auto = deferred here), cupool sync
  noalloc  the same kernels on buffers allocated up front: native and cupool,
           interleaved --noalloc-rounds times each (min of the process
           medians): target <= 1.01x.  A process's median moves by up to 10%
           from one process to the next (two native processes on
           one H200: 22.4 and 25.2 us an iteration), ten times the target, so the
           lowest of several processes is compared, each a second or so
  proof    a short alloc run under `cupool --stats`: the cuMemAlloc_v2 count in
           the statistics must cover every cudaMalloc the program made
Every run verifies its results on the device (errors must be 0).
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

STAT_LINE = re.compile(r"^cupool:\s+(cuMemAlloc(?:_v2)?)\s+(\d+)\s*$")
POOLED_LINE = re.compile(r"^cupool:\s+pooled allocations\s+(\d+)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindir", required=True, help="directory holding loop_static and loop_shared")
    ap.add_argument("--cupool", default="scripts/cupool")
    ap.add_argument("--library")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--iters", type=int, default=300, help="alloc-mode iterations per rep")
    ap.add_argument("--noalloc-iters", type=int, default=2000)
    ap.add_argument("--noalloc-rounds", type=int, default=5, help="noalloc processes per configuration")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=180)
    args = ap.parse_args()

    lib = B.library_path(args.cupool, args.library)
    if not lib:
        sys.exit("loop_bench.py: cannot find libcupool.so (use --library or CUPOOL_LIBRARY)")
    logdir = os.path.join(args.out, "logs", "loop")
    rows, errors, checks, targets = [], [], [], []

    def go(kind, label, free, noalloc, iters, reps, stats=False, name=None):
        binary = os.path.join(args.bindir, "loop_" + kind)
        if not os.access(binary, os.X_OK):
            errors.append("%s is not built" % binary)
            return None, ""
        cmd = [binary, "--iters", str(iters), "--reps", str(reps)] + (["--noalloc"] if noalloc else [])
        env = B.clean_env()
        if free is not None:
            env["CUPOOL_LIBRARY"] = lib
            cmd = B.cupool_prefix(args.cupool, free=free or None, stats=stats) + cmd
        name = name or "%s.%s" % (kind, label)
        rc, out, err = B.run(cmd, env, args.timeout, logdir, name)
        found = B.json_lines(out)
        if not found:
            errors.append("%s: exit %s: %s" % (name, rc, B.tail(err, 3)))
            return None, err
        r = found[-1]
        r.update({"kind": kind, "label": label, "rc": rc})
        checks.append({"name": "loop %s: results verified on the device (%d wrong)" % (name, r["errors"]),
                       "ok": r["errors"] == 0 and rc == 0})
        return r, err

    for kind in ("static", "shared"):
        # Proof: cupool sees cudaMalloc of this cudart.
        r, err = go(kind, "proof", "", False, 50, 1, stats=True, name="%s.proof" % kind)
        if r:
            count = sum(int(m.group(2)) for m in map(STAT_LINE.match, err.splitlines()) if m)
            pooled = [int(m.group(1)) for m in map(POOLED_LINE.match, err.splitlines()) if m]
            ok = count >= r["cudaMalloc_calls"] and sum(pooled) > 0
            checks.append({"name": "cudart %s: cupool saw %d cuMemAlloc_v2 for %d cudaMalloc, %d pooled"
                                   % (kind, count, r["cudaMalloc_calls"], sum(pooled)), "ok": ok})
        for label, free in (("native", None), ("cupool", ""), ("cupool-sync", "sync")):
            r, _ = go(kind, "alloc-" + label, free, False, args.iters, args.reps)
            if r:
                rows.append(r)
        medians = {"native": [], "cupool": []}
        for round_ in range(1, args.noalloc_rounds + 1):
            for label, free in (("native", None), ("cupool", "")):
                r, _ = go(kind, "noalloc-%s" % label, free, True, args.noalloc_iters, args.reps,
                          name="%s.noalloc-%s.%d" % (kind, label, round_))
                if r:
                    medians[label].append(r["us_median"])
                    rows.append(r)
        n = min(medians["native"]) if medians["native"] else None
        c = min(medians["cupool"]) if medians["cupool"] else None
        targets.append(B.target("loop.cu cudart %s, no allocation in the loop: cupool / native" % kind,
                                B.ratio(c, n), "<=", 1.01, "x",
                                "min of %d processes x %d reps each" % (args.noalloc_rounds, args.reps)))
        nat = next((r for r in rows if r["kind"] == kind and r["label"] == "alloc-native"), None)
        cp = next((r for r in rows if r["kind"] == kind and r["label"] == "alloc-cupool"), None)
        if nat and cp:
            checks.append({"name": "loop.cu cudart %s, cudaMalloc/cudaFree in the loop: native %.1f us vs cupool "
                                   "%.1f us per iteration (%.1fx faster)"
                                   % (kind, nat["us_median"], cp["us_median"], nat["us_median"] / cp["us_median"]),
                           "ok": cp["us_median"] < nat["us_median"]})

    print("\nloop.cu: microseconds per iteration (median of reps)\n")
    B.table(rows, [("kind", "cudart"), ("label", "run"), ("us_median", "us/iter"), ("us_min", "min"),
                   ("us_max", "max"), ("errors", "wrong"), ("cudaMalloc_calls", "cudaMalloc")])
    print()
    B.print_targets(targets)
    for c in checks:
        print("%s %s" % ("ok  " if c["ok"] else "FAIL", c["name"]))
    for e in errors:
        print("error: " + e)
    B.write_results(args.out, "loop", {"benchmark": "loop", "rows": rows, "targets": targets, "checks": checks,
                                       "errors": errors, "config": vars(args)})
    return 1 if errors or not all(c["ok"] for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
