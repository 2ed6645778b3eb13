/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.h as the driver itself sees it.  With __CUDA_API_VERSION_INTERNAL every
 * versioned entry point (cuMemAlloc and cuMemAlloc_v2, cuMemFreeAsync and
 * cuMemFreeAsync_ptsz, the v1 cuGetProcAddress, ...) is declared under its own
 * exported name instead of being #defined onto the newest one, which is what
 * a library exporting those names needs.
 */
#ifndef CUPOOL_CUDA_API_H
#define CUPOOL_CUDA_API_H
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#endif
