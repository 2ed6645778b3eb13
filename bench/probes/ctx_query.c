/* SPDX-License-Identifier: Apache-2.0 */
/* What the two cuCtxGetCurrent calls of a cupool pair cost (one finds the
 * allocating context, one checks that the freeing thread has the block's
 * context current).  Without cupool: a pool made like cupool's, and in
 * alternating rounds of N pairs each
 *   bare   cuMemAllocFromPoolAsync + cuMemFreeAsync on CU_STREAM_LEGACY
 *   +ctx   the same with a cuCtxGetCurrent before each of the two calls
 *   query  cuCtxGetCurrent alone
 * Prints each kind's median over the rounds (ns per pair, per query).
 *   ctx_query [SIZE] [ROUNDS]
 * Build: cc -O2 -I/usr/local/cuda/include -o PROBE ctx_query.c -lcuda */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_probe.h"

#define PAIRS 200000
#define MAX_ROUNDS 64


int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 9;
    if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 9;
    CUdevice dev;
    probe_context(&dev);
    CUmemoryPool pool = probe_pool(dev);
    double bare[MAX_ROUNDS], with_ctx[MAX_ROUNDS], query[MAX_ROUNDS];
    CUdeviceptr p;
    CUcontext c;
    for (int r = -1; r < rounds; r++) { /* round -1 warms up */
        double t = now_ns();
        for (int i = 0; i < PAIRS; i++) {
            CK(cuMemAllocFromPoolAsync(&p, size, pool, CU_STREAM_LEGACY));
            CK(cuMemFreeAsync(p, CU_STREAM_LEGACY));
        }
        double b = (now_ns() - t) / PAIRS;
        CK(cuCtxSynchronize());
        t = now_ns();
        for (int i = 0; i < PAIRS; i++) {
            CK(cuCtxGetCurrent(&c));
            CK(cuMemAllocFromPoolAsync(&p, size, pool, CU_STREAM_LEGACY));
            CK(cuCtxGetCurrent(&c));
            CK(cuMemFreeAsync(p, CU_STREAM_LEGACY));
        }
        double w = (now_ns() - t) / PAIRS;
        CK(cuCtxSynchronize());
        t = now_ns();
        for (int i = 0; i < 10 * PAIRS; i++) CK(cuCtxGetCurrent(&c));
        double q = (now_ns() - t) / (10 * PAIRS);
        if (r >= 0) bare[r] = b, with_ctx[r] = w, query[r] = q;
    }
    double mb = median(bare, rounds), mw = median(with_ctx, rounds), mq = median(query, rounds);
    printf("%zu B, %d rounds of %d pairs: bare %.1f ns, +ctx %.1f ns (+%.1f ns, ratio %.3f), "
           "cuCtxGetCurrent alone %.1f ns\n",
           size, rounds, PAIRS, mb, mw, mw - mb, mw / mb, mq);
    CK(cuMemPoolDestroy(pool));
    return 0;
}
