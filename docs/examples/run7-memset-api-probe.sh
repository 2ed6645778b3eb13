#!/bin/bash
# test_memset_api under compute-sanitizer in four settings (run7-probes.txt); OUT=DIR bash docs/examples/run7-memset-api-probe.sh on a GPU machine (after autoreconf -fi).
set -u
cd "$(dirname "$0")/../.."  # the repository root; results go to $OUT
: "${OUT:?set OUT to a directory for the results}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer:$PATH
B=$PWD/build-gpu; mkdir -p $B && cd $B && ../configure -q --with-uthash=$PWD/../.vendor/uthash --with-cuda=/usr/local/cuda >/dev/null && make -j16 >/dev/null 2>&1 && make -j16 tests/memset/test_memset_api >/dev/null 2>&1 || { echo build failed; exit 1; }
cd ..
cp tests/memset/test_memset_api.c /tmp/orig.c
run() { # name env...
  name=$1; shift
  env "$@" CUPOOL_BUILDDIR=$B CUPOOL_TEST_DRIVER=real compute-sanitizer --tool memcheck --track-stream-ordered-races all --report-api-errors no --log-file $OUT/$name.log tests/run-test.sh $B/tests/memset/test_memset_api > $OUT/$name.out 2>&1
  echo "$name rc $? $(grep -h 'ERROR SUMMARY' $OUT/$name.log) $(grep -m3 -h 'Host Frame: .*test_memset_api.c' $OUT/$name.log | sort -u | tr -s ' ' | head -3 | tr '\n' ';')"
}
run asis
run policy_off CUPOOL_POLICY=off
run memset_native CUPOOL_MEMSET=native
# the test's stream used before the allocation, and the context synchronized after it
sed -i 's|    CHECK_CU(cuMemAlloc(&buf, BUF_SIZE));|    CHECK_CU(cuStreamSynchronize(stream));\n    CHECK_CU(cuMemAlloc(\&buf, BUF_SIZE));\n    CHECK_CU(cuCtxSynchronize());|' tests/memset/test_memset_api.c
grep -n -A3 "cuStreamCreate(&stream" tests/memset/test_memset_api.c
make -C $B tests/memset/test_memset_api >/dev/null 2>&1 || echo rebuild failed
run patched_sync
cp /tmp/orig.c tests/memset/test_memset_api.c
