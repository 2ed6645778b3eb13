#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the demo natively and under cupool, on the GPU when this machine has
# one, else on the simulated driver the test suite uses, and prints both.
# On the simulated driver every figure says so (cupool's statistics too).
set -e
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
if "$builddir/demo/demo" 1 >/dev/null 2>&1; then
    echo "cupool demo: running on this machine's GPU"
    iterations=2000
    where=
else
    echo "cupool demo: no GPU (or no CUDA driver) here: running on the simulated driver in tests/sim, so the times below are not GPU times"
    LD_LIBRARY_PATH="$builddir/tests/sim/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    iterations=200
    where=" (simulated driver)"
fi
native=$("$builddir/demo/demo" $iterations)
echo "native:      $native$where"
pooled=$(CUPOOL_LIBRARY="$builddir/.libs/libcupool.so" "$builddir/scripts/cupool" --stats "$builddir/demo/demo" $iterations)
echo "with cupool: $pooled$where"
awk -v a="${native%% us*}" -v b="${pooled%% us*}" -v where="$where" \
    'BEGIN { if (b > 0) printf "cupool is %.1fx %s%s\n", (a > b ? a / b : b / a), (a > b ? "faster" : "slower"), where }'
