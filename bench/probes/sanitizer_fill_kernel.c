/* SPDX-License-Identifier: Apache-2.0 */
/* Does compute-sanitizer's memcheck accept cupool's fill kernel (a
 * cuModuleLoadData PTX kernel) writing a stream-ordered allocation?  No
 * cupool: the driver API alone, the shape of test_memset_api's first node
 * (a 2-D u16 fill, 300 x 5 elements, pitch 1000, at offset 4098).
 *   sanitizer_fill_kernel OWN_POOL SIZE GRAPH LOAD_FIRST
 * OWN_POOL: 1 a pool made like cupool's, 0 the device's default pool;
 * SIZE: bytes of the allocation; GRAPH: 1 a graph kernel node, 0 cuLaunchKernel;
 * LOAD_FIRST: 1 load the module before the allocation, 0 after it.
 * Build: cc -I/usr/local/cuda/include -o PROBE sanitizer_fill_kernel.c -lcuda */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/shims/fill_ptx.h"
#include "driver_probe.h"


int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s OWN_POOL SIZE GRAPH LOAD_FIRST\n", argv[0]);
        return 2;
    }
    int own = atoi(argv[1]), graph = atoi(argv[3]), load_first = atoi(argv[4]);
    size_t size = strtoull(argv[2], NULL, 0);
    CUdevice dev;
    CUcontext ctx = probe_context(&dev);
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    CUmodule m = NULL;
    CUfunction f = NULL;
    if (load_first) {
        CK(cuModuleLoadData(&m, cupool_fill_ptx));
        CK(cuModuleGetFunction(&f, m, "cupool_fill_u16"));
    }
    CUmemoryPool pool;
    if (own) pool = probe_pool(dev);
    else CK(cuDeviceGetDefaultMemPool(&pool, dev));
    CUdeviceptr buf;
    CK(cuMemAllocFromPoolAsync(&buf, size, pool, CU_STREAM_LEGACY));
    CK(cuMemsetD8(buf, 0, size));
    if (!load_first) {
        CK(cuModuleLoadData(&m, cupool_fill_ptx));
        CK(cuModuleGetFunction(&f, m, "cupool_fill_u16"));
    }
    unsigned long long dst = buf + 4098, pitch = 1000, width = 300, height = 5;
    unsigned value = 0xbeef;
    void *args[] = {&dst, &pitch, &width, &height, &value};
    if (graph) {
        CUgraph g;
        CUgraphNode n;
        CUgraphExec e;
        CUDA_KERNEL_NODE_PARAMS kp = {0};
        kp.func = f;
        kp.gridDimX = 1, kp.gridDimY = 2, kp.gridDimZ = 1;
        kp.blockDimX = 64, kp.blockDimY = 4, kp.blockDimZ = 1;
        kp.kernelParams = args;
        kp.ctx = ctx;
        CK(cuGraphCreate(&g, 0));
        CK(cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
        CK(cuGraphInstantiate(&e, g, 0));
        CK(cuGraphLaunch(e, s));
    } else {
        CK(cuLaunchKernel(f, 1, 2, 1, 64, 4, 1, 0, s, args, NULL));
    }
    CK(cuStreamSynchronize(s));
    uint16_t got[2];
    CK(cuMemcpyDtoH(got, buf + 4098 + 4 * 1000 + 598, sizeof got)); /* last element of row 4, then past it */
    printf("own=%d size=%zu graph=%d load_first=%d: %s\n", own, size, graph, load_first,
           got[0] == 0xbeef && got[1] == 0 ? "filled right" : "WRONG");
    CK(cuMemFreeAsync(buf, CU_STREAM_LEGACY));
    CK(cuCtxSynchronize());
    return 0;
}
