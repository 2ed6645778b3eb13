#!/bin/bash
# The fourteenth session's GPU calls, run on the GPU machine from the repository root:
#   OUT=DIR bash docs/examples/run14.sh a|b|c|d|e|f|g|h
# a: threads-pair-probe.c (what cupool's pieces, work outside the driver, a
#    lock of the program's own in front of the driver's, and a pool per
#    thread do to the bare ordered pair at 1-16 threads); alloc_bench of
#    cupool ordered and auto against its bare calls at 1 MiB and 1 GiB,
#    1/4/16 threads, 3 rounds, built plainly and with
#    -DCUPOOL_EXPERIMENT_QUEUE (ran at 54c3316 with a patch, since removed,
#    that put a spin lock around the fast path's pool calls under it); make check on the real driver of test_ready, test_capture and
#    test_modes, and test_ready and test_capture under compute-sanitizer
#    (the library's changes after 3750852, never run on a GPU)
# b: the driver queue (src/queue.c): alloc_bench of cupool ordered and auto
#    with CUPOOL_DRIVER_QUEUE=on and off against the bare calls, 256 B,
#    1 MiB and 1 GiB, 1-16 threads, 3 rounds; make check on the real driver
#    of test_queue and the tests of threads and modes; test_queue,
#    test_stress and test_modes under compute-sanitizer with the queue on;
#    PyTorch train and train-stream, 3 rounds, caching against cupool
# c: PyTorch train-stream, 3 rounds: the caching allocator, this build with
#    the queue on and off, and the builds of 54c3316 (this session's start),
#    3750852 (the thirteenth's full run: 1.247x, peak 1.198x) and 8f97f43
#    (its call c: 1.003x), from tar files of theirs in .vendor (autoreconf
#    run here: the GPU machine has no libtoolize); CUPOOL_STATS
#    of this build and 8f97f43 (its first run, with d in it, found no
#    earlier build: their autoreconf failed on the GPU machine)
# d: alloc_bench of the queue from the second thread on, 1 and 16 threads
# e: the final library: make check on the real driver of test_queue and
#    the tests of threads, modes, readiness, capture, pools and fork;
#    test_queue, test_stress and test_kernel_race under compute-sanitizer
#    with the queue on; bench/alloc_bench.py (every size, 1/4/16 threads, 3
#    rounds); PyTorch train and train-stream, 3 rounds (timed out: 12
#    processes need more than the 120 s it had)
# f: PyTorch train and train-stream, 2 rounds, with the time that was left
# g (prepared, not run: no device time left): the commits after e on the
#    real driver (test_queue's stats case, the waiters' naps) and
#    test_queue and test_stress under compute-sanitizer with the queue on
# h (prepared, not run): the full scripts/bench-gpu.sh, for a
#    docs/BENCHMARKS.md with the queue (copy $OUT/r/bench to docs/results
#    and regenerate with bench/make_report.py)
# Results in $OUT/r and $OUT/r.tgz.
. "$(dirname "$0")/gpu-session.sh"

# cupool in FREE mode against its bare calls, one process per build and round.
pairs() { # FREE BARE
    for round in 1 2 3; do
        for b in build-gpu build-q; do
            CUPOOL_LIBRARY=$b/.libs/libcupool.so timeout 120 $b/scripts/cupool --free $1 -- \
                build-gpu/bench/alloc_bench -m api -p $2 -s 1M,1G -t 1,4,16 -r 3 -T 0.25 \
                -l $b-$1 -o $OUT/r/pairs-$b-$1-$round.csv >/dev/null 2>>$OUT/r/pairs.err
        done
    done
}

# PyTorch train and train-stream, the caching allocator against cupool.
torch() { # ROUNDS SECONDS
    timeout $2 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/bench --workloads train,train-stream --rounds $1 --timeout 40 \
        --configs caching,nocache-cupool >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"; sed -n '/^torch train:/,$p' $OUT/r/torch.txt | head -30
    rm -rf $OUT/r/bench/logs
}

case ${1:-} in
a)
    cc -O2 -I/usr/local/cuda/include -o $OUT/r/tp docs/examples/threads-pair-probe.c -L/usr/local/cuda/lib64/stubs -lcuda -lpthread
    timeout 90 $OUT/r/tp >$OUT/r/threads-pair-probe.txt 2>&1; echo "probe rc $?"; cat $OUT/r/threads-pair-probe.txt
    rm -f $OUT/r/tp
    build build-gpu & build build-q -DCUPOOL_EXPERIMENT_QUEUE & wait
    pairs ordered bare-ordered
    pairs auto bare-ordered
    cat $OUT/r/pairs-*.csv | sort -u | cut -d, -f1-12 | head -80
    real_check 150 3 test_ready test_capture test_modes
    sanitize 120 8 test_ready test_capture
    ;;
