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
