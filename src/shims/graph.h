/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launch shape of cupool's fill kernels (src/shims/fill_kernel.cu), shared by
 * the memset rewrite (graph.c) and bench/memset_bench.c so that the benchmark
 * measures exactly the kernel nodes cupool makes.  Blocks of 256 threads; a
 * 1-D fill spreads one row over up to one full wave of blocks (8 per SM),
 * whose grid-stride loops then stream it; a pitched fill of narrow rows gives
 * each row fewer threads (32 at least, a warp) and each block several rows.
 */
#ifndef CUPOOL_GRAPH_H
#define CUPOOL_GRAPH_H

#include <stddef.h>

#define CUPOOL_FILL_THREADS 256
#define CUPOOL_FILL_BLOCKS_PER_SM 8
#define CUPOOL_FILL_MAX_GRID_Y 65535

typedef struct cupool_fill_shape {
    unsigned grid[2], block[2];
} cupool_fill_shape_t;

/* max_blocks: the SM count times CUPOOL_FILL_BLOCKS_PER_SM. */
static inline cupool_fill_shape_t cupool_fill_geometry(size_t width, size_t height, unsigned element_size,
                                                       unsigned max_blocks)
{
    size_t row = width * element_size;
    size_t units = row / 16 + 2; /* 16-byte chunks of a row, plus its head and tail */
    unsigned bx = CUPOOL_FILL_THREADS, by = 1;
    if (height > 1) {
        while (bx > 32 && bx / 2 >= units) bx /= 2;
        by = CUPOOL_FILL_THREADS / bx;
    }
    if (max_blocks == 0) max_blocks = 1;
    size_t gx = (units + bx - 1) / bx, gy = (height + by - 1) / by;
    if (gx > max_blocks) gx = max_blocks;
    size_t room = max_blocks / gx ? max_blocks / gx : 1;
    if (gy > room) gy = room;
    if (gy > CUPOOL_FILL_MAX_GRID_Y) gy = CUPOOL_FILL_MAX_GRID_Y;
    if (gy == 0) gy = 1;
    cupool_fill_shape_t s = {{(unsigned)gx, (unsigned)gy}, {bx, by}};
    return s;
}

#endif
