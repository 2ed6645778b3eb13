# Sourced by the session scripts (run9.sh, run10.sh) on the GPU machine, from the repository root:
# the CUDA paths, the sanitizer command line the sessions use, and $OUT/r for the results.
set -u
: "${OUT:?set OUT to a directory for the results}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer:$PATH
R=$PWD
SAN="compute-sanitizer --tool memcheck --track-stream-ordered-races all --report-api-errors no --target-processes all"
mkdir -p $OUT/r

# make check on the real driver of some tests (their names, without tests/).
real_check() { # SECONDS JOBS NAME...
    local seconds=$1 jobs=$2; shift 2
    ( cd build-gpu && timeout $seconds make -j$jobs -k check CUPOOL_TEST_DRIVER=real \
        TESTS="$(printf 'tests/%s ' "$@")" ) >$OUT/r/check.txt 2>&1
    echo "check rc $?: $(grep -E '^(PASS|FAIL|SKIP):' $OUT/r/check.txt | tr '\n' ' ')"
}

# Those tests under compute-sanitizer in every free mode (scripts/gpu-tests.sh).
sanitize() { # BUDGET JOBS NAME...
    local budget=$1 jobs=$2; shift 2
    GPU_TESTS_SKIP_CHECK=1 SANITIZE_ONLY="$*" UTHASH_DIR=$R/.vendor/uthash TESTS_BUDGET=$budget \
        SANITIZER_JOBS=$jobs sh scripts/gpu-tests.sh $OUT/r/tests >$OUT/r/gpu-tests.txt 2>&1
    echo "gpu-tests rc $?"; grep -E "^sanitizer:" $OUT/r/gpu-tests.txt
}

# A build of the tree it is in, in DIR, with the test programs (their tests not run).
build() { # DIR [CPPFLAGS]
    ( mkdir -p $1 && cd $1 && ../configure -q --with-uthash=$R/.vendor/uthash --with-cuda=/usr/local/cuda \
        CPPFLAGS="${2:-}" >/dev/null && make -j8 >/dev/null 2>&1 && make -j8 check TESTS= >/dev/null 2>&1 ) ||
        echo "build $1 failed"
}

# This tree built in build-gpu, and the library carried in .old (an earlier commit's source) in .old/build-gpu.
build_old_and_new() {
    build build-gpu
    ( cd .old && build build-gpu )
    ls .old/build-gpu/.libs/libcupool.so build-gpu/.libs/libcupool.so
}

# ROUNDS interleaved rounds of one PyTorch process per workload and label (torch_once's labels).
torch_rounds() { # ROUNDS "WORKLOAD..." LABEL...
    local rounds=$1 workloads=$2; shift 2
    for round in $(seq $rounds); do
        for wl in $workloads; do
            for label in "$@"; do torch_once $wl $label; done
        done
    done
}

# One PyTorch process, one line: workload label ms peak (label old-* runs .old's library, a label
# with a build-LABEL directory that build's; TORCH_SPREAD=1 adds the run's fastest and slowest step
# after ms).
torch_once() { # WORKLOAD LABEL [ENV...]
    local wl=$1 label=$2 lib=build-gpu fields=ms_median; shift 2
    [ ${label%%-*} = old ] && lib=.old/build-gpu
    [ -d build-$label ] && lib=build-$label
    [ -n "${TORCH_SPREAD:-}" ] && fields="ms_median ms_min ms_max"
    if [ $label = caching ]; then
        timeout 60 python3 bench/torch_bench.py --worker caching --workload $wl
    else
        env "$@" PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $lib/scripts/cupool --library $lib/.libs/libcupool.so \
            -- python3 bench/torch_bench.py --worker nocache-cupool --workload $wl
    fi 2>>$OUT/r/torch.err | tail -1 |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$wl', '$label', *('%.3f' % r[k] for k in '$fields'.split()), r['peak_mib'])"
}

# The pair against its bare calls, one process per library and mode, into $OUT/r/pair.csv.
pair() { # SIZES THREADS ROUNDS LIBDIR...
    local sizes=$1 threads=$2 rounds=$3; shift 3
    for round in $(seq $rounds); do
        for free in ordered auto sync; do
            for lib in "$@"; do
                local bare=bare-ordered tag=new; [ $free = sync ] && bare=bare-sync; [ $lib = build-gpu ] || tag=old
                timeout 60 $lib/scripts/cupool --library $lib/.libs/libcupool.so --free $free -- \
                    build-gpu/bench/alloc_bench -m api -p $bare -s $sizes -t $threads -r 5 -T 0.25 \
                    -l $tag-$free-$round -o $OUT/r/pair.csv >/dev/null 2>>$OUT/r/pair.err
            done
        done
    done
    pair_report $OUT/r/pair.csv
}

# One line per label, size and thread count of alloc_bench -p's CSV: cupool's pair against the bare calls it timed.
pair_report() { # CSV
    python3 - $1 <<'PY'
import csv, sys
rows = {(r["label"], r["size"], r["threads"]): float(r["us_median"]) for r in csv.DictReader(open(sys.argv[1]))}
for (label, size, threads), us in sorted(rows.items()):
    if ":" in label: continue
    bare = next(v for (l, s, t), v in rows.items() if l.startswith(label + ":") and (s, t) == (size, threads))
    print("%-17s %11s x%-3s cupool %.3f bare %.3f us a pair: %.3fx" % (label, size, threads, us, bare, us / bare))
PY
}
