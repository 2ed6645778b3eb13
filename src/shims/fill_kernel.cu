/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fill kernels cupool puts in place of graph memset nodes (graph.c).  The
 * library ships them as PTX text (src/shims/fill_ptx.h, made from this file by
 * `make fill-ptx`), so building cupool needs no nvcc; the driver JITs the PTX
 * once per context.  Names and parameters are an ABI (the simulated driver in
 * tests/sim emulates them by name and parameter layout): extern "C"
 * cupool_fill_u8/u16/u32(dst, pitch in bytes, width in elements, height in
 * rows, value), all 64-bit but the 32-bit value.
 *
 * Each row is written as a scalar head up to the first 16-byte boundary, the
 * aligned middle with 16-byte vector stores (four per loop trip, grid-stride,
 * so one full wave of blocks streams the whole row at memory bandwidth), and a
 * scalar tail.  Rows are spread over blockIdx.y/threadIdx.y and looped, so a
 * pitched fill of many narrow rows still uses every thread.  The driver
 * guarantees (and graph.c checks, as the driver does) that dst and pitch are
 * multiples of the element size, so a 16-byte-aligned chunk of a row always
 * starts on an element boundary and holds the same repeated 32-bit pattern.
 */
#include <stdint.h>

/* The pointers are integers (the ABI is fixed), so the compiler cannot know
 * they are global: __stwb emits st.global (write-back) rather than a generic
 * store. */

template <typename T>
static __device__ __forceinline__ void fill_rows(unsigned long long dst, unsigned long long pitch,
                                                 unsigned long long width, unsigned long long height, T value,
                                                 uint32_t pattern)
{
    const unsigned long long row_bytes = width * sizeof(T);
    const unsigned long long nx = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long x0 = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long ny = (unsigned long long)gridDim.y * blockDim.y;
    const uint4 v4 = make_uint4(pattern, pattern, pattern, pattern);

    for (unsigned long long r = (unsigned long long)blockIdx.y * blockDim.y + threadIdx.y; r < height; r += ny) {
        const unsigned long long start = dst + r * pitch, end = start + row_bytes;
        const unsigned long long a0 = (start + 15) & ~15ull, a1 = end & ~15ull;
        if (a0 >= a1) {
            /* Shorter than one aligned chunk: element stores only. */
            T *row = (T *)start;
            for (unsigned long long i = x0; i < width; i += nx) __stwb(row + i, value);
            continue;
        }
        T *head = (T *)start, *tail = (T *)a1;
        const unsigned long long nhead = (a0 - start) / sizeof(T), ntail = (end - a1) / sizeof(T);
        for (unsigned long long i = x0; i < nhead; i += nx) __stwb(head + i, value);
        for (unsigned long long i = x0; i < ntail; i += nx) __stwb(tail + i, value);

        uint4 *mid = (uint4 *)a0;
        const unsigned long long n = (a1 - a0) / 16;
        unsigned long long i = x0;
        for (; i + 3 * nx < n; i += 4 * nx) {
            __stwb(mid + i, v4);
            __stwb(mid + i + nx, v4);
            __stwb(mid + i + 2 * nx, v4);
            __stwb(mid + i + 3 * nx, v4);
        }
        for (; i < n; i += nx) __stwb(mid + i, v4);
    }
}

extern "C" __global__ void __launch_bounds__(256) cupool_fill_u8(unsigned long long dst, unsigned long long pitch,
                                                                 unsigned long long width, unsigned long long height,
                                                                 unsigned int value)
{
    const unsigned char v = (unsigned char)value;
    fill_rows<unsigned char>(dst, pitch, width, height, v, 0x01010101u * v);
}

extern "C" __global__ void __launch_bounds__(256) cupool_fill_u16(unsigned long long dst, unsigned long long pitch,
                                                                  unsigned long long width, unsigned long long height,
                                                                  unsigned int value)
{
    const unsigned short v = (unsigned short)value;
    fill_rows<unsigned short>(dst, pitch, width, height, v, 0x00010001u * v);
}

extern "C" __global__ void __launch_bounds__(256) cupool_fill_u32(unsigned long long dst, unsigned long long pitch,
                                                                  unsigned long long width, unsigned long long height,
                                                                  unsigned int value)
{
    fill_rows<unsigned int>(dst, pitch, width, height, value, value);
}
