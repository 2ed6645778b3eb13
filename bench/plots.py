#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws the pictures of a results directory (PNG and SVG in RESULTS/img/):

  alloc.png   time per cuMemAlloc + cuMemFree pair by size, native / bare / cupool
  torch.png   PyTorch time per step (forward for infer) and peak memory per configuration
  cupy.png    CuPy time per iteration and peak memory per configuration
  parity.png  the memory parity suite: time and peak process memory per workload and configuration
  loop.png    loop.cu time per iteration, cudart static and shared

  python3 bench/plots.py bench-results
"""

import json
import os
import sys


def load(results, name):
    path = os.path.join(results, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def save(fig, results, name):
    img = os.path.join(results, "img")
    os.makedirs(img, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(img, "%s.%s" % (name, ext)), dpi=110, bbox_inches="tight")
    print("wrote %s/img/%s.{png,svg}" % (results, name), file=sys.stderr)


def alloc_plot(plt, results):
    d = load(results, "alloc")
    if not d or not d.get("rows"):
        return
    rows = [r for r in d["rows"] if r.get("us") is not None]
    threads = sorted({r["threads"] for r in rows})
    # The bare calls are timed in cupool's processes (alloc_bench -p): rows
    # labelled cupool-MODE:bare-MODE.
    styles = {"native": ("k", "o", "-"), "cupool-ordered:bare-ordered": ("tab:blue", "", "--"),
              "cupool-deferred:bare-deferred": ("tab:orange", "", "--"),
              "cupool-sync:bare-sync": ("tab:green", "", "--"),
              "cupool-ordered": ("tab:blue", "s", "-"), "cupool-deferred": ("tab:orange", "s", "-"),
              "cupool-sync": ("tab:green", "s", "-"), "cupool-auto": ("tab:red", "^", "-"),
              "cupool-auto-log": ("tab:purple", "x", ":")}
    fig, axes = plt.subplots(1, len(threads), figsize=(5.2 * len(threads), 4.2), squeeze=False, sharey=True)
    for ax, t in zip(axes[0], threads):
        for label, (color, marker, ls) in styles.items():
            best = {}  # size -> lowest of the rounds, as the table shows
            for r in rows:
                if r["label"] == label and r["threads"] == t:
                    best[r["size"]] = min(r["us"], best.get(r["size"], r["us"]))
            pts = sorted(best.items())
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker or None,
                        linestyle=ls, label=label.split(":")[-1], linewidth=1.3, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("%d thread%s" % (t, "" if t == 1 else "s"))
        ax.set_xlabel("allocation size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("microseconds per alloc + free pair")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.suptitle("cuMemAlloc + cuMemFree: native driver, bare pool calls, cupool")
    save(fig, results, "alloc")
    plt.close(fig)


def bars(plt, results, name, title, unit_label, ratio_key="time_ratio"):
    d = load(results, name)
    if not d or not d.get("rows"):
        return
    rows = [r for r in d["rows"] if r.get("ok")]
    workloads = []
    for r in rows:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.8 * len(workloads), 7), squeeze=False)
    for i, wl in enumerate(workloads):
        sel = [r for r in rows if r["workload"] == wl]
        names = [r["config"] for r in sel]
        for j, (key, ylabel) in enumerate((("ms_median", unit_label), ("peak_mib", "peak device memory (MiB)"))):
            ax = axes[j][i]
            vals = [r.get(key) or 0 for r in sel]
            colors = ["tab:red" if "cupool" in n else ("tab:gray" if "native" in n else "tab:blue") for n in names]
            ax.bar(range(len(sel)), vals, color=colors)
            ax.set_xticks(range(len(sel)))
            ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
            ax.set_ylabel(ylabel)
            if j == 0:
                ax.set_title(wl)
                for k, r in enumerate(sel):
                    if r.get(ratio_key):
                        ax.text(k, vals[k], "%.2fx" % r[ratio_key], ha="center", va="bottom", fontsize=7)
            ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save(fig, results, name)
    plt.close(fig)


def loop_plot(plt, results):
    d = load(results, "loop")
    if not d or not d.get("rows"):
        return
    rows = d["rows"]
    labels = []
    for r in rows:
        key = r["label"]
        if key not in labels:
            labels.append(key)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for n, kind in enumerate(("static", "shared")):
        vals = []
        for label in labels:
            v = [r["us_median"] for r in rows if r["kind"] == kind and r["label"] == label]
            vals.append(min(v) if v else 0)
        ax.bar([i + (n - 0.5) * width for i in range(len(labels))], vals, width, label="cudart " + kind)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("microseconds per iteration")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("loop.cu: cudaMalloc/cudaFree per iteration on two non-blocking streams")
    save(fig, results, "loop")
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plots.py RESULTS_DIR")
    results = sys.argv[1]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots.py: matplotlib is not installed; no pictures", file=sys.stderr)
        return 0
    for f in (lambda: alloc_plot(plt, results),
              lambda: bars(plt, results, "torch", "PyTorch: caching allocator, cudaMallocAsync, no caching +- cupool",
                           "ms per step / forward"),
              lambda: bars(plt, results, "cupy", "CuPy: memory pools against no pool +- cupool", "ms per iteration"),
              lambda: bars(plt, results, "parity", "Memory parity: framework allocators against no caching +- cupool",
                           "ms per step / call / iteration (median of rounds)", "time_vs_caching"),
              lambda: loop_plot(plt, results)):
        try:
            f()
        except Exception as e:  # noqa: BLE001 - one bad picture must not lose the others
            print("plots.py: %s: %s" % (type(e).__name__, e), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
