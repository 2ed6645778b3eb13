"""run15.sh a: per build, free mode and size, cupool's pair over the bare
pair it timed itself in the same process (alloc_bench -p), each round,
and the median over the rounds.  Usage: run15-ab.py ab-1.csv ab-2.csv ..."""
import csv, statistics, sys
ratios = {}
for path in sorted(sys.argv[1:]):
    rows = {}
    for r in csv.DictReader(open(path)):
        if r["status"] == "ok": rows[(r["label"], r["size"])] = float(r["us_median"])
    for (label, size), us in rows.items():
        if ":" in label: continue
        bare = next((v for (l, s), v in rows.items() if l.startswith(label + ":") and s == size), None)
        if bare: ratios.setdefault((label, int(size)), []).append((us, bare))
print("%-14s %11s  %-58s %s" % ("build-mode", "bytes", "cupool/bare us (ratio), one process a round", "median"))
for (label, size), pairs in sorted(ratios.items(), key=lambda kv: (kv[0][0].split("-")[-1], kv[0][1], kv[0][0])):
    cells = " ".join("%.2f/%.2f(%.2f)" % (c, b, c / b) for c, b in pairs)
    print("%-14s %11d  %-58s %.3f" % (label, size, cells, statistics.median(c / b for c, b in pairs)))
