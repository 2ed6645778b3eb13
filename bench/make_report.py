#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes docs/BENCHMARKS.md (Markdown on stdout) from a results directory
made by scripts/bench-gpu.sh:

  python3 bench/make_report.py bench-results > docs/BENCHMARKS.md
  mkdir -p docs/img && cp bench-results/img/*.png bench-results/img/*.svg docs/img/

  python3 bench/make_report.py --summary bench-results   (the target table only, as text)
  python3 bench/make_report.py --section host bench-results   (one section's Markdown: host, parity, capacity)

Missing results make "not measured" sections, so the document can be made
before any GPU run.  Pictures are referenced as img/NAME.png (docs/img/).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

BENCHES = ("alloc", "host", "torch", "cupy", "parity", "capacity", "loop", "memset")


def load(results, name):
    path = os.path.join(results, name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def md_table(rows, columns):
    out = ["| " + " | ".join(title for _, title in columns) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(B.fmt(r.get(k)) for k, _ in columns) + " |")
    return "\n".join(out)


def met_word(t):
    return "**met**" if t["met"] else ("**not met**" if t["met"] is False else "not measured")


def targets_table(targets):
    rows = [{"target": t["name"], "value": (B.fmt(t["value"]) + t["unit"]) if t["value"] is not None else "-",
             "want": "%s %s%s" % (t["op"], B.fmt(t["threshold"]), t["unit"]), "met": met_word(t),
             "detail": t.get("detail", "")} for t in targets]
    return md_table(rows, [("target", "target"), ("value", "measured"), ("want", "wanted"), ("met", "result"),
                           ("detail", "where")])


def picture(results, name, alt):
    if os.path.exists(os.path.join(results, "img", name + ".png")):
        return "\n![%s](img/%s.png)\n" % (alt, name)
    return ""


def section_machine(results):
    m = load(results, "machine") or {}
    if not m:
        return "Not measured yet: run `scripts/bench-gpu.sh` on a GPU machine.\n"
    rows = [{"what": k, "value": str(v)} for k, v in sorted(m.items())]
    return md_table(rows, [("what", "what"), ("value", "value")]) + "\n"


def rounds_sentence(results, name):
    """The sentences on interleaved rounds, when a framework's results have
    more than one: how many every configuration ran, how many more the ones
    the targets compare ran alone, and how the two ratios use them."""
    d = load(results, name) or {}
    runs = {(r["workload"], r["config"]): len(r.get("rounds_ms") or []) for r in d.get("rows", []) if r.get("ok")}
    never = sum(1 for e in d.get("errors", []) if e.endswith("out of time (BENCH_DEADLINE)") and ".round1:" in e)
    if not runs:
        return ""
    if max(runs.values()) < 2:
        if not never:
            return ""
        return (" Every configuration was to run at least once; the stage ran out of time before %d of them "
                "ran at all, and each of the others ran once." % never)
    cfg = d.get("config") or {}
    full = cfg.get("rounds") or 1
    short = sum(1 for n in runs.values() if n < full)
    if short:
        first = ("Every configuration was to run %d times, interleaved with the others; the stage ran out of "
                 "time before %d of them ran every time." % (full, short))
    elif full > 1:
        first = "Every configuration ran %d times, interleaved with the others." % full
    else:
        first = "Every configuration ran once."
    focus = [(wl, c) for wl, c in cfg.get("focus") or [] if (wl, c) in runs]
    extra = ""
    if focus and any(runs[k] > full for k in focus):
        counts = sorted({min(runs[k] for k in focus), max(runs[k] for k in focus)})
        extra = (" Then the configurations a time target compares (%s) ran on their own in further rounds "
                 "while the stage had time: %s runs each in all." % (
                     ", ".join("%s %s" % (c, wl) for wl, c in focus), "–".join(str(n) for n in counts)))
    return (" %s%s Each keeps its run with the lowest median (*time ratio*: lowest against lowest, over the "
            "rounds both ran). *paired ratio* is the median over the rounds of the configuration's time over the "
            "reference's in the same round, which a drift shared by neighbouring processes does not move." % (
                first, extra))


def section_alloc(results):
    d = load(results, "alloc")
    cfg = (d or {}).get("config", {})
    if cfg.get("rounds_done"):
        timing = ("the median of %s timed rounds after a warm-up, in each of %s interleaved runs of every "
                  "configuration; the lowest of those medians is shown" % (cfg.get("reps", 3), cfg["rounds_done"]))
    else:
        timing = "median of %s timed rounds after a warm-up" % cfg.get("reps", 3)
    text = ["`bench/alloc_bench` times a `cuMemAlloc` + `cuMemFree` pair per size and thread count "
            "(each thread its own loop on the primary context; time = wall time / pairs per thread, "
            + timing + "). *native* is the real driver, *cupool-MODE* the program under cupool with "
            "`CUPOOL_FREE=MODE`, and *bare-MODE* the pool calls cupool's free MODE makes for a block it takes from "
            "the pool and gives back to it (*bare-ordered*: `cuMemAllocFromPoolAsync` + `cuMemFreeAsync` on the "
            "legacy stream, what a plain redirect makes; cupool's `ordered` serves an allocation of a size it "
            "freed before from its store instead, after one event on the legacy stream; *bare-deferred* keeps "
            "blocks ready as cupool does), issued by the "
            "benchmark straight to the driver in the same process, in timed rounds alternating with cupool's "
            "(`alloc_bench -p`): both share one address-space layout and GPU state, which otherwise move a "
            "pair by tenths of a microsecond between processes. A *ratio* is the median over the runs of "
            "cupool / bare within the run. `auto` becomes `ordered` in a program without non-blocking "
            "streams, so it is paired with bare-ordered. *log +us* is what `CUPOOL_LOG` adds to a cupool-auto "
            "pair: logging is on for a whole process, so each of the two processes is read against the bare "
            "calls it timed itself, (with log / its bare - without / its bare) x bare, the median over the "
            "runs.\n"]
    if not d:
        return "\n".join(text + ["Not measured yet.\n"])
    text.append(md_table(d.get("summary", []), [
        ("size", "size"), ("threads", "threads"), ("native", "native µs"),
        ("bare-ordered", "bare ordered"), ("cupool-ordered", "cupool ordered"), ("ratio-ordered", "ratio"),
        ("bare-deferred", "bare deferred"), ("cupool-deferred", "cupool deferred"), ("ratio-deferred", "ratio"),
        ("bare-sync", "bare sync"), ("cupool-sync", "cupool sync"), ("ratio-sync", "ratio"),
        ("bare-auto", "bare ordered (auto's run)"), ("cupool-auto", "cupool auto"),
        ("ratio-auto", "auto / bare ordered"), ("native/cupool", "native / cupool auto"), ("log-delta", "log +µs")]))
    text.append(picture(results, "alloc", "time per allocation pair by size"))
    for n in d.get("notes", []):
        text.append("- " + n)
    return "\n".join(text) + "\n"


HOST_INTRO = """\
`bench/host_bench` (stage `host` of `scripts/bench-gpu.sh`, driven by `bench/host_bench.py`) runs natively \
and under cupool with its default settings, which keep a freed pinned host or managed block for the next \
allocation of the same call, flags and size. *pairs*: an allocation + free pair, timed per kind and size \
(warmed up, rounds sized to %(target_time)s s, median of %(reps)s rounds): `cuMemHostAlloc` with flags 0 \
and with `PORTABLE|DEVICEMAP`, `cuMemAllocHost` (each + `cuMemFreeHost`), `cuMemAllocManaged(GLOBAL)` + \
`cuMemFree`. *staging*: a program that pins a staging buffer per iteration: `cuMemHostAlloc`, the host \
fills it, `cuMemcpyHtoDAsync` to a device buffer on a non-blocking stream, `cuMemsetD8Async` and \
`cuMemcpyDtoDAsync` change it there, `cuMemcpyDtoHAsync` back into the pinned buffer, \
`cuStreamSynchronize`, the host checks every word and folds it into a checksum, `cuMemFreeHost`. \
*managed*: per iteration `cuMemAllocManaged`, the host writes it, `cuMemPrefetchAsync` to the device \
(where the device has concurrent managed access), `cuMemsetD32Async` on a quarter of it, \
`cuStreamSynchronize`, the host reads it into the checksum, `cuMemFree`. staging and managed run a fixed \
number of iterations per round (%(round_bytes)s of buffers, 3 to 64 iterations), median of %(reps)s rounds after a \
warm-up iteration; *alloc µs* is the part of an iteration spent in the allocation and free calls. Each mode \
runs in a process per configuration, after one warm-up process, in %(rounds)s interleaved rounds: a time is \
the median over the rounds of the process's median, *spread* (max − min) / median over the rounds, \
*native / cupool* the ratio of those medians and *paired* the median of the ratios within a round. Every \
run of staging or managed at a size, native or under cupool, must compute the same checksum and read \
back no wrong word. Run alone: `BENCH_ONLY=host scripts/bench-gpu.sh bench-results`.
"""

HOST_DEFAULTS = {"target_time": 0.15, "reps": 3, "rounds": 5, "round_bytes": "64M",
                 "pair_sizes": "4K,1M,16M,256M", "sizes": "4K,1M,16M,64M"}
HOST_KINDS = (("pairs", "cuMemHostAlloc(0)"), ("pairs", "cuMemHostAlloc(PORTABLE|DEVICEMAP)"),
              ("pairs", "cuMemAllocHost"), ("pairs", "cuMemAllocManaged(GLOBAL)"),
              ("staging", "cuMemHostAlloc(0)"), ("managed", "cuMemAllocManaged(GLOBAL)"))
HOST_COLUMNS = [("mode", "mode"), ("call", "kind"), ("size", "size"), ("native", "native µs"),
                ("native-spread", "spread"), ("cupool", "cupool µs"), ("cupool-spread", "spread"),
                ("native/cupool", "native / cupool"), ("paired", "paired"), ("native-alloc", "native alloc µs"),
                ("cupool-alloc", "cupool alloc µs"), ("checksum", "checksum equal"), ("wrong", "wrong words")]


def size_words(size):
    """A size as host_bench's options write it (4K, 64M) as the tables do (4 KiB, 64 MiB)."""
    for suffix, unit in (("K", " KiB"), ("M", " MiB"), ("G", " GiB")):
        if size.endswith(suffix):
            return size[:-1] + unit
    return size + " B"


def section_host(results):
    d = load(results, "host")
    cfg = dict(HOST_DEFAULTS)
    cfg.update({k: v for k, v in ((d or {}).get("config") or {}).items() if k in HOST_DEFAULTS})
    cfg["round_bytes"] = size_words(cfg["round_bytes"])
    text = []
    gpu = ((d or {}).get("config") or {}).get("gpu") or (load(results, "machine") or {}).get("GPU")
    if d and gpu:
        # Run alone (--section), this stage may come from another machine
        # than the document's: it names its own.
        text.append("Measured on %s; the raw results are `docs/results/host.json` and `host.csv`.\n" % gpu)
    text.append(HOST_INTRO % cfg)
    columns = list(HOST_COLUMNS)
    if "cupool-pass" in ((d or {}).get("config") or {}).get("configs", []):
        columns[7:7] = [("cupool-pass", "cupool, kinds off, µs"), ("cupool-pass-spread", "spread")]
    if not d:
        # The table the GPU run fills: every mode, kind and default size.
        sizes = {"pairs": cfg["pair_sizes"], "staging": cfg["sizes"], "managed": cfg["sizes"]}
        empty = [{"mode": mode, "call": call.replace("|", "\\|"), "size": size_words(size)}
                 for mode, call in HOST_KINDS for size in sizes[mode].split(",")]
        text.append("Not measured yet.\n")
        text.append(md_table(empty, columns) + "\n")
        return "\n".join(text)
    summary = [dict(r) for r in d.get("summary", [])]
    for r in summary:
        r["call"] = r["call"].replace("|", "\\|")  # a table cell
        if r["mode"] != "pairs":
            r["checksum"] = "yes" if r.get("checksum") and " different" not in r["checksum"] else "no"
    done = (d.get("config") or {}).get("rounds_done")
    prefetch = (d.get("config") or {}).get("managed_prefetch") or []
    text.append("%s rounds ran; managed %s.\n" % (done, "prefetched to the device" if prefetch == ["1"] else
                                                  "did not prefetch" if prefetch == ["0"] else "prefetch: -"))
    text.append(md_table(summary, columns))
    text.append("")
    for c in d.get("checks", []):
        text.append("- %s %s" % ("✔" if c["ok"] else "✘", c["name"]))
    for n in d.get("notes", []):
        text.append("- " + n)
    for e in d.get("errors", []):
        text.append("- error: " + e)
    return "\n".join(text) + "\n"


def section_framework(results, name, ref_config, ref_name, unit):
    d = load(results, name)
    if not d:
        return "Not measured yet.\n"
    text = []
    workloads = []
    for r in d.get("rows", []):
        if r.get("workload") not in workloads:
            workloads.append(r.get("workload"))
    for wl in workloads:
        rows = [r for r in d["rows"] if r.get("workload") == wl]
        ref = next((r for r in rows if r.get("config") == ref_config and r.get("ok")), None)
        for r in rows:
            if not r.get("ok"):
                r["ms_median"] = "failed"
            elif ref and "time_ratio_paired" not in r:  # results from before the column
                r["time_ratio_paired"] = B.paired_ratio(r, ref)
        text.append("**%s** (%s; ratios against %s)\n" % (wl, unit, ref_name))
        text.append(md_table(rows, [("config", "configuration"), ("ms_median", "median ms"),
                                    ("time_ratio", "time ratio"), ("time_ratio_paired", "paired ratio"),
                                    ("peak_mib", "peak MiB"),
                                    ("mem_ratio", "memory ratio"), ("result_diff", "result rel. diff")]))
        text.append("")
    text.append(picture(results, name, name))
    return "\n".join(text) + "\n"


PARITY_INTRO = """\
`bench/parity_bench.py` (stage `parity` of `scripts/bench-gpu.sh`) measures whether cupool holds no more device \
memory than the frameworks' own allocators, and costs no more time, on five workloads: *cnn*, torchvision \
resnet18 (random weights, channels_last) trained through cuDNN with SGD and momentum on a fresh synthetic \
batch of %(batch)s × 3 × %(image_size)s² every step; *cnn-stream*, the same on a non-blocking stream \
(`torch.cuda.Stream()`), synchronized every %(sync_every)s steps only, so that the CPU runs steps ahead of the \
GPU; *lm*, a decoder-only language model (transformers \
`GPT2LMHeadModel` built from a config: 6 layers, d 512, vocabulary %(vocab)s; nothing downloaded) trained \
with AdamW, batch %(lm_batch)s × %(seq)s tokens; *infer*, a 6-layer `nn.TransformerEncoder` (d 512) in \
inference mode with a new random batch (1–%(max_batch)s) and sequence length (16–%(max_seq)s) at every \
call, %(shapes)s calls per pass; *cupy*, FFT autocorrelation, matrix product, sort and reductions on fresh \
temporaries, %(iters)s iterations per pass over square sizes 256–2048. Configurations: *caching* is \
PyTorch's caching allocator (CuPy's `MemoryPool` for *cupy*), *async* PyTorch's \
`backend:cudaMallocAsync` (CuPy's `MemoryAsyncPool`): the driver's stream-ordered pools, which cupool is \
built on; *expandable* the caching allocator with `expandable_segments:True` (PyTorch only; a reference \
with no target yet); *nocache-…* runs with the framework's caching off (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`, \
`cupy.cuda.set_allocator(None)`), natively (first round only) or under cupool, with its default settings, \
`CUPOOL_FREE=deferred`, or `CUPOOL_DEFERRED_ORDER=gpu` (*gpu*: deferred frees back in their pools at once, \
ordered on the GPU behind their fences, measured beside the default).

Each configuration runs in its own process, after one warm-up process, in interleaved rounds. Time is a \
process's median step (%(steps)s timed training steps after %(warmup)s, or per call / iteration over \
%(passes)s timed passes after a warm-up pass); a configuration's *median ms* is the median over its rounds, \
*spread* their (max − min) / median, and a *time ratio* compares medians over the rounds both ran. *Peak \
MiB* is the process's device memory as NVML reports it, sampled every %(sample_ms)s ms by a thread and after \
every step, the highest sample of the process (median over the rounds); a *memory ratio* is the worst round \
of the ones both ran. cupool's runs of round %(stats_round)s print its statistics (`CUPOOL_STATS`): *cupool \
in use* is the peak of what the program held, *cupool reserved* the peak its pools reserved; those runs \
count for memory only (statistics time every pooled call). The goal: both cupool configurations within \
1.10× of caching and 1.15× of async in memory, within 1.03× of caching in time and no slower than async \
beyond async's spread.
"""

PARITY_DEFAULTS = {"batch": 64, "image_size": 224, "sync_every": 4, "vocab": 32000, "lm_batch": 16, "seq": 256, "max_batch": 64,
                   "max_seq": 512, "shapes": 40, "iters": 150, "steps": 15, "warmup": 5, "passes": 4,
                   "sample_ms": 15, "stats_round": 1}


def section_parity(results):
    d = load(results, "parity")
    cfg = dict(PARITY_DEFAULTS)
    cfg.update({k: v for k, v in ((d or {}).get("config") or {}).items() if k in PARITY_DEFAULTS})
    cfg["sample_ms"] = B.fmt(cfg["sample_ms"], 0) if isinstance(cfg["sample_ms"], float) else cfg["sample_ms"]
    text = [PARITY_INTRO % cfg]
    if not d:
        text.append("Not measured yet: `BENCH_ONLY=parity scripts/bench-gpu.sh bench-results`.\n")
        return "\n".join(text)
    versions = ", ".join("%s %s" % kv for kv in sorted({(k, r[k]) for r in d.get("rows", [])
                                                        for k in ("torch", "torchvision", "transformers", "cupy",
                                                                  "device") if r.get(k)}))
    text.append("%d rounds ran%s.\n" % ((d.get("config") or {}).get("rounds_done", 0),
                                        " (%s)" % versions if versions else ""))
    workloads = []
    for r in d.get("rows", []):
        if r.get("workload") not in workloads:
            workloads.append(r.get("workload"))
    for wl in workloads:
        rows = [dict(r) for r in d["rows"] if r.get("workload") == wl]
        for r in rows:
            if not r.get("ok"):
                r["ms_median"] = "failed"
            r["mem_sources"] = "/".join(r.get("mem_sources") or [])
        text.append("**%s** (ms per %s)\n" % (wl, {"infer": "call", "cupy": "iteration"}.get(wl, "step")))
        text.append(md_table(rows, [("config", "configuration"), ("rounds", "runs"), ("ms_median", "median ms"),
                                    ("ms_spread", "spread"), ("time_vs_caching", "time / caching"),
                                    ("paired_vs_caching", "paired / caching"), ("time_vs_async", "time / async"),
                                    ("peak_mib", "peak MiB"), ("mem_vs_caching", "memory / caching"),
                                    ("mem_vs_async", "memory / async"), ("cupool_peak_in_use_mib", "cupool in use MiB"),
                                    ("cupool_peak_reserved_mib", "cupool reserved MiB"),
                                    ("mem_sources", "memory read as"), ("result_diff", "result rel. diff")]))
        text.append("")
    targets = d.get("targets", [])
    if targets:
        met = sum(1 for t in targets if t["met"])
        text.append("%d of %d parity targets met.\n" % (met, len(targets)))
        text.append(targets_table(targets) + "\n")
    for e in d.get("errors", []):
        text.append("- error: " + e)
    for n in d.get("notes", []):
        text.append("- " + n)
    text.append(picture(results, "parity", "parity: peak memory and time per configuration"))
    return "\n".join(text) + "\n"


def section_capacity(results):
    d = load(results, "capacity")
    text = ["`bench/capacity_bench.py` (`BENCH_ONLY=capacity scripts/bench-gpu.sh`) holds the card's free memory "
            "down to the caching allocator's peak for the *cnn* workload at its batch (× a headroom) with a "
            "second process, then finds the largest batch that trains beside it under the caching allocator "
            "and under cupool (default settings, PyTorch's caching off), in multiples of 8 (a stride that "
            "doubles until a batch fails, then halving the gap). At the caching allocator's largest batch both "
            "run again in interleaved rounds. The goal: cupool's largest batch at least the caching "
            "allocator's, and the median of its step times at that batch within 1.03× of the caching "
            "allocator's.\n"]
    if not d:
        text.append("Not measured yet: `BENCH_ONLY=capacity scripts/bench-gpu.sh bench-results`.\n")
        return "\n".join(text)
    text.append(md_table(d.get("rows", []), [("config", "configuration"), ("largest_batch", "largest batch"),
                                             ("ms_at_largest", "ms per step there"),
                                             ("ms_median_at_caching_largest",
                                              "median ms at the caching allocator's largest")]))
    text.append("")
    targets = d.get("targets", [])
    if targets:
        text.append(targets_table(targets) + "\n")
    for e in d.get("errors", []):
        text.append("- error: " + e)
    for n in d.get("notes", []):
        text.append("- " + n)
    return "\n".join(text) + "\n"


def section_loop(results):
    d = load(results, "loop")
    if not d:
        return "Not measured yet.\n"
    text = [md_table(d.get("rows", []), [("kind", "cudart"), ("label", "run"), ("us_median", "µs per iteration"),
                                         ("us_min", "min"), ("us_max", "max"), ("errors", "wrong results"),
                                         ("cudaMalloc_calls", "cudaMalloc calls")]), ""]
    for c in d.get("checks", []):
        text.append("- %s %s" % ("✔" if c["ok"] else "✘", c["name"]))
    text.append(picture(results, "loop", "loop.cu time per iteration"))
    return "\n".join(text) + "\n"


def section_memset(results):
    d = load(results, "memset")
    if not d:
        return "Not measured (bench/memset_bench was not built or not run).\n"
    text = []
    for run in d.get("runs", []):
        text.append("`%s` (exit %s):\n\n```\n%s\n```\n" % (run.get("name"), run.get("rc"), run.get("output", "")))
    return "\n".join(text) + "\n"


def all_targets(results):
    targets, checks, errors = [], [], []
    for name in BENCHES:
        d = load(results, name)
        if d:
            targets += d.get("targets", [])
            checks += d.get("checks", [])
            errors += ["%s: %s" % (name, e) for e in d.get("errors", [])]
    return targets, checks, errors


def losses(results):
    """Every place the data shows cupool slower or bigger than its reference."""
    out = []
    targets, checks, errors = all_targets(results)
    for t in targets:
        if t["met"] is False:
            out.append("- target not met: %s = %s%s (wanted %s %s%s)%s" % (
                t["name"], B.fmt(t["value"]), t["unit"], t["op"], B.fmt(t["threshold"]), t["unit"],
                "; " + t["detail"] if t.get("detail") else ""))
    a = load(results, "alloc")
    if a:
        for r in a.get("summary", []):
            for m in ("ordered", "deferred", "sync", "auto"):
                v = r.get("ratio-" + m)
                if v is not None and v > 1.10:
                    out.append("- alloc %s x %d threads: cupool-%s is %.2fx its bare pool calls" % (
                        r["size"], r["threads"], m, v))
    h = load(results, "host")
    for r in (h or {}).get("summary", []):
        v = r.get("native/cupool")
        if v is not None and v < 1.0:
            out.append("- host %s %s %s: cupool takes %.2fx the native time" % (r["mode"], r["call"], r["size"],
                                                                               1 / v))
    for name, ref in (("torch", "caching"), ("cupy", "pool")):
        d = load(results, name)
        for r in (d or {}).get("rows", []):
            if "cupool" in r.get("config", "") and r.get("ok"):
                if r.get("time_ratio") and r["time_ratio"] > 1.0:
                    out.append("- %s %s %s: %.3fx the time of %s" % (name, r["workload"], r["config"],
                                                                    r["time_ratio"], ref))
                if r.get("mem_ratio") and r["mem_ratio"] > 1.15:
                    out.append("- %s %s %s: %.2fx the peak memory of %s" % (name, r["workload"], r["config"],
                                                                           r["mem_ratio"], ref))
    for c in checks:
        if not c["ok"]:
            out.append("- check failed: " + c["name"])
    for e in errors:
        out.append("- error: " + e)
    return out


PROSE = """\
What cupool costs, by design (the free modes of its design, "Allocation semantics"):

- **`sync`** waits on the host at every free: `cuCtxSynchronize` (0.8 µs when
  the device is idle, but the whole queue of work when it is not), then
  `cuMemFreeAsync`; every allocation waits for cupool's private stream. A
  program that keeps the GPU busy ahead of the CPU (PyTorch, CuPy) loses that
  lead at every free, which is why `sync` is the slowest pooled mode in the
  framework tables - still far cheaper than native `cuMemFree`, which also
  synchronizes and then returns the memory to the driver.
- **`deferred`** never waits on a free, but sets a fence after it: one event
  for all the work of the context (`cuCtxRecordEvent`, about 0.3 µs whatever
  the number of streams), or, under a CUDA tool or with
  `CUPOOL_DEFERRED_FENCE=streams`, an event on the legacy stream and one on
  every live non-blocking stream (about 0.25 µs each with the fence stream's
  wait, so set for a batch of frees). An allocation first polls the fences;
  a block whose fence has completed serves the next allocation of its size
  with no driver call (the ready store); any other allocation is a pool call
  on cupool's private stream and a query of it (about 1.6 µs). Blocks become
  free again only when the GPU has passed their fence, and a ready block
  waits for its own size, so when the GPU runs far behind the CPU the pool
  holds more memory than a stream-ordered allocator would: that shows as
  peak memory.
- **`ordered`** (what `auto` uses unless the program gives streams work by
  turns at every step) issues the same two calls as a stream-ordered
  allocator on its order stream, the stream the work runs on; its cost over the bare calls is cupool's bookkeeping: the context
  lookup (`cuCtxGetCurrent`), the pointer-origin hash table, the statistics
  counters - tens of nanoseconds. With several threads of a context calling
  at once, their calls go through its driver queue: the thread in front makes
  the waiting threads' calls in a row, which keeps the driver's data in one
  cache, so cupool's pair there takes less than each thread's bare calls
  (`CUPOOL_DRIVER_QUEUE`; off under a CUDA tool).
- **`auto`** switches a context from `ordered` to `deferred` once, with one
  `cuCtxSynchronize`, when its order stream would move more than 16 times
  within 10 s (streams given work by turns).
- **First use of a size**: the pool grows by mapping new physical memory, as
  expensive as a native allocation; with the default unlimited release
  threshold that memory then stays in the pool. Large sizes with many threads
  (each holding its own block) therefore show the pool's growth in the warm-up
  only, and the memory stays reserved - as a caching allocator's does.
- **Memory reported**: cupool's `cuMemGetInfo` counts reserved but unused pool
  memory as free; the peak-memory columns come from NVML (memory actually in
  use on the device), so they include what the pools keep.
- **Logging** (`CUPOOL_LOG`) formats one JSON line per call into a buffer;
  the cost per call is in the alloc table's last column.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default="bench-results")
    ap.add_argument("--summary", action="store_true", help="print the target table as text and exit")
    ap.add_argument("--section", choices=["host", "parity", "capacity"], help="print one section's Markdown and exit")
    args = ap.parse_args()
    results = args.results

    if args.section:
        sys.stdout.write({"host": section_host, "parity": section_parity, "capacity": section_capacity}[args.section](results))
        return 0
    targets, checks, errors = all_targets(results)
    if args.summary:
        B.print_targets(targets)
        bad = [c for c in checks if not c["ok"]]
        print("\nchecks: %d passed, %d failed" % (len(checks) - len(bad), len(bad)))
        for c in bad:
            print("  FAIL " + c["name"])
        for e in errors:
            print("  error " + e)
        met = sum(1 for t in targets if t["met"])
        print("targets: %d met, %d not met, %d not measured"
              % (met, sum(1 for t in targets if t["met"] is False), sum(1 for t in targets if t["met"] is None)))
        return 0

    p = []
    p.append("# cupool benchmarks\n")
    p.append("<!-- Generated by bench/make_report.py from the results of scripts/bench-gpu.sh; "
             "edit the generator, not this file. -->\n")
    p.append("Every number below was measured by `scripts/bench-gpu.sh` on the machine described, each "
             "stage's configurations side by side in one run of the stage (a machine whose commands are "
             "capped in time can run the stages in separate calls, `BENCH_ONLY`, into one results "
             "directory); regenerate with\n\n```\nscripts/bench-gpu.sh bench-results\n"
             "python3 bench/make_report.py bench-results > docs/BENCHMARKS.md\n"
             "mkdir -p docs/img && cp bench-results/img/*.png bench-results/img/*.svg docs/img/\n```\n")
    p.append("A PyTorch log with its report and replay: `docs/examples/README.md`.\n")
    p.append("## Machine\n")
    p.append(section_machine(results))
    p.append("## Targets\n")
    if targets:
        met = sum(1 for t in targets if t["met"])
        p.append("%d of %d targets met.\n" % (met, len(targets)))
        p.append(targets_table(targets) + "\n")
    else:
        p.append("Not measured yet.\n")
    if checks:
        bad = [c for c in checks if not c["ok"]]
        p.append("Correctness checks: %d passed, %d failed%s\n" % (
            len(checks) - len(bad), len(bad), "".join("\n- ✘ " + c["name"] for c in bad)))
    p.append("## Allocation pair: `cuMemAlloc` + `cuMemFree`\n")
    p.append(section_alloc(results))
    p.append("## Pinned host and managed memory\n")
    p.append(section_host(results))
    p.append("## PyTorch\n")
    p.append("A 6-layer `nn.TransformerEncoder` (d_model 512, 8 heads, batch 32 × 128 tokens, AdamW): "
             "*train* on the default stream, *train-stream* on a non-blocking `torch.cuda.Stream`, *infer* "
             "over 60 churning shapes (batch 1–64, sequence 32–256). Each configuration runs in its own "
             "process; time is the median per step (train, 30 steps after 5 warm-up) or per forward (infer, "
             "median of 3 passes after one warm-up pass), with `torch.cuda.synchronize()` around each. Peak "
             "memory is device memory in use (NVML) above the level right after CUDA initialisation, "
             "sampled after every step. *result rel. diff* compares the final loss (train) or the checksum "
             "of the outputs (infer) with the caching allocator's.%s\n" % rounds_sentence(results, "torch"))
    p.append(section_framework(results, "torch", "caching", "the caching allocator", "ms per step or forward"))
    p.append("## CuPy\n")
    p.append("Elementwise chains, reductions and matmuls over a seeded list of 200 square shapes "
             "(256–2048) per pass, median of 5 passes after a warm-up pass; *default* on CuPy's legacy "
             "default stream, *stream* in a non-blocking `cupy.cuda.Stream`.%s\n"
             % rounds_sentence(results, "cupy"))
    p.append(section_framework(results, "cupy", "pool", "CuPy's memory pool", "ms per iteration"))
    p.append("## Memory parity: PyTorch and CuPy workloads against the frameworks' allocators\n")
    p.append(section_parity(results))
    p.append("## Capacity: the largest batch on a card held down to the caching allocator's need\n")
    p.append(section_capacity(results))
    p.append("## CUDA runtime program: `bench/loop.cu`\n")
    p.append("`cudaMalloc`/`cudaFree` of two buffers per stream and iteration around three kernels on two "
             "non-blocking streams, results verified on the device; built with `nvcc -O2 -cudart static` "
             "and `-cudart shared`. *noalloc* runs the same kernels on buffers allocated before the loop. "
             "The *proof* runs show that cupool's statistics count every `cudaMalloc` of both binaries as "
             "a `cuMemAlloc_v2`.\n")
    p.append(section_loop(results))
    p.append("## Graph memset nodes\n")
    p.append(section_memset(results))
    p.append("## Where cupool loses and why\n")
    found = losses(results)
    if found:
        p.append("From this run's data:\n")
        p.append("\n".join(found) + "\n")
    elif targets:
        p.append("In this run's data cupool met every target and was nowhere slower than its reference.\n")
    else:
        p.append("No data yet.\n")
    p.append(PROSE)
    sys.stdout.write("\n".join(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
