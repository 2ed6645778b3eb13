#!/bin/bash
# Where cupool's share of an ordered pair goes: probe builds with pieces taken out (not cupool). OUT=DIR bash docs/examples/run7-variants.sh on a GPU machine (after autoreconf -fi).
set -u
cd "$(dirname "$0")/../.."  # the repository root; results go to $OUT
: "${OUT:?set OUT to a directory for the results}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
U=$PWD/.vendor/uthash
for v in base nostats noenter noorigin all; do
  T=/tmp/v_$v; rm -rf $T; mkdir -p $T; tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -C $T -xf -
  [ $v = base ] || python3 docs/examples/run7-variants.py $T $v || { echo "edit $v failed"; continue; }
  (cd $T && mkdir b && cd b && ../configure -q --with-uthash=$U --with-cuda=/usr/local/cuda >/dev/null && make -j16 libcupool.la bench/alloc_bench >/dev/null 2>&1) || echo "build $v failed" &
done
wait
for r in 1 2; do
for v in base nostats noenter noorigin all; do
  T=/tmp/v_$v/b
  CUPOOL_FREE=ordered LD_PRELOAD=$T/.libs/libcupool.so timeout 60 $T/bench/alloc_bench -m api -p bare-ordered -s 256,1M -t 1 -r 7 -T 0.4 -o $OUT/$v.$r.csv > /dev/null 2>&1
  python3 - $OUT/$v.$r.csv $v $r <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = []
for size in ("256", "1048576"):
    a = [float(x["us_median"]) for x in rows if x["size"] == size and x["label"] == "api"]
    b = [float(x["us_median"]) for x in rows if x["size"] == size and x["label"] == "api:bare-ordered"]
    if a and b: out.append(f"{size:>8}: cupool {a[0]:.3f} bare {b[0]:.3f} ratio {a[0]/b[0]:.3f} (+{a[0]-b[0]:.3f} us)")
print(f"round {sys.argv[3]} {sys.argv[2]:9s} " + " | ".join(out))
PY
done; done
