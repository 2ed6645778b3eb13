#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/sanitize.sh [address|thread ...]: cupool, the simulated driver,
# its commands and the test programs built with a compiler sanitizer, out of
# tree, and every C test program of the suite, with the tests of the
# commands, run against that build (the simulated driver).
#   address  AddressSanitizer with UndefinedBehaviorSanitizer and the leak
#            checker: out-of-bounds and use-after-free accesses, undefined
#            behaviour (signed overflow, misaligned or null access, bad
#            shifts) and leaks, in cupool and in the tests
#   thread   ThreadSanitizer: data races between the program's threads and
#            cupool's (the tests with threads: stress, queue, ready, ptds,
#            log...).  Fields read without their lock as a hint are relaxed
#            atomics (CUPOOL_HINT_READ in src/base/base.h): a plain access to
#            them would show here.
# Both builds check cupool's invariants too (configure --enable-assertions,
# src/base/assert.h).  Default: both.  Any report fails the run; the test
# logs stay in the build directory ($SANITIZE_BUILD, default
# build-sanitize/ beside this script's tree, one subdirectory per
# sanitizer).  The sanitizer runtimes come with gcc
# (libasan, libubsan, libtsan).  Environment: SANITIZE_BUILD, CONFIGURE_FLAGS
# (e.g. --with-cuda=DIR), JOBS.
#
# Two things a sanitizer build needs from cupool, both in src/base/real_driver.c: its
# dlsym override, which the sanitizer's runtime calls as it starts (before
# its shadow memory exists), is not instrumented (CUPOOL_NOT_SANITIZED), and
# finds the C library's dlsym without pthread_once, which ThreadSanitizer
# intercepts.
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
top=${SANITIZE_BUILD:-$src/build-sanitize}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
[ $# -gt 0 ] || set -- address thread
[ -x "$src/configure" ] || { echo "sanitize.sh: run autoreconf -fi in $src first" >&2; exit 2; }

# automake builds out of tree only from a source tree not configured in
# place (as .ci/run configures it): then the builds use a copy of its files.
if [ -f "$src/config.status" ]; then
    command -v git >/dev/null 2>&1 && git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
        { echo "sanitize.sh: $src is configured in place and is no git checkout to copy from" >&2; exit 2; }
    copy=$top/source
    rm -rf "$copy"
    mkdir -p "$copy"
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - -cf - configure Makefile.in aclocal.m4 config.h.in build-aux m4) | tar -C "$copy" -xf - ||
        { echo "sanitize.sh: cannot copy $src" >&2; exit 2; }
    src=$copy
fi

failed=0
for kind in "$@"; do
    case $kind in
    address)
        flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
        # The library is preloaded into programs that are instrumented too,
        # so the runtime is in the initial library list anyway.
        runtime="ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1"
        report="ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:"
        ;;
    thread)
        flags="-fsanitize=thread"
        # Some tests fork() with threads running (a child that logs):
        # ThreadSanitizer would end such a child at its first new thread.
        runtime="TSAN_OPTIONS=halt_on_error=0:exitcode=66:die_after_fork=0"
        report="WARNING: ThreadSanitizer"
        ;;
    *) echo "sanitize.sh: unknown sanitizer '$kind' (address or thread)" >&2; exit 2 ;;
    esac
    build=$top/$kind
    mkdir -p "$build"
    echo "== $kind: building in $build"
    # shellcheck disable=SC2086
    (cd "$build" &&
        { [ -f Makefile ] || "$src/configure" --disable-lto --enable-assertions CFLAGS="-g -O1 -fno-omit-frame-pointer $flags" \
            LDFLAGS="$flags" ${CONFIGURE_FLAGS:-} >configure.out 2>&1; } &&
        make -j"$jobs" >make.out 2>&1 && make -j"$jobs" check TESTS= >>make.out 2>&1) ||
        { echo "sanitize.sh: the $kind build failed; see $build/configure.out and make.out" >&2; failed=1; continue; }
    # The Makefile's list of C test programs (tests/test_memcheck.sh's too),
    # and the tests of the commands (cupool-report and cupool-replay are C;
    # the launcher) and of the allocation benchmark (threads on one context).
    programs=$(make -s -C "$build" print-test-programs)
    programs="$programs tests/log/test_report.sh tests/log/test_replay.sh tests/test_launcher.sh tests/bench/test_alloc_bench.sh"
    rm -f "$build"/tests/*.log "$build"/tests/*/*.log
    echo "== $kind: running $(echo "$programs" | wc -w) tests"
    # shellcheck disable=SC2086
    env $runtime make -C "$build" -j"$jobs" check TESTS="$programs" >"$build/check.out" 2>&1
    rc=$?
    sed -n 's/^# \(PASS\|FAIL\|SKIP\|ERROR\): */  \1 /p' "$build/check.out"
    reports=$(grep -lE "$report" "$build"/tests/*.log "$build"/tests/*/*.log 2>/dev/null)
    if [ $rc -ne 0 ] || [ -n "$reports" ]; then
        failed=1
        echo "sanitize.sh: $kind FAILED"
        grep '^FAIL' "$build/check.out"
        for log in $reports; do
            echo "---- $log"
            grep -E -A24 "$report" "$log" | head -n 60
        done
    else
        echo "sanitize.sh: $kind clean"
    fi
done
exit $failed
