#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/gpu-tests.sh [OUTPUT_DIR]: cupool's tests on a real GPU.
#   1. builds cupool out of tree ($CUPOOL_BUILD, default build-gpu/) if needed
#   2. make check CUPOOL_TEST_DRIVER=real (the test programs on the real driver)
#   3. every test program under compute-sanitizer --tool memcheck
#      --track-stream-ordered-races all, once per free mode
#      (CUPOOL_FREE=ordered|deferred|sync|auto), plus bench/loop.cu (two
#      non-blocking streams freeing buffers kernels still use) in the modes
#      that are correct for it (deferred, sync, auto)
#   4. proofs that cupool sees the allocations of a cudart-static and a
#      cudart-shared program, of PyTorch (PYTORCH_NO_CUDA_MEMORY_CACHING=1)
#      and of CuPy (no memory pool): their CUPOOL_STATS counts; and that it
#      serves pinned host and managed memory again to tests/gpu/host_loop.cu
#      (both cudarts, also under the sanitizer in deferred, sync and auto), to
#      PyTorch's pinned tensors and to CuPy's pinned and managed memory
#   5. legacy IPC between processes: a CUDA tensor sent to a child through
#      torch.multiprocessing (tests/gpu/torch_ipc.py) natively and in three
#      free modes, with the caching allocator and without it, and
#      NVIDIA's simpleIPC natively and in every free mode (CUDA_SAMPLES)
# Logs go to OUTPUT_DIR (default gpu-test-results/); a pass/fail table ends it,
# and the exit status is 0 only when nothing failed.
#
# The library is preloaded under compute-sanitizer the way `make check` does
# it: the sanitizer runs tests/run-test.sh, which prepends libcupool.so to
# LD_PRELOAD (keeping anything the sanitizer put there) and execs the test
# program; the sanitizer follows the exec (same process, its injection
# variables inherited).  CUPOOL_STATS=1 in each run proves cupool was there.
#
# Environment: CUPOOL_BUILD, UTHASH_DIR, CUDA_HOME, CUDA_SAMPLES, JOBS, SANITIZER_JOBS
# (parallel sanitizer runs, default 4), TESTS_BUDGET (seconds, default 560),
# CHECK_BUDGET (seconds make check may take, default TESTS_BUDGET - 300: a
# test that hangs fails the check instead of eating the sanitizer's time),
# CHECK_TESTS (space-separated, e.g. "tests/test_modes tests/test_kernel_race":
# make check runs only those),
# GPU_TESTS_DRIVER (real, or sim for a dry run of this script without a GPU),
# SANITIZE_ONLY (space-separated names, e.g. "test_stress loop": only the
# sanitizer runs of programs whose name contains one of them),
# GPU_TESTS_PARTS (space-separated, default "check sanitizer proofs ipc":
# the numbered steps 2 to 5 this run makes; the build always runs and
# builds the test programs, so that "sanitizer" alone, with SANITIZE_ONLY,
# fits a short call).
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
self=$src/scripts/gpu-tests.sh
build=${CUPOOL_BUILD:-$src/build-gpu}
driver=${GPU_TESTS_DRIVER:-real}
cuda=${CUDA_HOME:-/usr/local/cuda}
PATH="$cuda/bin:$cuda/compute-sanitizer:$PATH"
export PATH

