#!/bin/bash
# The eighth session's probes (run8-probes.txt): OUT=DIR bash docs/examples/run8-probes.sh on a GPU machine
# (after autoreconf -fi; uthash under .vendor/uthash).
set -u
cd "$(dirname "$0")/../.."  # the repository root; results go to $OUT
: "${OUT:?set OUT to a directory for the results}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer:$PATH
R=$PWD B=$PWD/build-gpu
SAN="compute-sanitizer --tool memcheck --track-stream-ordered-races all --report-api-errors no --target-processes all"
mkdir -p $B && (cd $B && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda >/dev/null &&
    make -j16 >/dev/null 2>&1 && make -j16 tests/memset/test_memset_api >/dev/null 2>&1) || { echo build failed; exit 1; }
nvcc -O2 -arch=native -o $OUT/gp docs/examples/sanitizer-graph-probe.cu || exit 1
gcc -O2 -I/usr/local/cuda/include -o $OUT/mp docs/examples/sanitizer-module-probe.c -L/usr/local/nvidia/lib64 -lcuda || exit 1
for own in 1 0; do for size in 1048576 1073741824; do for graph in 1 0; do for first in 0 1; do
    $SAN --log-file $OUT/mp.log $OUT/mp $own $size $graph $first
    grep -h 'ERROR SUMMARY' $OUT/mp.log
done; done; done; done
for v in 2 7 8 9 10 11 12 13; do
    $SAN --log-file $OUT/gp$v.log $OUT/gp $v >$OUT/gp$v.out 2>&1
    echo "variant $v rc $? $(grep -h 'ERROR SUMMARY' $OUT/gp$v.log)"
done
# test_memset_api variants: each edits the test, rebuilds it, runs it under the sanitizer, restores it.
cp tests/memset/test_memset_api.c $OUT/orig.c
variant() { # name sed-expression [NAME=VALUE...]
    name=$1 edit=$2
    shift 2
    cp $OUT/orig.c tests/memset/test_memset_api.c && sed -i "$edit" tests/memset/test_memset_api.c
    make -C $B tests/memset/test_memset_api >/dev/null 2>&1 || echo "rebuild $name failed"
    env "$@" CUPOOL_BUILDDIR=$B CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=auto $SAN --log-file $OUT/$name.log \
        tests/run-test.sh $B/tests/memset/test_memset_api >$OUT/$name.out 2>&1
    echo "$name rc $? $(grep -h 'ERROR SUMMARY' $OUT/$name.log)"
}
unchanged='s|^$||'
variant as_committed "$unchanged"
variant policy_default "$unchanged" CUPOOL_POLICY=default
variant policy_split "$unchanged" CUPOOL_POLICY=split
variant sync_after_alloc 's|    CHECK_CU(cuMemAlloc(&buf, BUF_SIZE));|&\n    CHECK_CU(cuCtxSynchronize()); { CUdeviceptr t; CHECK_CU(cuMemAlloc(\&t, 4096)); CHECK_CU(cuMemFree(t)); }|'
variant m2_via_memset_node 's|CHECK_CU(add_node_v1(&m2, g, NULL, 0, &np2));|CHECK_CU(cuGraphAddMemsetNode(\&m2, g, NULL, 0, \&p2, ctx));|'
variant sync_after_reset '0,/^    reset();$/s//    reset();\n    CHECK_CU(cuCtxSynchronize());/'
cp $OUT/orig.c tests/memset/test_memset_api.c
make -C $B tests/memset/test_memset_api >/dev/null 2>&1
# PyTorch train, 6 interleaved rounds
python3 bench/torch_bench.py --cupool $B/scripts/cupool --library $B/.libs/libcupool.so --out $OUT/torch \
    --configs caching,cudaMallocAsync,nocache-cupool,nocache-cupool-ordered --workloads train --rounds 6
# Not yet run on the GPU (written at the session's end, checked on the simulator only):
# test_memset_api's first graph without cupool, variants 1-5 (see the file's header).
gcc -O2 -I/usr/local/cuda/include -o $OUT/agp docs/examples/sanitizer-api-graph-probe.c -L/usr/local/nvidia/lib64 -lcuda || exit 1
for v in 1 2 3 4 5; do
    $SAN --log-file $OUT/agp$v.log $OUT/agp $v
    grep -h 'ERROR SUMMARY' $OUT/agp$v.log
done
