#!/bin/bash
set -u
cd "$(dirname "$0")/.."
U=$PWD/.vendor/uthash; B=$PWD/build-gpu
[ -f $B/Makefile ] || (mkdir -p $B && cd $B && ../configure -q --with-uthash=$U --with-cuda=/usr/local/cuda) >/dev/null 2>&1
make -C $B -j16 >/dev/null 2>&1 || { echo build failed; exit 1; }
export CUPOOL_LIBRARY=$B/.libs/libcupool.so
for r in 1 2; do
for s in 16777216 268435456; do
  $B/scripts/cupool -- $B/bench/alloc_bench -m api -l off -o $OUT/off.$s.$r.csv -s $s -t 1 -T 0.1 -r 3 -c 17G >/dev/null 2>&1; tail -1 $OUT/off.$s.$r.csv
  $B/scripts/cupool --log /dev/shm/f.$s.$r.jsonl -- $B/bench/alloc_bench -m api -l log -o $OUT/log.$s.$r.csv -s $s -t 1 -T 0.1 -r 3 -c 17G >/dev/null 2>&1; tail -1 $OUT/log.$s.$r.csv
done
$B/scripts/cupool --log /dev/shm/seq.$r.jsonl -- $B/bench/alloc_bench -m api -l logseq -o $OUT/seq.$r.csv -s 256,4K,64K,1M,16M,256M,1G -t 1 -T 0.1 -r 3 -c 17G >/dev/null 2>&1; cat $OUT/seq.$r.csv | cut -d, -f4,8
done
for f in /dev/shm/f.268435456.1.jsonl /dev/shm/seq.1.jsonl; do python3 - $f <<'PY'
import json,sys,collections
d=collections.defaultdict(list); res=collections.defaultdict(set)
for l in open(sys.argv[1]):
    o=json.loads(l)
    if o['call'] in ('cuMemAlloc_v2','cuMemFree_v2'): d[(o['call'],o['size'])].append(o['dur_ns']); res[o['size']].add(o['reserved'])
for k,v in sorted(d.items()):
    v.sort(); n=len(v); print(sys.argv[1].split('/')[-1], k, n, 'p50',v[n//2],'p90',v[int(n*.9)],'mean',sum(v)//n, 'distinct reserved', len(res[k[1]]))
PY
done
