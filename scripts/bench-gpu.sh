#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/bench-gpu.sh [RESULTS_DIR]: on a GPU machine, build cupool (out of
# tree, in $CUPOOL_BUILD, default build-gpu/) if needed and run every
# benchmark: the allocation pair (bench/alloc_bench.py), pinned host and
# managed memory (bench/host_bench.py), loop.cu with cudart static and shared
# (bench/loop_bench.py), bench/memset_bench when it is built, CuPy, the
# memory parity suite (bench/parity_bench.py) and PyTorch, in that order.
# Writes JSON/CSV results, logs and pictures into RESULTS_DIR (default
# bench-results/), a generated RESULTS_DIR/BENCHMARKS.md, and prints every
# target with met / not met.
# Finishes within BENCH_BUDGET seconds (default 570): each stage gets a share
# (the last of CuPy and PyTorch that runs, what is left) and the drivers skip
# what is left when their deadline comes.  Stages run in separate calls
# (BENCH_ONLY) into one RESULTS_DIR make one report: each stage's ratios are
# measured within the stage.
#
# Environment: CUPOOL_BUILD (build dir), UTHASH_DIR (default .vendor/uthash),
# CUDA_HOME (default /usr/local/cuda), JOBS (make -j, default 16),
# BENCH_BUDGET, BENCH_ONLY (space-separated subset of: alloc host loop cupy torch
# memset parity, and capacity, which runs only when named), PARITY_WORKLOADS
# (the parity suite's workloads this call runs, merged with an earlier call's),
# PARITY_CONFIGS (its configurations, default all).  BENCH_ONLY=parity
# BENCH_BUDGET=560 runs the parity suite alone within a 600-s call.
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-bench-results}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
build=${CUPOOL_BUILD:-$src/build-gpu}
uthash=${UTHASH_DIR:-$src/.vendor/uthash}
cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=${JOBS:-16}
budget=${BENCH_BUDGET:-570}
only=${BENCH_ONLY:-alloc host loop cupy torch memset parity}
start=$(date +%s)
python=${PYTHON:-python3}
PATH="$cuda/bin:$PATH"
export PATH

say() { printf '\n=== %s (%ss)\n' "$*" $(($(date +%s) - start)); }
want() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }

# The stage's deadline: now + its cap, never past the whole budget (less 25 s
# for pictures and the report).
deadline() {
    d=$(($(date +%s) + $1))
    g=$((start + budget - 25))
    [ "$d" -gt "$g" ] && d=$g
    echo "$d"
}

# ---- build ----------------------------------------------------------------------
say "build in $build"
if [ ! -f "$build/Makefile" ]; then
    if [ ! -x "$src/configure" ]; then
        (cd "$src" && autoreconf -fi) >"$out/build.log" 2>&1 || { echo "autoreconf failed: see $out/build.log"; tail -20 "$out/build.log"; exit 1; }
    fi
    mkdir -p "$build"
    (cd "$build" && "$src/configure" --with-uthash="$uthash" --with-cuda="$cuda") >>"$out/build.log" 2>&1 ||
        { echo "configure failed: see $out/build.log"; tail -20 "$out/build.log"; exit 1; }
fi
if ! make -C "$build" -j"$jobs" >>"$out/build.log" 2>&1; then
    echo "warning: 'make' failed (see $out/build.log); building only what the benchmarks need"
    make -C "$build" -j"$jobs" libcupool.la scripts/cupool bench/alloc_bench bench/host_bench >>"$out/build.log" 2>&1 ||
        { tail -30 "$out/build.log"; exit 1; }
fi
lib=$build/.libs/libcupool.so
launcher=$build/scripts/cupool
[ -f "$lib" ] && [ -x "$launcher" ] || { echo "no $lib or $launcher after the build"; exit 1; }
CUPOOL_LIBRARY=$lib
export CUPOOL_LIBRARY
unset LD_PRELOAD

# ---- the machine ------------------------------------------------------------------
"$python" - "$out/machine.json" "$src" "$cuda" <<'EOF' 2>>"$out/build.log"
import json, os, platform, subprocess, sys
out, src, cuda = sys.argv[1:4]
def cmd(*c):
    try:
        return subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=60).stdout.strip()
    except Exception as e:
        return "unavailable (%s)" % e