# ---- one sanitizer run (the script calls itself through xargs) ----------------------
# gpu-tests.sh --sanitize OUTDIR NAME MODE STATS PROGRAM [ARGS...]
# MODE auto runs with no CUPOOL_* variable at all (as make check does); the
# others set CUPOOL_FREE.  STATS=1 adds CUPOOL_STATS=1 (not for the test
# programs: some check that the environment holds no option).
if [ "${1:-}" = "--sanitize" ]; then
    out=$2 name=$3 mode=$4 stats=$5
    shift 5
    base=$out/sanitizer/$name.$mode
    if [ -n "${TESTS_DEADLINE:-}" ] && [ "$(date +%s)" -ge "$TESTS_DEADLINE" ]; then
        echo "$name $mode SKIP out-of-time" >"$base.result"
        exit 0
    fi
    # Tests that run themselves once per mode (tl_run_modes) run only this
    # run's mode (auto: and the program without cupool), so that each
    # report belongs to one mode.
    # CUPOOL_TEST_TIMEOUT=0: run-test.sh execs the program, which the
    # sanitizer follows in the same process; its own time-out is below.
    vars="CUPOOL_TEST_DRIVER=$driver CUPOOL_TEST_MODES=$mode CUPOOL_TEST_TIMEOUT=0"
    [ "$mode" = auto ] && vars="$vars,native"
    [ "$mode" = auto ] || vars="$vars CUPOOL_FREE=$mode"
    [ "$stats" = 1 ] && vars="$vars CUPOOL_STATS=1"
    # --report-api-errors no: a driver call returning an error is not a
    # memory error; several tests make failing calls on purpose (bad input,
    # IPC on pool memory, a 0-byte memset node) and check the result.
    # Each process the sanitizer follows (tests re-run themselves per mode)
    # writes its own log (%p: its pid); they are joined into one afterwards,
    # and every process's ERROR SUMMARY counts.
    sanitize() {
        timeout -k 10 240 compute-sanitizer --tool memcheck --track-stream-ordered-races all --report-api-errors no \
            --target-processes all --error-exitcode 86 --log-file "$base.sanitizer.%p.log" "$@" >"$base.out" 2>&1
    }
    join_logs() {
        cat "$base".sanitizer.*.log >"$base.sanitizer.log" 2>/dev/null
        rm -f "$base".sanitizer.*.log
    }
    # Form a: the sanitizer runs tests/run-test.sh, which preloads cupool and
    # execs the program.  Form b (if the sanitizer did not follow): the
    # preload is set on the sanitizer itself.
    form=a
    # shellcheck disable=SC2086 # $vars: NAME=VALUE words
    sanitize env -u CUPOOL_FREE -u CUPOOL_STATS -u CUPOOL_TEST_MODES $vars "$src/tests/run-test.sh" "$@"
    rc=$?
    join_logs
    if ! grep -q "ERROR SUMMARY" "$base.sanitizer.log" 2>/dev/null ||
        { [ "$stats" = 1 ] && ! grep -q "cupool: statistics" "$base.out"; }; then
        mv "$base.out" "$base.form-a.out" 2>/dev/null
        mv "$base.sanitizer.log" "$base.form-a.sanitizer.log" 2>/dev/null
        form=b
        # shellcheck disable=SC2086
        env -u CUPOOL_FREE -u CUPOOL_STATS -u CUPOOL_TEST_MODES $vars LD_PRELOAD="$CUPOOL_LIBRARY" sh -c \
            "$(command -v compute-sanitizer) --tool memcheck --track-stream-ordered-races all --target-processes all \
             --report-api-errors no --error-exitcode 86 --log-file '$base.sanitizer.%p.log' \"\$@\" >'$base.out' 2>&1" sh "$@"
        rc=$?
        join_logs
    fi
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$base.sanitizer.log" 2>/dev/null |
        awk '{s += $1; n++} END {if (n) print s}')
    processes=$(grep -c "ERROR SUMMARY" "$base.sanitizer.log" 2>/dev/null)
    pooled=$(sed -n 's/^cupool: *pooled allocations *\([0-9]*\).*/\1/p' "$base.out" | awk '{s += $1} END {print s + 0}')
    if [ "$rc" -eq 77 ]; then
        verdict=SKIP
    elif [ "${errors:-x}" != 0 ]; then
        verdict=FAIL          # memory errors or races found, or the sanitizer did not run
    elif [ "$rc" -eq 0 ]; then
        verdict=PASS
    elif [ "$mode" = auto ]; then
        verdict=FAIL          # the test failed in its normal configuration
    else
        verdict=TESTFAIL      # clean for the sanitizer, but the test's own checks fail with CUPOOL_FREE forced
    fi
    detail="rc=$rc sanitizer-errors=${errors:-none} processes=${processes:-0} form=$form"
    [ "$stats" = 1 ] && detail="$detail pooled-allocs=$pooled"
    echo "$name $mode $verdict $detail" >"$base.result"
    exit 0
