/* SPDX-License-Identifier: Apache-2.0 */
/* What the CUDA runtime programs share (bench/loop.cu,
 * tests/gpu/host_loop.cu): which cudart they were built against
 * (-DCUDART_KIND='"static"' or '"shared"') and a check that names the
 * failing call and ends the program. */
#ifndef CUPOOL_CUDART_CHECK_H
#define CUPOOL_CUDART_CHECK_H

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#ifndef CUDART_KIND
#define CUDART_KIND "unknown"
#endif

#define CK(call)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

#endif