b)
    build build-gpu
    # The queue on and off, ordered and auto, against the bare calls: one
    # process per setting and round, rounds interleaved.
    for round in 1 2 3; do
        for free in ordered auto; do
            for q in on off; do
                CUPOOL_DRIVER_QUEUE=$q timeout 150 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --free $free -- \
                    build-gpu/bench/alloc_bench -m api -p bare-ordered -s 256,1M,1G -t 1,2,4,8,16 -r 3 -T 0.2 \
                    -l q$q-$free -o $OUT/r/queue-$q-$free-$round.csv >/dev/null 2>>$OUT/r/queue.err
            done
        done
    done
    echo "alloc done"
    real_check 200 4 test_queue test_stress test_modes test_kernel_race test_ready test_capture test_pools
    cp build-gpu/tests/test_queue.log build-gpu/tests/test_stress.log $OUT/r/ 2>/dev/null
    CUPOOL_DRIVER_QUEUE=on sanitize 200 8 test_queue test_stress test_modes
    timeout 150 python3 bench/torch_bench.py --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so \
        --out $OUT/r/torch --workloads train,train-stream --rounds 3 --timeout 60 \
        --configs caching,nocache-cupool >$OUT/r/torch.txt 2>&1
    echo "torch rc $?"; grep -A4 "^config\|^workload\|ratio" $OUT/r/torch.txt | head -40
    ;;
c)
    build build-gpu &
    for sha in 8f97f43 3750852 54c3316; do
        ( mkdir -p /tmp/old-$sha && tar -xf .vendor/old-$sha.tar -C /tmp/old-$sha && cd /tmp/old-$sha &&
          mkdir -p b && cd b &&
          ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda >/dev/null && make -j4 >/dev/null 2>&1 ) ||
            echo "build $sha failed" &
    done
    wait
    # PyTorch train-stream: the caching allocator, this build (queue on and
    # off) and three earlier ones, 3 rounds interleaved, one process each.
    worker() { # NAME LIBRARY|- [ENV...]
        local name=$1 lib=$2; shift 2
        if [ "$lib" = - ]; then
            env "$@" timeout 60 python3 bench/torch_bench.py --worker caching --workload train-stream
        else
            env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$@" timeout 60 build-gpu/scripts/cupool --library $lib \
                python3 bench/torch_bench.py --worker nocache-cupool --workload train-stream
        fi 2>>$OUT/r/torch.err | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('%-14s %8.3f ms %7.0f MiB' % ('$name', d['ms_median'], d['peak_mib']))"
    }
    for round in 1 2 3; do
        worker caching -
        worker head build-gpu/.libs/libcupool.so
        worker head-qoff build-gpu/.libs/libcupool.so CUPOOL_DRIVER_QUEUE=off
        for sha in 54c3316 3750852 8f97f43; do worker $sha /tmp/old-$sha/b/.libs/libcupool.so; done
    done | tee $OUT/r/torch-builds.txt
    for lib in build-gpu/.libs/libcupool.so /tmp/old-8f97f43/b/.libs/libcupool.so; do
        echo "== stats $lib"
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUPOOL_STATS=1 timeout 60 build-gpu/scripts/cupool --library $lib \
            python3 bench/torch_bench.py --worker nocache-cupool --workload train-stream 2>&1 | grep -vE '^\{|Warning|detach|loss =' | head -30
    done
    ;;
d)
    build build-gpu
    # The queue only from the second thread: one thread must cost what it did.
    for round in 1 2 3; do
        for q in on off; do
            CUPOOL_DRIVER_QUEUE=$q timeout 100 build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --free ordered -- \
                build-gpu/bench/alloc_bench -m api -p bare-ordered -s 256,1M,1G -t 1,16 -r 3 -T 0.2 \
                -l q$q -o $OUT/r/gate-$q-$round.csv >/dev/null 2>>$OUT/r/gate.err
        done
    done
    echo "alloc done"
    ;;
e)
    build build-gpu
    real_check 150 4 test_queue test_stress test_modes test_kernel_race test_ready test_capture test_pools test_fork
    cp build-gpu/tests/test_queue.log $OUT/r/ 2>/dev/null
    CUPOOL_DRIVER_QUEUE=on sanitize 120 12 test_queue test_stress test_kernel_race
    BENCH_DEADLINE=$(($(date +%s) + 200)) timeout 260 python3 bench/alloc_bench.py --bin build-gpu/bench/alloc_bench \
        --cupool build-gpu/scripts/cupool --library build-gpu/.libs/libcupool.so --out $OUT/r/bench --rounds 3 \
        >$OUT/r/alloc.txt 2>&1
    echo "alloc rc $?"; grep -E "target|met" $OUT/r/alloc.txt | head -20
    torch 3 120
    ;;
f)
    build build-gpu
    torch 2 170
    ;;
g)
    build build-gpu
    real_check 150 4 test_queue test_stress test_modes test_ready
    cp build-gpu/tests/test_queue.log $OUT/r/ 2>/dev/null
    CUPOOL_DRIVER_QUEUE=on sanitize 150 12 test_queue test_stress
    ;;
h)
    timeout 590 sh scripts/bench-gpu.sh $OUT/r/bench >$OUT/r/bench.txt 2>&1
    echo "bench rc $?"; grep -E "met|not met" $OUT/r/bench.txt | tail -30
    rm -rf $OUT/r/bench/logs
    ;;
*) echo "usage: OUT=DIR bash $0 a|b|c|d|e|f|g|h" >&2; exit 2 ;;
esac
tar -C $OUT -czf $OUT/r.tgz r