m = {}
m["GPU"] = cmd("nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
m["CUDA toolkit"] = cmd(os.path.join(cuda, "bin", "nvcc"), "--version").splitlines()[-1]
m["host compiler"] = cmd("gcc", "--version").splitlines()[0]
m["kernel"] = platform.release()
try:
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
    m["CPU"] = "%s x %d" % (cpu[0], len(cpu))
except Exception:
    pass
m["python"] = platform.python_version()
for mod in ("torch", "cupy", "numpy"):
    v = cmd(sys.executable, "-c", "import %s; print(%s.__version__)" % (mod, mod)).splitlines()
    m[mod] = v[-1] if v else "?"
m["cupool commit"] = cmd("git", "-C", src, "describe", "--always", "--dirty")
json.dump(m, open(out, "w"), indent=1)
for k, v in m.items():
    print("%-14s %s" % (k, v))
EOF

status=0
run_stage() { # name cap command...
    name=$1 cap=$2
    shift 2
    BENCH_DEADLINE=$(deadline "$cap")
    export BENCH_DEADLINE
    say "$name (up to $((BENCH_DEADLINE - $(date +%s)))s)"
    # The drivers stop on their own at the deadline; timeout is the backstop.
    { timeout -k 10 $((BENCH_DEADLINE - $(date +%s) + 30)) "$@" 2>"$out/$name.stderr"; echo $? >"$out/$name.rc"; } |
        tee "$out/$name.txt"
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo 1)
    [ "$rc" -eq 0 ] || { echo "($name: exit $rc; see $out/$name.stderr)"; status=1; }
}

# ---- the allocation pair ---------------------------------------------------------------
want alloc && run_stage alloc 150 "$python" "$src/bench/alloc_bench.py" --bin "$build/bench/alloc_bench" \
    --cupool "$launcher" --library "$lib" --out "$out"

# ---- pinned host and managed memory ------------------------------------------------------
# bench/host_bench's three modes, native and under cupool, in interleaved
# rounds after a warm-up process and one run of each mode under cupool's
# statistics.  By the native costs of docs/DESIGN.md (a 256 MiB pinned pair
# takes 0.12 s on an H100) a round should take about 15 s, the whole stage
# about 90 s.  Beside other stages it gets 100 s and runs the rounds that fit
# (host_bench.py skips the runs past the deadline); alone (BENCH_ONLY=host)
# the whole budget.
host_cap=100
[ "$only" = host ] && host_cap=$budget
want host && run_stage host "$host_cap" "$python" "$src/bench/host_bench.py" --bin "$build/bench/host_bench" \
    --cupool "$launcher" --library "$lib" --out "$out"

# ---- loop.cu, cudart static and shared ----------------------------------------------------
if want loop; then
    bindir=$build/bench-loop
    mkdir -p "$bindir"
    for kind in static shared; do
        if [ ! -x "$bindir/loop_$kind" ] || [ -n "$(find "$src/bench/loop.cu" -newer "$bindir/loop_$kind" 2>/dev/null)" ]; then
            nvcc -O2 -arch=native -cudart "$kind" -DCUDART_KIND="\"$kind\"" -o "$bindir/loop_$kind" \
                "$src/bench/loop.cu" >>"$out/build.log" 2>&1 ||
                nvcc -O2 -cudart "$kind" -DCUDART_KIND="\"$kind\"" -o "$bindir/loop_$kind" \
                    "$src/bench/loop.cu" >>"$out/build.log" 2>&1 || echo "nvcc failed for loop_$kind"
        fi
    done
    run_stage loop 90 "$python" "$src/bench/loop_bench.py" --bindir "$bindir" --cupool "$launcher" \
        --library "$lib" --out "$out"
fi

# ---- graph memsets (bench/memset_bench, written separately; run if built) ----------------------
memset=$build/bench/memset_bench
if want memset && [ -x "$memset" ]; then
    # It compares a native graph memset node with cupool's fill-kernel node by
    # itself (no preload: it loads cupool's PTX directly).
    BENCH_DEADLINE=$(deadline 90)
    left=$((BENCH_DEADLINE - $(date +%s)))
    say "memset (up to ${left}s)"
    if [ "$left" -gt 15 ]; then
        timeout -k 5 "$left" "$memset" -o "$out/memset.csv" >"$out/memset.txt" 2>&1
        echo $? >"$out/memset.rc"
        cat "$out/memset.txt"
        "$python" - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
