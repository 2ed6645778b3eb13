#!/bin/bash
# The ninth session's GPU calls (run9-*.txt), one subcommand each:
#   OUT=DIR bash docs/examples/run9.sh a|b|c|d|e
# from the repository root on a GPU machine, after autoreconf -fi, with uthash under .vendor/uthash.
# The older libraries compared come from trees made beside it with `git archive COMMIT | tar -x -C
# .probe/NAME`: .probe/old = 1507273 (the session's start), .probe/mid = 68be8e0 (for call e, when
# HEAD was 4f5a11b).  Their configure and Makefile.in are the current ones (configure.ac and
# Makefile.am did not change).  Consolidated from the scripts the session ran (.probe/run9[a-e].sh), same commands.
#   a  sanitizer-api-graph-probe variants 1-5; test_memset_api with a call log
#   b  probe variants 6-7; test_fork/test_log under sync with pool reuse attributes off; test_pools;
#      the allocation pair, old against HEAD, 5 rounds
#   c  scripts/gpu-tests.sh; the allocation pair, old against HEAD, 3 rounds
#   d  the pair against the floor and noctx probe builds; PyTorch train old against HEAD; alloc_bench.py
#   e  the pair, .probe/mid against HEAD; alloc_bench.py; gpu-tests.sh (sanitizer subset); PyTorch train
. "$(dirname "$0")/gpu-session.sh"

build() { # SOURCE BUILDDIR [CFLAGS]
    ( mkdir -p $2 && cd $2 && $1/configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        CFLAGS="-g -O2 ${3:-}" >/dev/null && make -j8 >/dev/null 2>&1 && echo "built $2" ) || echo "build $2 failed"
}
tree() { # NAME: .probe/NAME gets the generated build files of this tree
    for f in configure Makefile.in aclocal.m4 config.h.in; do cp $f .probe/$1/; done
    cp -r build-aux m4 .probe/$1/
}
probe() { # VARIANT...: sanitizer-api-graph-probe
    gcc -O2 -I/usr/local/cuda/include -o $OUT/agp docs/examples/sanitizer-api-graph-probe.c -L/usr/local/nvidia/lib64 -lcuda || exit 1
    for v in "$@"; do
        $SAN --log-file $OUT/r/agp$v.log $OUT/agp $v >$OUT/r/agp$v.out 2>&1
        echo "agp variant $v: $(tr '\n' ' ' <$OUT/r/agp$v.out) $(grep -h 'ERROR SUMMARY' $OUT/r/agp$v.log)"
    done
}
pairs() { # ROUNDS SIZES THREADS REPS MODES LABEL=BUILDDIR...
    rounds=$1 sizes=$2 threads=$3 reps=$4 modes=$5
    shift 5
    for k in $(seq $rounds); do
        for lib in "$@"; do
            for m in $modes; do
                bare=bare-ordered
                [ $m = deferred ] && bare=bare-deferred
                LD_PRELOAD=${lib#*=}/.libs/libcupool.so CUPOOL_FREE=$m $R/build-gpu/bench/alloc_bench -m api -p $bare \
                    -s $sizes -t $threads -r $reps -T 0.4 -l ${lib%%=*}-$m -o $OUT/r/pair.${lib%%=*}.$m.t$threads.$k.csv 2>/dev/null
            done
        done
    done
    echo "pairs done $(date +%T)"
}
alloc_table() {
    timeout 150 python3 bench/alloc_bench.py --bin build-gpu/bench/alloc_bench --cupool build-gpu/scripts/cupool \
        --library build-gpu/.libs/libcupool.so --out $OUT/r/bench >$OUT/r/alloc_table.txt 2>&1
    echo "alloc table rc $?"
}
torch() { # LIBRARY OUTDIR CONFIGS ROUNDS
    timeout 120 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library $1 --out $2 --configs $3 \
        --workloads train --rounds $4 >$2.txt 2>&1
}

case ${1:-} in
a)
    build $R build-gpu && make -C build-gpu -j16 tests/memset/test_memset_api >/dev/null 2>&1
    probe 1 2 3 4 5
    CUPOOL_LOG=$OUT/r/api.jsonl CUPOOL_BUILDDIR=$R/build-gpu CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=auto \
        $SAN --log-file $OUT/r/api.log tests/run-test.sh build-gpu/tests/memset/test_memset_api >$OUT/r/api.out 2>&1
    echo "test_memset_api rc $? $(grep -h 'ERROR SUMMARY' $OUT/r/api.log)"
    ;;
b)
    tree old
    # probe tree: HEAD with two pool reuse attributes turned off by environment variables
    rm -rf /tmp/probe && mkdir /tmp/probe && tar -c --exclude=./build-gpu --exclude=./.probe . | tar -x -C /tmp/probe
    python3 - <<'PY'
p = '/tmp/probe/src/context.c'
s = open(p).read()
old = "    for (int i = 0; i < dev->npools; i++) set_threshold(dev->pools[i]);"
new = old + """
    for (int i = 0; i < dev->npools; i++) {
        int zero = 0;
        if (getenv("PROBE_NOINTDEP")) real_cuMemPoolSetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &zero);
        if (getenv("PROBE_NOOPP")) real_cuMemPoolSetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &zero);
    }"""
