#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs bench/alloc_bench in every configuration side by side and compares:

  native            cuMemAlloc + cuMemFree on the real driver
  cupool-MODE       cuMemAlloc + cuMemFree under cupool with CUPOOL_FREE=MODE,
                    its timed rounds alternating (alloc_bench -p) with those of
  bare-MODE         the pool calls of cupool's free MODE for a block it takes
                    from the pool and gives back (bare-ordered: what a plain
                    redirect makes; cupool's ordered serves a size it freed
                    before from its store instead), issued straight to
                    the driver in the same process (auto pairs with
                    bare-ordered: what auto does in a program without
                    non-blocking streams)
  cupool-auto-log   as cupool-auto with CUPOOL_LOG to a file (1 thread), also
                    paired with bare-ordered
  cupool-auto-nolive  as cupool-auto with CUPOOL_LIVE=0 (1 thread): no live
                    statistics page and no thread writing it, also paired
                    with bare-ordered

One pair costs about a microsecond, and where a process's code and data land
(address-space layout, the GPU's state) moves that by tenths of a
microsecond from one process to the next, more than the 10% the targets look
at.  So cupool and its bare calls are timed in the same process, in
alternating rounds, and each of those processes is run --rounds times,
interleaved with the others.  A ratio is the median over the rounds of
cupool's median / the bare calls' median in that round; a time shown is the
lowest of a configuration's per-round medians.  The CSV rows of every round
go into RESULTS/alloc.csv and RESULTS/alloc.json (rows, targets) and a table
is printed.

The log's cost compares two processes (logging is on or off for a whole
process), so it too is read against the bare calls each process timed: in
each round, (cupool-auto-log / its bare) - (cupool-auto / its bare), times
cupool-auto's bare time; the figure is the median over the rounds.  A
process that runs slow as a whole then moves its cupool and bare rounds
alike and the difference keeps only what the log adds.  The live page's
cost is read the same way, cupool-auto (the page on, the default) against
cupool-auto-nolive.

