/* SPDX-License-Identifier: Apache-2.0 */
// host_loop.cu: a CUDA runtime program that allocates pinned host memory
// (cudaMallocHost, cudaHostAlloc with PORTABLE|MAPPED) and managed memory
// (cudaMallocManaged) on every iteration, and frees each while the device
// may still be reading it.  scripts/gpu-tests.sh builds it twice:
//   nvcc -O2 -cudart static -DCUDART_KIND='"static"' -o host_loop_static tests/gpu/host_loop.cu
//   nvcc -O2 -cudart shared -DCUDART_KIND='"shared"' -o host_loop_shared tests/gpu/host_loop.cu
// and runs it under `cupool --stats`, which proves that cupool sees these
// calls from both kinds of cudart and serves them again from what it keeps.
//
//   host_loop [--iters N] [--elems E]
//
// Three loops on one non-blocking stream, none waiting for the device
// inside (a spin kernel keeps the device behind the host):
//   staging: the host fills a fresh cudaMallocHost buffer, an async copy
//            takes it to the device, a kernel checks the copy, the buffer
//            is freed;
//   mapped:  the host fills a fresh cudaHostAlloc(PORTABLE|MAPPED) buffer,
//            a kernel checks it through cudaHostGetDevicePointer's pointer,
//            the buffer is freed;
//   managed: the host fills a fresh cudaMallocManaged buffer, a kernel
//            checks it and writes a second pattern, the buffer is freed;
//            the last one is also read back by the host after a sync.
// Every free comes while the device may still use the buffer; the host's
// next writes land in whatever block the next allocation returns, so a
// block handed out before the device was done with it shows up as a wrong
// value in a device check.  Prints one JSON line; exits 1 on any wrong value.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "../../bench/cudart_check.h"

__host__ __device__ static unsigned pattern(unsigned seed, size_t i)
{
    return seed * 2654435761u + (unsigned)i;
}

__global__ void check(const unsigned *a, size_t n, unsigned seed, unsigned long long *errors)
{
    unsigned long long bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (a[i] != pattern(seed, i)) bad++;
    if (bad) atomicAdd(errors, bad);
}

__global__ void fill(unsigned *a, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = pattern(seed, i);
}

// Keeps the stream busy for about `cycles` clock ticks.
__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static void host_fill(unsigned *a, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) a[i] = pattern(seed, i);
}

static unsigned long long host_check(const unsigned *a, size_t n, unsigned seed)
{
    unsigned long long bad = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != pattern(seed, i)) bad++;
    return bad;
}

int main(int argc, char **argv)
{
    int iters = 200;
    size_t elems = 1 << 18;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--elems") && i + 1 < argc) elems = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: host_loop [--iters N] [--elems E]\n");
            return 2;
        }
    }
    if (iters < 1 || elems < 1) return 2;
    const size_t bytes = elems * sizeof(unsigned);
    const int threads = 256, blocks = 132;

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long *errors;
    CK(cudaMalloc(&errors, sizeof *errors));
    CK(cudaMemset(errors, 0, sizeof *errors));
    unsigned *dev;
    CK(cudaMalloc(&dev, bytes));
    unsigned long long host_bad = 0;
    long host_allocs = 0, managed_allocs = 0;

    const long long lag = 20000; // cycles: about 10 us
    for (int it = 0; it < iters; it++) {
        unsigned *staging;
        CK(cudaMallocHost(&staging, bytes));
        host_allocs++;
        host_fill(staging, elems, it);
        spin<<<1, 1, 0, s>>>(lag);
        CK(cudaMemcpyAsync(dev, staging, bytes, cudaMemcpyHostToDevice, s));
        check<<<blocks, threads, 0, s>>>(dev, elems, it, errors);
        CK(cudaFreeHost(staging));
    }
    for (int it = 0; it < iters; it++) {
        unsigned *mapped, *mapped_dev;
        CK(cudaHostAlloc(&mapped, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
        host_allocs++;
        CK(cudaHostGetDevicePointer(&mapped_dev, mapped, 0));
        host_fill(mapped, elems, it + 1000);
        spin<<<1, 1, 0, s>>>(lag);
        check<<<blocks, threads, 0, s>>>(mapped_dev, elems, it + 1000, errors);
        CK(cudaFreeHost(mapped));
    }
    for (int it = 0; it < iters; it++) {
        unsigned *managed;
        CK(cudaMallocManaged(&managed, bytes));
        managed_allocs++;
        host_fill(managed, elems, it + 2000);
        spin<<<1, 1, 0, s>>>(lag);
        check<<<blocks, threads, 0, s>>>(managed, elems, it + 2000, errors);
        fill<<<blocks, threads, 0, s>>>(managed, elems, it + 3000);
        CK(cudaGetLastError());
        if (it == iters - 1) {
            CK(cudaStreamSynchronize(s));
            host_bad += host_check(managed, elems, it + 3000);
        }
        CK(cudaFree(managed));
    }
    CK(cudaStreamSynchronize(s));
    unsigned long long device_bad = 0;
    CK(cudaMemcpy(&device_bad, errors, sizeof device_bad, cudaMemcpyDeviceToHost));
    CK(cudaFree(dev));
    CK(cudaFree(errors));
    CK(cudaStreamDestroy(s));
    printf("{\"cudart\": \"%s\", \"iters\": %d, \"elems\": %zu, \"host_allocs\": %ld, \"managed_allocs\": %ld, "
           "\"device_errors\": %llu, \"host_errors\": %llu}\n",
           CUDART_KIND, iters, elems, host_allocs, managed_allocs, device_bad, host_bad);
    if (device_bad || host_bad) fprintf(stderr, "host_loop: %llu wrong values\n", device_bad + host_bad);
    return device_bad || host_bad ? 1 : 0;
}