open(p, 'w').write(s.replace(old, new))
PY
    build $R build-gpu & build $R/.probe/old /tmp/bold & build /tmp/probe /tmp/bprobe & wait
    make -C build-gpu -j16 check TESTS= >/dev/null 2>&1; make -C /tmp/bprobe -j16 check TESTS= >/dev/null 2>&1
    probe 6 7
    for t in test_fork log/test_log; do
        for k in 1 2; do
            for v in base:build-gpu:X nointdep:/tmp/bprobe:PROBE_NOINTDEP noopp:/tmp/bprobe:PROBE_NOOPP; do
                IFS=: read -r name dir var <<<"$v"
                n=$(basename $t).$name.$k
                ( env $var=1 CUPOOL_BUILDDIR=$dir CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=sync CUPOOL_FREE=sync \
                    $SAN --log-file $OUT/r/$n.log tests/run-test.sh $dir/tests/$t >$OUT/r/$n.out 2>&1
                  echo "$n rc $? $(grep -h 'ERROR SUMMARY' $OUT/r/$n.log)" ) &
            done
        done
    done
    wait
    CUPOOL_BUILDDIR=$R/build-gpu CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=auto $SAN --log-file $OUT/r/pools.log \
        tests/run-test.sh build-gpu/tests/test_pools >$OUT/r/pools.out 2>&1
    echo "test_pools rc $?"
    pairs 5 256,64K,1M,16M 1 9 "ordered auto deferred" old=/tmp/bold new=$R/build-gpu
    pairs 5 1M 4 5 "ordered auto deferred" old=/tmp/bold new=$R/build-gpu
    ;;
c)
    tree old
    build $R/.probe/old /tmp/bold &
    UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=330 SANITIZER_JOBS=8 sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    wait
    pairs 3 256,64K,1M,16M 1 9 "ordered auto deferred" old=/tmp/bold new=$R/build-gpu
    ;;
d)
    tree old
    # floor: cuMemAlloc_v2/cuMemFree_v2 straight to the pool calls after the first allocation;
    # noctx: cuCtxGetCurrent answered from a thread-local copy.  Probe builds, wrong in general.
    rm -rf /tmp/probe && mkdir /tmp/probe && tar -c --exclude=./build-gpu --exclude=./.probe . | tar -x -C /tmp/probe
    python3 - <<'PY'
p = '/tmp/probe/src/memory.c'
s = open(p).read()
s = s.replace('#include "context.h"\n', '#include "context.h"\n#ifdef PROBE_FLOOR\nstatic CUmemoryPool floor_pool;\n#endif\n', 1)
old = "    cupool_device_used(c->device, (int64_t)size);\n    call->route = CUPOOL_ROUTE_POOL;"
s = s.replace(old, "#ifdef PROBE_FLOOR\n    floor_pool = pool;\n#endif\n" + old)
old = "    CUPOOL_SHIM_BEGIN(call, cuMemAlloc_v2);"
s = s.replace(old, "#ifdef PROBE_FLOOR\n    if (floor_pool) return real_cuMemAllocFromPoolAsync(dptr, bytesize, floor_pool, CU_STREAM_LEGACY);\n#endif\n" + old)
old = "    CUPOOL_SHIM_BEGIN(call, cuMemFree_v2);"
s = s.replace(old, "#ifdef PROBE_FLOOR\n    if (floor_pool) return real_cuMemFreeAsync(dptr, CU_STREAM_LEGACY);\n#endif\n" + old)
open(p, 'w').write(s)
p = '/tmp/probe/src/context.c'
s = open(p).read()
old = "static pthread_mutex_t registry_lock"
s = s.replace(old, """#ifdef PROBE_NOCTX
static CUPOOL_THREAD_LOCAL CUcontext probe_ctx;
#define real_cuCtxGetCurrent(p) (probe_ctx ? (*(p) = probe_ctx, CUDA_SUCCESS) : (real_cuCtxGetCurrent(p) == CUDA_SUCCESS ? (probe_ctx = *(p), CUDA_SUCCESS) : CUDA_ERROR_INVALID_CONTEXT))
#endif
""" + old, 1)
open(p, 'w').write(s)
PY
    build $R build-gpu & build $R/.probe/old /tmp/bold & build /tmp/probe /tmp/bfloor -DPROBE_FLOOR &
    build /tmp/probe /tmp/bnoctx -DPROBE_NOCTX & wait
    make -C build-gpu -j16 check TESTS= >/dev/null 2>&1
    CUPOOL_BUILDDIR=$R/build-gpu CUPOOL_TEST_DRIVER=real CUPOOL_TEST_MODES=auto $SAN --log-file $OUT/r/pools.log \
        tests/run-test.sh build-gpu/tests/test_pools >$OUT/r/pools.out 2>&1
    echo "test_pools rc $? $(grep -h 'ERROR SUMMARY' $OUT/r/pools.log)"
    pairs 4 256,1M 1 9 ordered new=$R/build-gpu floor=/tmp/bfloor noctx=/tmp/bnoctx old=/tmp/bold
    for k in 1 2 3 4; do
        torch $R/build-gpu/.libs/libcupool.so $OUT/r/torch.new.$k caching,nocache-cupool 1
        torch /tmp/bold/.libs/libcupool.so $OUT/r/torch.old.$k nocache-cupool 1
    done
    alloc_table
    ;;
e)
    tree mid
    build $R build-gpu & build $R/.probe/mid /tmp/bmid & wait
    pairs 5 256,64K,1M,16M 1 9 "ordered auto" mid=/tmp/bmid new=$R/build-gpu
    alloc_table
    UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=200 SANITIZER_JOBS=8 \
        SANITIZE_ONLY="test_smoke test_stress test_modes test_kernel_race test_bad_input" \
        sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"
    torch $R/build-gpu/.libs/libcupool.so $OUT/r/torch caching,nocache-cupool 2
    ;;
*) echo "usage: OUT=DIR bash docs/examples/run9.sh a|b|c|d|e" >&2; exit 2 ;;
esac
# Few files come back from the GPU machine: one archive.
(cd $OUT/r && tar czf ../r.tgz --exclude='*.so*' --exclude=logs .)