Targets: cupool-MODE / bare-MODE <= 1.10; native / cupool-auto >= 50 at
1 MiB, 1 thread; log on - log off <= 0.5 us; live page on - off <= 0.05 us.
"""

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

MODES = ["ordered", "deferred", "sync", "auto"]
BARE_OF = {"ordered": "bare-ordered", "deferred": "bare-deferred", "sync": "bare-sync", "auto": "bare-ordered"}


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("ALLOC_BENCH", "bench/alloc_bench"),
                    help="the alloc_bench binary (default bench/alloc_bench)")
    ap.add_argument("--cupool", default="scripts/cupool", help="the cupool launcher")
    ap.add_argument("--library", help="libcupool.so (default $CUPOOL_LIBRARY)")
    ap.add_argument("--out", default="bench-results", help="results directory")
    ap.add_argument("--sizes", default="256,4K,64K,1M,16M,256M,1G")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--log-sizes", default=None, help="sizes of the logging run (default: --sizes)")
    ap.add_argument("--target-time", type=float, default=0.1, help="seconds per configuration")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5, help="times the whole list of runs is repeated, interleaved")
    ap.add_argument("--cap", default="17G", help="skip configurations needing more live bytes")
    # The logging run writes hundreds of MB in seconds; on a disk the kernel's
    # writeback throttling, not cupool, would set the figure.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"
    ap.add_argument("--log-file", default=shm + "/cupool-alloc-bench-%p.jsonl",
                    help="log of the logging run (default in /dev/shm: cupool's cost, not the disk's)")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per run")
    args = ap.parse_args()

    lib = B.library_path(args.cupool, args.library)
    if not lib or not os.path.exists(lib):
        sys.exit("alloc_bench.py: cannot find libcupool.so (use --library or CUPOOL_LIBRARY)")
    if not os.access(args.bin, os.X_OK):
        sys.exit("alloc_bench.py: %s is not built" % args.bin)
    logdir = os.path.join(args.out, "logs", "alloc")
    csvdir = os.path.join(args.out, "alloc")
    os.makedirs(csvdir, exist_ok=True)
    common = ["-s", args.sizes, "-t", args.threads, "-T", str(args.target_time), "-r", str(args.reps),
              "-c", args.cap]

    runs = [("native", "api", None, None, common, {})]
    runs += [("cupool-" + m, "api", m, None, ["-p", BARE_OF[m]] + common, {}) for m in MODES]
    log_common = ["-s", args.log_sizes or args.sizes, "-t", "1", "-T", str(args.target_time),
                  "-r", str(args.reps), "-c", args.cap]
    runs += [("cupool-auto-log", "api", "auto", args.log_file, ["-p", BARE_OF["auto"]] + log_common, {})]
    runs += [("cupool-auto-nolive", "api", "auto", None, ["-p", BARE_OF["auto"]] + log_common, {"CUPOOL_LIVE": "0"})]

    errors, rows, notes = [], [], []
    schedule = [(k, run) for k in range(max(1, args.rounds)) for run in runs]
    for round_no, (label, mode, free, log_path, opts, extra_env) in schedule:
        path = os.path.join(csvdir, "%s.round%d.csv" % (label, round_no + 1))
        if os.path.exists(path):
            os.unlink(path)
        cmd = [args.bin, "-m", mode, "-l", label, "-o", path] + opts
        if free:
            env = B.clean_env(dict({"CUPOOL_LIBRARY": lib}, **extra_env))
            cmd = B.cupool_prefix(args.cupool, free=free, log_path=log_path) + cmd
        else:
            env = B.clean_env()
        rc, out, err = B.run(cmd, env, args.timeout, logdir, "%s.round%d" % (label, round_no + 1))
        if rc is None and round_no > 0:
            continue  # out of time for a further round: the earlier rounds stand
        if rc != 0:
            errors.append("%s: exit %s: %s" % (label, rc, B.tail(err, 3)))
        if log_path:
            # The log of a process is named after its pid: remove what was written.
            pattern = log_path.replace("%p", "")
            d, base = os.path.split(pattern)
            size = 0
            for f in os.listdir(d or "."):
                stem, ext = os.path.splitext(base)
                if f.startswith(stem) and f.endswith(ext):
                    full = os.path.join(d, f)
                    size += os.path.getsize(full)
                    os.unlink(full)
            notes.append("the logging run of round %d wrote %.1f MB of log" % (round_no + 1, size / 1e6))
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for r in csv.DictReader(f):
                loaded = r["cupool"] not in ("", "0")
                if loaded != bool(free):
                    errors.append("%s: cupool %s loaded in this run" % (label, "was" if loaded else "was not"))
                r["size"] = int(r["size"])
                r["threads"] = int(r["threads"])
                r["us"] = float(r["us_median"]) if r["status"] == "ok" else None
                r["round"] = round_no + 1
                rows.append(r)

    # Each configuration: the lowest of its rounds' medians; each ratio the
    # median over the rounds of the ratio within the round's process.
    by, per_round = {}, {}
    for r in rows:
        key = (r["label"], r["size"], r["threads"])
        if r["us"] is not None and (by.get(key) is None or r["us"] < by[key]):
            by[key] = r["us"]
        per_round[key + (r["round"],)] = r["us"]

    def round_ratio(label, bare_mode, s, t, k):
        mine, bare = per_round.get((label, s, t, k)), per_round.get(("%s:%s" % (label, bare_mode), s, t, k))
        return mine / bare if mine is not None and bare else None

    rounds = range(1, max(1, args.rounds) + 1)

    def paired_ratio(m, s, t):
        return B.median(round_ratio("cupool-" + m, BARE_OF[m], s, t, k) for k in rounds)

    def delta(more, less, s, t):
        """What run `more` costs a pair beyond run `less`, each against its own bare calls."""
        deltas = []
        for k in rounds:
            with_it = round_ratio(more, BARE_OF["auto"], s, t, k)
            without = round_ratio(less, BARE_OF["auto"], s, t, k)
            bare = per_round.get(("cupool-auto:" + BARE_OF["auto"], s, t, k))
            if with_it is not None and without is not None and bare:
                deltas.append((with_it - without) * bare)
        return B.median(deltas)
    rounds_done = max([r["round"] for r in rows] or [0])
    sizes = sorted({r["size"] for r in rows})
    threads = sorted({r["threads"] for r in rows})
    summary = []
    for s in sizes:
        for t in threads:
            row = {"size": human(s), "size_bytes": s, "threads": t}
            row["native"] = by.get(("native", s, t))
            for m in MODES:
                row["cupool-" + m] = by.get(("cupool-" + m, s, t))
                row["bare-" + m] = by.get(("cupool-%s:%s" % (m, BARE_OF[m]), s, t))
                row["ratio-" + m] = paired_ratio(m, s, t)
            row["native/cupool"] = B.ratio(row["native"], row["cupool-auto"])
            row["cupool-auto-log"] = by.get(("cupool-auto-log", s, t))
            row["log-delta"] = delta("cupool-auto-log", "cupool-auto", s, t)
            row["live-delta"] = delta("cupool-auto", "cupool-auto-nolive", s, t)
            summary.append(row)

    print("\nalloc_bench: microseconds per cuMemAlloc + cuMemFree pair (lowest median of %d rounds), and ratios "
          "(median of the rounds' cupool / bare in one process)\n" % rounds_done)
    B.table(summary, [("size", "size"), ("threads", "thr"), ("native", "native"),
                      ("bare-ordered", "bare-ord"), ("cupool-ordered", "cp-ord"), ("ratio-ordered", "cp/bare"),
                      ("bare-deferred", "bare-def"), ("cupool-deferred", "cp-def"), ("ratio-deferred", "cp/bare"),
                      ("bare-sync", "bare-sync"), ("cupool-sync", "cp-sync"), ("ratio-sync", "cp/bare"),
                      ("bare-auto", "bare-ord'"), ("cupool-auto", "cp-auto"), ("ratio-auto", "auto/bare-ord"),
                      ("native/cupool", "native/cp-auto"), ("log-delta", "log +us"), ("live-delta", "live +us")])

    targets = []
    for m in MODES:
        one = [(r["ratio-" + m], r["size"]) for r in summary if r["threads"] == 1 and r["ratio-" + m] is not None]
        allr = [(r["ratio-" + m], "%s x%d" % (r["size"], r["threads"])) for r in summary
                if r["ratio-" + m] is not None]
        if one:
            worst = max(one)
            targets.append(B.target("alloc: cupool-%s / %s, 1 thread (worst size)" % (m, BARE_OF[m]),
                                    worst[0], "<=", 1.10, "x", "worst at %s" % worst[1]))
        else:
            targets.append(B.target("alloc: cupool-%s / %s, 1 thread (worst size)" % (m, BARE_OF[m]),
                                    None, "<=", 1.10, "x"))
        if allr and len(threads) > 1:
            worst = max(allr)
            targets.append(B.target("alloc: cupool-%s / %s, any threads (worst)" % (m, BARE_OF[m]),
                                    worst[0], "<=", 1.10, "x", "worst at %s" % worst[1]))
    mib = [r for r in summary if r["size_bytes"] == 1 << 20 and r["threads"] == 1]
    targets.append(B.target("alloc: native / cupool-auto at 1 MiB, 1 thread",
                            mib[0]["native/cupool"] if mib else None, ">=", 50, "x"))
    deltas = [(r["log-delta"], r["size"]) for r in summary if r["threads"] == 1 and r["log-delta"] is not None]
    worst = max(deltas) if deltas else (None, "")
    targets.append(B.target("alloc: CUPOOL_LOG on - off per pair, 1 thread (worst size)", worst[0], "<=", 0.5,
                            " us", "worst at %s" % worst[1] if deltas else ""))
    live = [(r["live-delta"], r["size"]) for r in summary if r["threads"] == 1 and r["live-delta"] is not None]
    worst = max(live) if live else (None, "")
    targets.append(B.target("alloc: CUPOOL_LIVE on - off per pair, 1 thread (worst size)", worst[0], "<=", 0.05,
                            " us", "worst at %s" % worst[1] if live else ""))
    print()
    B.print_targets(targets)
    for e in errors:
        print("error: " + e)

    with open(os.path.join(args.out, "alloc.csv"), "w") as f:
        fields = ["label", "round", "mode", "cupool", "size", "threads", "iters", "reps", "us_median", "us_min",
                  "us_max", "status"]
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    B.write_results(args.out, "alloc", {
        "benchmark": "alloc", "rows": rows, "summary": summary, "targets": targets, "errors": errors,
        "notes": notes, "config": {"sizes": args.sizes, "threads": args.threads, "target_time": args.target_time,
                                   "reps": args.reps, "rounds": args.rounds, "rounds_done": rounds_done,
                                   "cap": args.cap}})
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