text = open(os.path.join(out, "memset.txt"), errors="replace").read()
rc = open(os.path.join(out, "memset.rc")).read().strip()
rc = int(rc) if rc.lstrip("-").isdigit() else rc
runs = [{"name": "memset_bench", "rc": rc, "output": "\n".join(text.splitlines()[-60:])}]
json.dump({"benchmark": "memset", "runs": runs, "targets": [], "errors": [],
           "checks": [{"name": "memset_bench exits 0 (kernel fills verified)", "ok": rc == 0}]},
          open(os.path.join(out, "memset.json"), "w"), indent=1)
EOF
    else
        echo "memset: skipped, out of time"
    fi
elif want memset; then
    say "memset: $memset is not built; skipped"
fi

# ---- CuPy: what is left when PyTorch does not run after it ------------------------------------
# Like PyTorch's stage (below), after one round of every configuration it
# runs the two its target compares until the deadline: 90 s buys a few
# rounds; a run without PyTorch and the parity suite (BENCH_ONLY without
# torch and parity) gives it the rest of the budget.
cupy_cap=90
want torch || want parity || cupy_cap=$budget
want cupy && run_stage cupy "$cupy_cap" "$python" "$src/bench/cupy_bench.py" --cupool "$launcher" --library "$lib" \
    --out "$out"

# ---- memory parity: PyTorch (cnn, cnn-stream, lm, infer) and CuPy against their allocators ---------
# Peak whole-process memory (NVML, sampled during the run) and step time of
# five workloads in five configurations (bench/parity_bench.py).  On an H100
# its processes take 7-9 s (cnn, cnn-stream), 11-14 s (lm), 5-6 s (infer)
# and 2-4 s (cupy), mostly imports and CUDA's start: a round of every
# workload and configuration takes about 170 s, five rounds about 900 s,
# more than one call of a machine whose calls are capped at 600 s.  So
# PARITY_WORKLOADS (comma-separated) runs some of them, merged into the
# parity.json an earlier call left in RESULTS_DIR on the same GPU model
# (parity_bench.py --merge): cnn,cnn-stream,cupy in one call and lm,infer in
# the next make one report.  Run alone (BENCH_ONLY=parity) it gets the whole
# budget and cuts the last rounds short at its deadline; beside PyTorch it
# gets 240 s and PyTorch the rest.
parity_cap=240
want torch || parity_cap=$budget
parity_only=
[ -n "${PARITY_WORKLOADS:-}" ] && parity_only="--workloads $PARITY_WORKLOADS --merge"
[ -n "${PARITY_CONFIGS:-}" ] && parity_only="$parity_only --configs $PARITY_CONFIGS"
# shellcheck disable=SC2086 # $parity_only: options
want parity && run_stage parity "$parity_cap" "$python" "$src/bench/parity_bench.py" --cupool "$launcher" \
    --library "$lib" --out "$out" $parity_only

# ---- capacity parity: the largest CNN batch beside a holder of the card's memory ---------------
# bench/capacity_bench.py: about twenty processes of the parity suite's CNN
# worker, 6-12 s each (two walks to the largest batch, then three
# interleaved rounds of both at the caching allocator's).  Not among the
# default stages (BENCH_ONLY=capacity).
want capacity && run_stage capacity "$budget" "$python" "$src/bench/capacity_bench.py" --cupool "$launcher" \
    --library "$lib" --out "$out"

# ---- PyTorch: last, with whatever the budget has left ------------------------------------------
# Its processes take 6-15 s each (PyTorch's import and CUDA start), 20 to a
# round of every configuration; then the four its time targets compare run
# alone, round after round, until the deadline (torch_bench.py --focus-rounds):
# the time the stages before it did not use buys those further rounds.  On
# a machine whose calls are capped at 600 s, a run of PyTorch alone
# (BENCH_ONLY=torch) gets the whole budget.
want torch && run_stage torch "$budget" "$python" "$src/bench/torch_bench.py" --cupool "$launcher" \
    --library "$lib" --out "$out"

# ---- pictures, report, summary -------------------------------------------------------------------
say "pictures and report"
unset BENCH_DEADLINE
"$python" "$src/bench/plots.py" "$out" || status=1
"$python" "$src/bench/make_report.py" "$out" >"$out/BENCHMARKS.md" || status=1
echo "report: $out/BENCHMARKS.md (docs: python3 bench/make_report.py $out > docs/BENCHMARKS.md;"
echo "        mkdir -p docs/img && cp $out/img/*.png $out/img/*.svg docs/img/)"
say "summary of targets"
"$python" "$src/bench/make_report.py" --summary "$out"
echo "total $(($(date +%s) - start)) s; results in $out"
exit $status