fi

parts=${GPU_TESTS_PARTS:-check sanitizer proofs ipc}
for p in $parts; do
    case $p in
    check | sanitizer | proofs | ipc) ;;
    *) echo "gpu-tests.sh: GPU_TESTS_PARTS: '$p' is not one of check, sanitizer, proofs, ipc" >&2; exit 2 ;;
    esac
done
# Is PART among the parts this run makes?
part() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
out=${1:-gpu-test-results}
mkdir -p "$out/check" "$out/sanitizer" "$out/proofs" || exit 1
out=$(cd "$out" && pwd)
uthash=${UTHASH_DIR:-$src/.vendor/uthash}
jobs=${JOBS:-16}
sjobs=${SANITIZER_JOBS:-4}
start=$(date +%s)
budget=${TESTS_BUDGET:-560}
check_budget=${CHECK_BUDGET:-$((budget > 360 ? budget - 300 : 60))}
results=$out/summary.txt
: >"$results"
say() { printf '\n=== %s (%ss)\n' "$*" $(($(date +%s) - start)); }
record() { echo "$*" >>"$results"; } # NAME RESULT DETAIL...

# ---- build ------------------------------------------------------------------------------
say "build in $build"
if [ ! -f "$build/Makefile" ]; then
    if [ ! -x "$src/configure" ]; then
        (cd "$src" && autoreconf -fi) >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
    fi
    mkdir -p "$build"
    (cd "$build" && "$src/configure" --with-uthash="$uthash" --with-cuda="$cuda") >>"$out/build.log" 2>&1 ||
        { tail -20 "$out/build.log"; exit 1; }
fi
if make -C "$build" -j"$jobs" >>"$out/build.log" 2>&1; then
    record "build PASS"
else
    record "build FAIL see build.log"
    tail -30 "$out/build.log"
fi
CUPOOL_LIBRARY=$build/.libs/libcupool.so
CUPOOL_BUILDDIR=$build
CUPOOL_SRCDIR=$src
export CUPOOL_LIBRARY CUPOOL_BUILDDIR CUPOOL_SRCDIR
unset LD_PRELOAD
launcher=$build/scripts/cupool

if [ "$driver" = sim ]; then
    LD_LIBRARY_PATH=$build/tests/sim/.libs
    export LD_LIBRARY_PATH
    realcuda=sim
