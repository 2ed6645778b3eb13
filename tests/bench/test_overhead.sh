#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/overhead.sh runs against the null driver, and cupool serves its
# pairs from the pool there (bench/overhead.c checks cupool's statistics):
# the tool that measures cupool's own cost a pair keeps measuring it.  No
# figure is checked: times on a shared machine are not a test.
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
srcdir=${CUPOOL_SRCDIR:-$builddir}
unset LD_PRELOAD
out=$(OVERHEAD_PROCESSES=1 OVERHEAD_CACHEGRIND=0 sh "$srcdir/scripts/overhead.sh" "$builddir/.libs/libcupool.so" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "test_overhead: overhead.sh exited $rc" >&2; exit 1; }
for what in warm evicted "warm x2 threads"; do
    echo "$out" | grep -q "^$what .*: [0-9.-]* ns a pair (quartiles" ||
        { echo "test_overhead: no $what line" >&2; exit 1; }
done
exit 0
