#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs bench/host_bench natively and under cupool, interleaved, and compares:

  pairs     allocation + free pairs of pinned host memory (cuMemHostAlloc
            with flags 0 and with PORTABLE|DEVICEMAP, cuMemAllocHost) and of
            managed memory (cuMemAllocManaged), by size
  staging   a program that pins a staging buffer per iteration (allocate,
            fill, copy to the device, change it there, copy back, check,
            free); time per iteration
  managed   a program that allocates managed memory per iteration (allocate,
            host writes, prefetch to the device where supported, a device
            memset, host reads, free); time per iteration

One warm-up process runs first (the driver's first start on a machine is
slower than any later one).  Then --rounds rounds each run every mode once
natively and once under cupool (the launcher, default settings), in a
process each, alternating which of the two goes first.  A time is the
median over the rounds of a process's median; *spread* is (max - min) /
median over the rounds; *native/cupool* is the ratio of the medians and
*paired* the median over the rounds of the ratio within the round.  staging
and managed compute a checksum of all the data the host read back: every
run of a mode and size, native or under cupool, must print the same one, and
count no wrong word.  One run of each mode under cupool with its statistics
(CUPOOL_STATS) shows whether the kept store served the allocations; it
counts for that check only.

Writes RESULTS/host.csv (every row of every run), RESULTS/host.json (rows,
summary, checks) and RESULTS/host/ (the runs' CSVs), RESULTS/logs/host/.
"""

import argparse
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

MODES = ("pairs", "staging", "managed")
KIND_TITLES = {"host0": "cuMemHostAlloc(0)", "host-pm": "cuMemHostAlloc(PORTABLE|DEVICEMAP)",
               "allochost": "cuMemAllocHost", "managed": "cuMemAllocManaged(GLOBAL)"}

# cupool's statistics at exit (CUPOOL_STATS=1), one block per kind used:
#   cupool:   pinned host memory:
#   cupool:     allocations 100 (served by kept blocks 99), frees 100 (kept 100)
STATS_RE = re.compile(r"(pinned host|managed) memory:\s*\n[^\n]*?allocations (\d+) \(served by kept blocks (\d+)\), "
                      r"frees (\d+) \(kept (\d+)\)")


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size


def spread(values):
    v = [x for x in values if x is not None]
    m = B.median(v)
    return (max(v) - min(v)) / m if v and m else None


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("HOST_BENCH", "bench/host_bench"),
                    help="the host_bench binary (default bench/host_bench)")
    ap.add_argument("--cupool", default="scripts/cupool", help="the cupool launcher")
    ap.add_argument("--library", help="libcupool.so (default $CUPOOL_LIBRARY)")
    ap.add_argument("--out", default="bench-results", help="results directory")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--pair-sizes", default="4K,1M,16M,256M", help="sizes of the pairs mode")
    ap.add_argument("--sizes", default="4K,1M,16M,64M", help="sizes of staging and managed")
    ap.add_argument("--target-time", type=float, default=0.15, help="pairs: seconds per kind and size")
    ap.add_argument("--round-bytes", default="64M",
                    help="staging, managed: bytes of iterations per timed round (3 to 64 iterations)")
    ap.add_argument("--reps", type=int, default=3, help="timed rounds in a process")
    ap.add_argument("--rounds", type=int, default=5, help="processes of each mode and configuration, interleaved")
    ap.add_argument("--passthrough", action="store_true",
                    help="also run cupool with CUPOOL_HOST=0 CUPOOL_MANAGED=0 (its shims passing every call on)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per run")
    args = ap.parse_args()

    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        sys.exit("host_bench.py: unknown mode(s) %s" % ", ".join(bad))
    lib = B.library_path(args.cupool, args.library)
    if not lib or not os.path.exists(lib):
        sys.exit("host_bench.py: cannot find libcupool.so (use --library or CUPOOL_LIBRARY)")
    if not os.access(args.bin, os.X_OK):
        sys.exit("host_bench.py: %s is not built" % args.bin)
    logdir = os.path.join(args.out, "logs", "host")
    csvdir = os.path.join(args.out, "host")
    os.makedirs(csvdir, exist_ok=True)

    def mode_args(mode):
        if mode == "pairs":
            return ["-s", args.pair_sizes, "-T", str(args.target_time), "-r", str(args.reps)]
        return ["-s", args.sizes, "-b", args.round_bytes, "-r", str(args.reps)]

    configs = [("native", None), ("cupool", {})]
    if args.passthrough:
        configs.append(("cupool-pass", {"CUPOOL_HOST": "0", "CUPOOL_MANAGED": "0"}))

    def command(config_env, extra, stats=False):
        if config_env is None:
            return [args.bin] + extra, B.clean_env()
        env = B.clean_env({"CUPOOL_LIBRARY": lib})
        env.update(config_env)
        return B.cupool_prefix(args.cupool, stats=stats) + [args.bin] + extra, env

    errors, notes, checks, rows = [], [], [], []

    # ---- warm-up: the driver's first start, not counted ----
    cmd, env = command(None, ["-m", "pairs", "-s", "4K", "-k", "host0,managed", "-T", "0.02", "-r", "1",
                              "-o", os.devnull])
    rc, _, err = B.run(cmd, env, args.timeout, logdir, "warmup")
    if rc != 0:
        errors.append("warm-up: exit %s: %s" % (rc, B.tail(err, 3)))

    # ---- proof: cupool's statistics say the kept store served the allocations ----
    proof = {"pairs": ["-m", "pairs", "-s", "1M", "-n", "20", "-r", "1"],
             "staging": ["-m", "staging", "-s", "1M", "-n", "8", "-r", "1"],
             "managed": ["-m", "managed", "-s", "1M", "-n", "8", "-r", "1"]}
    wants = {"pairs": ("pinned host", "managed"), "staging": ("pinned host",), "managed": ("managed",)}
    for mode in modes:
        cmd, env = command({}, proof[mode] + ["-l", "proof", "-o", os.devnull], stats=True)
        rc, _, err = B.run(cmd, env, args.timeout, logdir, "proof-" + mode)
        if rc is None:
            continue
        if rc != 0:
            errors.append("proof %s: exit %s: %s" % (mode, rc, B.tail(err, 3)))
            continue
        seen = {m.group(1): [int(m.group(i)) for i in range(2, 6)] for m in STATS_RE.finditer(err)}
        for kind in wants[mode]:
            got = seen.get(kind)
            if got:
                notes.append("%s under cupool (statistics): %s memory: %d allocations, %d served by kept blocks; "
                             "%d frees, %d kept" % (mode, kind, got[0], got[1], got[2], got[3]))
            checks.append({"name": "host %s: cupool served %s allocations from kept blocks%s" % (
                mode, kind, " (%d of %d)" % (got[1], got[0]) if got else " (no statistics for the kind)"),
                "ok": bool(got and got[1] > 0)})

    # ---- the rounds ----
    rounds_done = 0
    for k in range(1, max(1, args.rounds) + 1):
        order = configs if k % 2 else configs[::-1]
        ran = False
        for mode in modes:
            for label, config_env in order:
                path = os.path.join(csvdir, "%s.%s.round%d.csv" % (mode, label, k))
                if os.path.exists(path):
                    os.unlink(path)
                cmd, env = command(config_env, ["-m", mode, "-l", label, "-o", path] + mode_args(mode))
                rc, _, err = B.run(cmd, env, args.timeout, logdir, "%s.%s.round%d" % (mode, label, k))
                if rc is None and k > 1:
                    continue  # out of time for a further round: the earlier rounds stand
                if rc != 0:
                    errors.append("%s %s round %d: exit %s: %s" % (mode, label, k, rc, B.tail(err, 3)))
                for r in read_rows(path):
                    loaded = r["cupool"] not in ("", "0")
                    if loaded != (config_env is not None):
                        errors.append("%s %s round %d: cupool %s loaded" % (
                            mode, label, k, "was" if loaded else "was not"))
                    r["round"] = k
                    r["config"] = label
                    r["size"] = int(r["size"])
                    for f in ("us_median", "us_min", "us_max", "alloc_us"):
                        r[f] = float(r[f]) if r.get(f) else None
                    r["wrong"] = int(r["wrong"]) if r.get("wrong") else None
                    rows.append(r)
                    ran = True
        if ran:
            rounds_done = k

    # ---- summary ----
    def values(config, mode, kind, size, field="us_median"):
        return {r["round"]: r[field] for r in rows if (r["config"], r["mode"], r["kind"], r["size"]) ==
                (config, mode, kind, size) and r["status"] == "ok" and r[field] is not None}

    summary = []
    keys = []
    for r in rows:
        key = (r["mode"], r["kind"], r["size"])
        if key not in keys:
            keys.append(key)
    keys.sort(key=lambda t: (modes.index(t[0]), list(KIND_TITLES).index(t[1]) if t[1] in KIND_TITLES else 9, t[2]))
    for mode, kind, size in keys:
        s = {"mode": mode, "kind": kind, "call": KIND_TITLES.get(kind, kind), "size": human(size), "size_bytes": size}
        for label, _ in configs:
            v = values(label, mode, kind, size)
            s[label] = B.median(v.values())
            s[label + "-spread"] = spread(v.values())
            s[label + "-runs"] = len(v)
            if mode != "pairs":
                s[label + "-alloc"] = B.median(values(label, mode, kind, size, "alloc_us").values())
        nat, cp = values("native", mode, kind, size), values("cupool", mode, kind, size)
        s["native/cupool"] = B.ratio(s["native"], s["cupool"])
        s["paired"] = B.median(B.ratio(nat[k], cp[k]) for k in nat if k in cp)
        if mode != "pairs":
            mine = [r for r in rows if (r["mode"], r["kind"], r["size"]) == (mode, kind, size)]
            sums = {r["checksum"] for r in mine if r.get("checksum")}
            wrong = sum(r["wrong"] or 0 for r in mine)
            s["checksum"] = sums.pop() if len(sums) == 1 else "%d different" % len(sums)
            s["wrong"] = wrong
            by_config = ", ".join("%d %s" % (sum(1 for r in mine if r["config"] == label), label)
                                  for label, _ in configs)
            checks.append({"name": "host %s %s: one checksum over %s runs (%s)" % (
                mode, human(size), by_config, s["checksum"]), "ok": len({r.get("checksum") for r in mine}) == 1
                and all(r["status"] == "ok" for r in mine)})
            checks.append({"name": "host %s %s: every word the host read back as expected (%d wrong)" % (
                mode, human(size), wrong), "ok": wrong == 0 and bool(mine)})
        summary.append(s)

    print("\nhost_bench: microseconds per pair (pairs) or per iteration (staging, managed): the median over %d "
          "rounds of each process's median, its spread (max - min) / median, and native / cupool\n" % rounds_done)
    cols = [("mode", "mode"), ("call", "kind"), ("size", "size"), ("native", "native us"),
            ("native-spread", "spread"), ("cupool", "cupool us"), ("cupool-spread", "spread")]
    if args.passthrough:
        cols += [("cupool-pass", "pass us"), ("cupool-pass-spread", "spread")]
    cols += [("native/cupool", "native/cupool"), ("paired", "paired"), ("native-alloc", "native alloc us"),
             ("cupool-alloc", "cupool alloc us"), ("checksum", "checksum"), ("wrong", "wrong")]
    B.table(summary, cols)
    print()
    for c in checks:
        print("%s %s" % ("ok  " if c["ok"] else "FAIL", c["name"]))
    for n in notes:
        print("note: " + n)
    for e in errors:
        print("error: " + e)

    with open(os.path.join(args.out, "host.csv"), "w") as f:
        fields = ["config", "round", "label", "mode", "kind", "cupool", "size", "iters", "reps", "us_median",
                  "us_min", "us_max", "alloc_us", "checksum", "wrong", "prefetch", "status"]
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    prefetch = sorted({r["prefetch"] for r in rows if r["mode"] == "managed" and r.get("prefetch")})
    # The GPU, from the machine description scripts/bench-gpu.sh wrote beside
    # it: the results say where they were measured when copied alone.
    try:
        with open(os.path.join(args.out, "machine.json")) as f:
            gpu = json.load(f).get("GPU")
    except (OSError, ValueError):
        gpu = None
    B.write_results(args.out, "host", {
        "benchmark": "host", "rows": rows, "summary": summary, "targets": [], "checks": checks, "errors": errors,
        "notes": notes, "config": {"modes": modes, "pair_sizes": args.pair_sizes, "sizes": args.sizes,
                                   "target_time": args.target_time, "round_bytes": args.round_bytes,
                                   "reps": args.reps, "rounds": args.rounds, "rounds_done": rounds_done,
                                   "configs": [c for c, _ in configs], "managed_prefetch": prefetch, "gpu": gpu}})
    return 1 if errors or not all(c["ok"] for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