fi
# Test programs are linked with -no-install against the simulated libcuda
# (tests/sim/.libs): libtool gives them a RUNPATH there.  LD_LIBRARY_PATH
# beats RUNPATH, so point it at the real driver's directory.
[ "$driver" = sim ] || realcuda=$(/sbin/ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$realcuda" ] || realcuda=$( (/sbin/ldconfig -p || ldconfig -p) 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
    [ -n "$realcuda" ] || [ ! -e "$d/libcuda.so.1" ] || realcuda=$d/libcuda.so.1
done
if [ "$driver" = sim ]; then
    :
elif [ -n "$realcuda" ]; then
    LD_LIBRARY_PATH=$(dirname "$realcuda")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    echo "real driver: $realcuda"
else
    echo "warning: ldconfig does not list libcuda.so.1; test programs may load the simulated driver"
fi

# ---- make check on the real driver ---------------------------------------------------------------
# The test programs build in parallel; the tests run one at a time
# (test_oom takes the whole device), within CHECK_BUDGET seconds.
make -C "$build" -j"$jobs" check TESTS= >"$out/check/make-check.log" 2>&1 || record "make-check FAIL building the tests"
if ! part check; then
    say "make check not among GPU_TESTS_PARTS: the test programs are only built"
else
    say "make check CUPOOL_TEST_DRIVER=$driver (up to ${check_budget}s)"
    touch "$out/check/started"
    CUPOOL_TEST_DRIVER=$driver timeout -k 10 "$check_budget" make -C "$build" -j1 check CUPOOL_TEST_DRIVER="$driver" \
        ${CHECK_TESTS:+TESTS="$CHECK_TESTS"} >>"$out/check/make-check.log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        ran=$(find "$build/tests" -name '*.trs' -newer "$out/check/started" 2>/dev/null | wc -l)
        # The test that was running: make, stopped, names the log it was making.
        running=$(sed -n 's/.*: \(tests\/[^]]*\)\.log\] Error 1[0-9]*$/\1/p' "$out/check/make-check.log" | head -1)
        record "make-check FAIL timed out after ${check_budget}s (CHECK_BUDGET), $ran tests done, ${running:-?} running"
    fi
    (cd "$build" && find . -name '*.log' -path '*tests*' ! -path './config.log' -exec cp --parents {} "$out/check/" \;) 2>/dev/null
    cp "$build/test-suite.log" "$out/check/" 2>/dev/null
    sed -n 's/^\(PASS\|FAIL\|SKIP\|XFAIL\|XPASS\|ERROR\): /\1 /p' "$out/check/make-check.log" | while read -r verdict name; do
        record "check:$name $verdict"
    done
    grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):' "$out/check/make-check.log" | tr '\n' ' '
    echo
    case $rc in
    0) record "make-check PASS" ;;
    124 | 137) ;;
    *) record "make-check FAIL exit $rc, see check/make-check.log" ;;
    esac
fi

# Which driver did a test program load?
first=$(find "$build/tests" -maxdepth 1 -type f -perm -u+x -name 'test_*' 2>/dev/null | head -1)
[ -n "$first" ] && ldd "$first" 2>/dev/null | grep libcuda | sed 's/^/driver seen by tests: /'

