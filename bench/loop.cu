/* SPDX-License-Identifier: Apache-2.0 */
// loop.cu: a CUDA runtime program that allocates and frees on every
// iteration, around kernels on two non-blocking streams, and checks every
// result on the device.  Built twice by scripts/bench-gpu.sh:
//   nvcc -O2 -cudart static -DCUDART_KIND='"static"' -o loop_static bench/loop.cu
//   nvcc -O2 -cudart shared -DCUDART_KIND='"shared"' -o loop_shared bench/loop.cu
// so it also proves that cupool sees cudaMalloc from both kinds of cudart.
//
//   loop [--noalloc] [--iters N] [--reps R] [--elems E]
//
// alloc mode: each iteration, per stream, cudaMalloc two buffers, fill one,
// derive the other from it, verify it (errors counted in a device counter),
// and cudaFree both right away - while the kernels may still be running,
// which is exactly what cupool must keep correct (natively cudaFree waits).
// --noalloc: the same kernels on buffers allocated once before the loop, to
// show that cupool adds nothing to a program that does not allocate.
// Prints one JSON line: median microseconds per iteration over R timed reps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

#include "cudart_check.h"

__global__ void fill(float *a, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = v + (float)(i & 1023);
}

__global__ void derive(const float *a, float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = a[i] * 2.0f + 1.0f;
}

__global__ void verify(const float *b, size_t n, float v, unsigned long long *errors)
{
    unsigned long long bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (b[i] != (v + (float)(i & 1023)) * 2.0f + 1.0f) bad++;
    if (bad) atomicAdd(errors, bad);
}

int main(int argc, char **argv)
{
    bool noalloc = false;
    int iters = 300, reps = 5;
    size_t elems = 1 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--noalloc")) noalloc = true;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--elems") && i + 1 < argc) elems = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: loop [--noalloc] [--iters N] [--reps R] [--elems E]\n");
            return 2;
        }
    }
    if (iters < 1 || reps < 1 || elems < 1) return 2;

    const int NS = 2;
    cudaStream_t s[NS];
    for (int k = 0; k < NS; k++) CK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    unsigned long long *errors;
    CK(cudaMalloc(&errors, sizeof *errors));
    CK(cudaMemset(errors, 0, sizeof *errors));
    long mallocs = 1;

    float *fixed[NS][2] = {};
    if (noalloc)
        for (int k = 0; k < NS; k++)
            for (int j = 0; j < 2; j++) {
                CK(cudaMalloc(&fixed[k][j], elems * sizeof(float)));
                mallocs++;
            }

    const int threads = 256, blocks = 264; // two waves of an H200's SMs
    auto one = [&](int it) {
        for (int k = 0; k < NS; k++) {
            float *a, *b;
            if (noalloc) {
                a = fixed[k][0];
                b = fixed[k][1];
            } else {
                CK(cudaMalloc(&a, elems * sizeof(float)));
                CK(cudaMalloc(&b, elems * sizeof(float)));
                mallocs += 2;
            }
            float v = (float)((it * NS + k) % 251);
            fill<<<blocks, threads, 0, s[k]>>>(a, elems, v);
            derive<<<blocks, threads, 0, s[k]>>>(a, b, elems);
            verify<<<blocks, threads, 0, s[k]>>>(b, elems, v, errors);
            CK(cudaGetLastError());
            if (!noalloc) {
                CK(cudaFree(a)); // no synchronization: the kernels may still run
                CK(cudaFree(b));
            }
        }
    };

    for (int it = 0; it < iters; it++) one(it); // warm-up: one untimed rep
    CK(cudaDeviceSynchronize());
    std::vector<double> us;
    for (int r = 0; r < reps; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; it++) one(it);
        CK(cudaDeviceSynchronize());
        auto t1 = std::chrono::steady_clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
    }
    unsigned long long bad = 0;
    CK(cudaMemcpy(&bad, errors, sizeof bad, cudaMemcpyDeviceToHost));
    if (noalloc)
        for (int k = 0; k < NS; k++)
            for (int j = 0; j < 2; j++) CK(cudaFree(fixed[k][j]));
    CK(cudaFree(errors));
    for (int k = 0; k < NS; k++) CK(cudaStreamDestroy(s[k]));

    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    double med = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                   : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
    printf("{\"cudart\": \"%s\", \"mode\": \"%s\", \"iters\": %d, \"reps\": %d, \"elems\": %zu, "
           "\"us_median\": %.3f, \"us_min\": %.3f, \"us_max\": %.3f, \"errors\": %llu, \"cudaMalloc_calls\": %ld}\n",
           CUDART_KIND, noalloc ? "noalloc" : "alloc", iters, reps, elems, med, sorted.front(), sorted.back(), bad,
           mallocs);
    if (bad) fprintf(stderr, "loop: %llu wrong results\n", bad);
    return bad ? 1 : 0;
}