# ---- bench/loop.cu (for the sanitizer and the proofs) ---------------------------------------
# The CUDA programs this script builds (loop, host_loop, simpleIPC) go here.
bindir=$build/bench-loop
mkdir -p "$bindir"
if part sanitizer || part proofs; then
    # The CUDA runtime programs, each built against the static and the shared
    # cudart: NAME SOURCE.
    cudart_programs="loop $src/bench/loop.cu host_loop $src/tests/gpu/host_loop.cu"
    # shellcheck disable=SC2086 # name and source pairs
    set -- $cudart_programs
    while [ $# -ge 2 ]; do
        prog=$1 source=$2
        shift 2
        for kind in static shared; do
            bin=$bindir/${prog}_$kind
            [ -x "$bin" ] && [ -z "$(find "$source" "$src/bench/cudart_check.h" -newer "$bin" 2>/dev/null)" ] && continue
            nvcc -O2 -arch=native -cudart "$kind" -DCUDART_KIND="\"$kind\"" -o "$bin" "$source" >>"$out/build.log" 2>&1 ||
                nvcc -O2 -cudart "$kind" -DCUDART_KIND="\"$kind\"" -o "$bin" "$source" >>"$out/build.log" 2>&1 ||
                record "nvcc-${prog}_$kind FAIL see build.log"
        done
    done
fi

# ---- compute-sanitizer -----------------------------------------------------------------------------
if part sanitizer; then
    say "compute-sanitizer memcheck --track-stream-ordered-races all ($sjobs at a time)"
    # Time kept for the proofs and the IPC runs, where this run makes them.
    reserve=0
    if part proofs || part ipc; then reserve=180; fi
    TESTS_DEADLINE=$((start + budget - reserve))
    export TESTS_DEADLINE
    # Is program NAME among SANITIZE_ONLY's (all when it is empty)?
    selected() {
        [ -z "${SANITIZE_ONLY:-}" ] && return 0
        for want in $SANITIZE_ONLY; do
            case "$1" in *"$want"*) return 0 ;; esac
        done
        return 1
    }
    list=$out/sanitizer/runs.txt
    : >"$list"
    # Test programs: the ELF executables make check built under tests/ (not the
    # simulator, nor the helpers of tests/helpers/, which test scripts drive).
    # test_oom fills the device, which would starve the runs beside it.  Not
    # under the sanitizer: test_ctor initialises CUDA from a constructor, before
    # the sanitizer can attach (it then disables itself); test_rtld_next and
    # test_origin (the origin table by itself) make no CUDA call;
    # test_deferred_wait_cap, test_sim_races and test_random_programs judge with
    # the simulator's race checker and skip themselves on the real driver before
    # any CUDA call, for which the sanitizer exits 255 ("terminated before first
    # instrumented API call") whatever the program's own exit status.
    for prog in $(find "$build/tests" -type f -perm -u+x ! -path '*/sim/*' ! -path '*/helpers/*' ! -path '*/.libs/*' ! -name '*.sh' \
        ! -name 'test_oom' ! -name 'test_ctor' ! -name 'test_rtld_next' ! -name 'test_origin' ! -name 'test_deferred_wait_cap' \
        ! -name 'test_sim_races' ! -name 'test_random_programs' 2>/dev/null | sort); do
        head -c 4 "$prog" | grep -q 'ELF' || continue
        name=$(echo "${prog#"$build"/}" | tr '/' '_')
        selected "$name" || continue
        for mode in ordered deferred sync auto; do
            echo "$name $mode 0 $prog" >>"$list"
        done
    done
    # Not `ordered`: both use device buffers on non-blocking streams, which
    # that mode does not keep correct.
    for run in "loop --iters 10 --reps 1 --elems 65536" "host_loop --iters 40 --elems 65536"; do
        prog=${run%% *} args=${run#* }
        for kind in static shared; do
            [ -x "$bindir/${prog}_$kind" ] && selected "${prog}_$kind" || continue
            for mode in deferred sync auto; do
                echo "${prog}_$kind $mode 1 $bindir/${prog}_$kind $args" >>"$list"
            done
        done
    done
    echo "$(wc -l <"$list") sanitizer runs"
    OUT=$out
    export OUT
    # shellcheck disable=SC2016
    xargs -P "$sjobs" -L 1 sh -c 'n=$1 m=$2 s=$3; shift 3; exec "$0" --sanitize "$OUT" "$n" "$m" "$s" "$@"' "$self" <"$list"
    for f in "$out"/sanitizer/*.result; do
        [ -f "$f" ] || continue
        # shellcheck disable=SC2046 # the fields of the result line
        set -- $(cat "$f")
        n=$1 m=$2 v=$3
        shift 3
        record "sanitizer:$n:$m $v $*"
    done
fi

# ---- proofs: cupool sees cudart static/shared, PyTorch, CuPy allocations ----------------------------
if part proofs; then
    say "proofs (CUPOOL_STATS=1)"
    unset TESTS_DEADLINE
    for kind in static shared; do
        [ -x "$bindir/loop_$kind" ] || { record "proof:cudart-$kind FAIL not built"; continue; }
        timeout -k 5 120 "$launcher" --stats -- "$bindir/loop_$kind" --iters 50 --reps 1 >"$out/proofs/cudart-$kind.out" 2>&1
        rc=$?
        calls=$(sed -n 's/.*"cudaMalloc_calls": \([0-9]*\).*/\1/p' "$out/proofs/cudart-$kind.out")
        seen=$(sed -n 's/^cupool: *cuMemAlloc_v2 *\([0-9]*\) *$/\1/p' "$out/proofs/cudart-$kind.out" | head -1)
        line=$(grep -m1 'cupool: *cuMemAlloc_v2 ' "$out/proofs/cudart-$kind.out")
        if [ "$rc" -eq 0 ] && [ -n "$seen" ] && [ -n "$calls" ] && [ "$seen" -ge "$calls" ]; then
            record "proof:cudart-$kind PASS $calls cudaMalloc, stats line: $line"
        else
            record "proof:cudart-$kind FAIL rc=$rc cudaMalloc=${calls:-?} cuMemAlloc_v2=${seen:-none}"
        fi
    done

    # Pinned host and managed memory in a --stats output FILE: the allocations
    # of each kind and how many a kept block served ("served by kept blocks"),
    # into host_allocs, host_reused, managed_allocs and managed_reused ("x"
    # where the output has none; kept_kind is its own variable).
    kept_counts() { # FILE
        for kept_kind in "pinned host" managed; do
            # shellcheck disable=SC2046 # two counts
            set -- "$1" $(awk -v kind="$kept_kind" '
                $0 ~ "^cupool:   " kind " memory:" { on = 1; next }
                on && /allocations [0-9]+ \(served by kept blocks/ {
                    match($0, /allocations [0-9]+/); a = substr($0, RSTART + 12, RLENGTH - 12)
                    match($0, /kept blocks [0-9]+/); r = substr($0, RSTART + 12, RLENGTH - 12)
                    print a, r; exit
                }' "$1") x x
            if [ "$kept_kind" = managed ]; then managed_allocs=$2 managed_reused=$3; else host_allocs=$2 host_reused=$3; fi
        done
    }
    for kind in static shared; do
        [ -x "$bindir/host_loop_$kind" ] || { record "proof:host-managed-cudart-$kind FAIL not built"; continue; }
        timeout -k 5 120 "$launcher" --stats -- "$bindir/host_loop_$kind" --iters 100 >"$out/proofs/host-loop-$kind.out" 2>&1
        rc=$?
        kept_counts "$out/proofs/host-loop-$kind.out"
        line=$(grep -m1 '^{' "$out/proofs/host-loop-$kind.out")
        if [ "$rc" -eq 0 ] && [ "$host_allocs" = 200 ] && [ "$managed_allocs" = 100 ] &&
            [ "$host_reused" -gt 0 ] 2>/dev/null && [ "$managed_reused" -gt 0 ] 2>/dev/null; then
            record "proof:host-managed-cudart-$kind PASS pinned $host_allocs (kept served $host_reused), managed $managed_allocs (kept served $managed_reused): $line"
        else
            record "proof:host-managed-cudart-$kind FAIL rc=$rc pinned=$host_allocs/$host_reused managed=$managed_allocs/$managed_reused (proofs/host-loop-$kind.out)"
        fi
    done
    cat >"$out/proofs/proof_torch_pinned.py" <<'EOF'
import torch
total = 0.0
for i in range(8):
    h = torch.full((1 << 20,), float(i), pin_memory=True)
    assert h.is_pinned()
    d = h.to("cuda", non_blocking=True)
    total += float(d.sum())
    del h, d
torch.cuda.synchronize()
assert total == float(sum(range(8)) << 20), total
print("torch pinned ok", total)
EOF
    cat >"$out/proofs/proof_cupy_host.py" <<'EOF'
import cupy as cp
import numpy as np
cp.cuda.set_pinned_memory_allocator(None)
for i in range(8):
    m = cp.cuda.alloc_pinned_memory(1 << 22)
    h = np.frombuffer(m, dtype=np.float32, count=1 << 20)
    h[:] = i
    d = cp.asarray(h)
    assert float(d.sum()) == float(i << 20)
    del h, m, d
cp.cuda.set_allocator(cp.cuda.malloc_managed)
for i in range(8):
    a = cp.full((1 << 20,), i, dtype=cp.float32)
    assert float(a.sum()) == float(i << 20)
    del a
print("cupy pinned and managed ok")
EOF
    for fw in torch_pinned cupy_host; do
        timeout -k 5 180 "$launcher" --stats -- python3 "$out/proofs/proof_$fw.py" >"$out/proofs/$fw.out" 2>&1
        rc=$?
        kept_counts "$out/proofs/$fw.out"
        if grep -q 'No module named' "$out/proofs/$fw.out"; then
            record "proof:$fw SKIP not installed"
        elif [ "$rc" -ne 0 ]; then
            record "proof:$fw FAIL rc=$rc (proofs/$fw.out)"
        elif [ "$fw" = torch_pinned ] && [ "$host_allocs" -ge 1 ] 2>/dev/null; then
            # PyTorch's own pinned-memory cache keeps what it allocated: cupool
            # sees its allocations, but few frees to serve again.
            record "proof:$fw PASS pinned allocations $host_allocs (kept served $host_reused)"
        elif [ "$fw" = cupy_host ] && [ "$host_allocs" -ge 8 ] 2>/dev/null && [ "$host_reused" -ge 1 ] &&
            [ "$managed_allocs" -ge 8 ] 2>/dev/null && [ "$managed_reused" -ge 1 ]; then
            record "proof:$fw PASS pinned $host_allocs (kept served $host_reused), managed $managed_allocs (kept served $managed_reused)"
        else
            record "proof:$fw FAIL pinned=$host_allocs/$host_reused managed=$managed_allocs/$managed_reused (proofs/$fw.out)"
        fi
    done

    cat >"$out/proofs/proof_torch.py" <<'EOF'
import torch
x = [torch.full((1 << 20,), float(i), device="cuda") for i in range(8)]
y = sum(x)
del x
z = torch.randn(1024, 1024, device="cuda")
w = (z @ z.t()).sum()
torch.cuda.synchronize()
assert float(y[0]) == 28.0, float(y[0])
print("torch", torch.__version__, "ok", float(w) > 0)
EOF
    cat >"$out/proofs/proof_cupy.py" <<'EOF'
import cupy as cp
cp.cuda.set_allocator(None)
a = [cp.full((1 << 20,), i, dtype=cp.float32) for i in range(8)]
s = sum(a)
del a
assert float(s[0]) == 28.0, float(s[0])
print("cupy", cp.__version__, "ok")
EOF
    for fw in torch cupy; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 5 180 "$launcher" --stats -- python3 "$out/proofs/proof_$fw.py" \
            >"$out/proofs/$fw.out" 2>&1
        rc=$?
        seen=$(sed -n 's/^cupool: *cuMemAlloc_v2 *\([0-9]*\) *$/\1/p' "$out/proofs/$fw.out" | head -1)
        pooled=$(sed -n 's/^cupool: *pooled allocations *\([0-9]*\).*/\1/p' "$out/proofs/$fw.out" | head -1)
        if grep -q 'No module named' "$out/proofs/$fw.out"; then
            record "proof:$fw SKIP not installed"
        elif [ "$rc" -eq 0 ] && [ "${seen:-0}" -ge 8 ] && [ "${pooled:-0}" -ge 8 ]; then
            record "proof:$fw PASS cuMemAlloc_v2=$seen pooled=$pooled"
        else
            record "proof:$fw FAIL rc=$rc cuMemAlloc_v2=${seen:-none} pooled=${pooled:-none}"
        fi
    done
fi

# ---- legacy IPC between processes: PyTorch, and NVIDIA's simpleIPC -----------------------------------
if part ipc; then
    say "IPC between processes"
    # PyTorch's caching allocator shares the segment holding a tensor (its own
    # cudaMalloc, pooled by cupool); without caching it has no segment to share,
    # natively too: that run shows PyTorch's own answer.
    for run in native.caching auto.caching deferred.caching sync.caching native.nocache auto.nocache; do
        mode=${run%.*}
        env=""
        [ "${run#*.}" = nocache ] && env="PYTORCH_NO_CUDA_MEMORY_CACHING=1"
        if [ "$mode" = native ]; then
            env $env timeout -k 5 150 python3 "$src/tests/gpu/torch_ipc.py" >"$out/proofs/torch-ipc.$run.out" 2>&1
        else
            env $env CUPOOL_FREE=$mode timeout -k 5 150 "$launcher" --stats -- python3 "$src/tests/gpu/torch_ipc.py" \
                >"$out/proofs/torch-ipc.$run.out" 2>&1
        fi
        rc=$?
        said=$(grep -m1 -E '^(child read|PyTorch cannot)' "$out/proofs/torch-ipc.$run.out")
        if grep -q 'No module named' "$out/proofs/torch-ipc.$run.out"; then
            record "ipc:torch-multiprocessing.$run SKIP not installed"
        elif [ "$rc" -eq 0 ] && grep -q '^torch ipc ok' "$out/proofs/torch-ipc.$run.out"; then
            record "ipc:torch-multiprocessing.$run PASS $said"
        elif [ "${run#*.}" = nocache ]; then
            record "ipc:torch-multiprocessing.$run INFO rc=$rc $said"
        else
            record "ipc:torch-multiprocessing.$run FAIL rc=$rc $said (proofs/torch-ipc.$run.out)"
        fi
    done
    # CUDA_SAMPLES: a folder holding simpleIPC.cu and the samples' Common helpers
    # (helper_cuda.h, helper_string.h, helper_multiprocess.h/.cpp) from
    # NVIDIA's cuda-samples; the sample runs natively and under every free mode.
    if [ -n "${CUDA_SAMPLES:-}" ] && [ -f "$CUDA_SAMPLES/simpleIPC.cu" ]; then
        if nvcc -O2 -I"$CUDA_SAMPLES" -o "$bindir/simpleIPC" "$CUDA_SAMPLES/simpleIPC.cu" \
            "$CUDA_SAMPLES/helper_multiprocess.cpp" >"$out/proofs/simpleIPC.build" 2>&1; then
            for mode in native auto ordered deferred sync; do
                if [ "$mode" = native ]; then
                    (cd "$bindir" && timeout -k 5 120 ./simpleIPC) >"$out/proofs/simpleIPC.$mode.out" 2>&1
                else
                    (cd "$bindir" && CUPOOL_FREE=$mode timeout -k 5 120 "$launcher" --stats -- ./simpleIPC) \
                        >"$out/proofs/simpleIPC.$mode.out" 2>&1
                fi
                rc=$?
                pooled=$(sed -n 's/^cupool: *pooled allocations *\([0-9]*\).*/\1/p' "$out/proofs/simpleIPC.$mode.out" | head -1)
                # Its child processes print "Process N complete!" after verifying.
                if [ "$rc" -eq 0 ] && grep -q 'complete!' "$out/proofs/simpleIPC.$mode.out" &&
                    ! grep -q 'mismatch' "$out/proofs/simpleIPC.$mode.out"; then
                    record "ipc:simpleIPC.$mode PASS pooled=${pooled:-none}"
                else
                    record "ipc:simpleIPC.$mode FAIL rc=$rc (proofs/simpleIPC.$mode.out)"
                fi
            done
        else
            record "ipc:simpleIPC FAIL does not build (proofs/simpleIPC.build)"
        fi
    else
        record "ipc:simpleIPC SKIP CUDA_SAMPLES names no folder with simpleIPC.cu"
    fi
fi

# ---- summary -----------------------------------------------------------------------------------------
say "summary"
awk '{ printf "%-58s %-5s", $1, $2; $1 = ""; $2 = ""; sub(/^ +/, ""); print " " $0 }' "$results"
pass=$(awk '$2 == "PASS"' "$results" | wc -l)
fail=$(awk '$2 == "FAIL"' "$results" | wc -l)
skip=$(awk '$2 == "SKIP"' "$results" | wc -l)
testfail=$(awk '$2 == "TESTFAIL"' "$results" | wc -l)
[ "$testfail" -eq 0 ] || echo "TESTFAIL: memcheck clean, but the test's own checks failed with CUPOOL_FREE forced (see sanitizer/NAME.MODE.out)"
echo "PASS $pass  FAIL $fail  TESTFAIL $testfail  SKIP $skip   (total $(($(date +%s) - start)) s; logs in $out)"
[ "$fail" -eq 0 ]
