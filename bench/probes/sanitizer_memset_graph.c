/* SPDX-License-Identifier: Apache-2.0 */
/* test_memset_api's first graph, rebuilt without cupool: the kernel nodes
 * cupool puts in place of its memset nodes (cupool's fill PTX, the launch
 * shapes of src/shims/graph.h), on a 1 MiB block of a pool made like cupool's,
 * allocated on the legacy stream, launched on a blocking stream: does
 * compute-sanitizer report this graph by itself?
 *   sanitizer_memset_graph VARIANT
 * 1 the whole graph: empty root; m1 u8 (buf+1, 1000) after root; m2 u16 2-D
 *   (buf+4098, 300 x 5, pitch 1000), a root; m3 u32 (buf+65536, 10000) after
 *   m1 and m2; an empty node after m3
 * 2 m2 alone          3 as 1 with m2 after root          4 as 1 without m1
 * 5 as 1 on a cuMemAlloc block (not stream-ordered: the control)
 * 6 as 1 with cuCtxSynchronize after the allocation (nothing left in flight)
 * 7 as 1 with the block allocated on the launch stream itself
 * On the H200 1, 3, 6 and 7 draw the 49 reports test_memset_api
 * draws under cupool, all in-bounds writes of m2; 2, 4 and 5 are clean.
 * Build: cc -I/usr/local/cuda/include -o PROBE sanitizer_memset_graph.c -lcuda */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/shims/fill_ptx.h"
#include "driver_probe.h"
#include "../../src/shims/graph.h"


static CUcontext ctx;
static CUfunction fill[3];
static unsigned max_blocks;

typedef struct fill_node {
    unsigned long long dst, pitch, width, height;
    unsigned value;
    void *args[5];
} fill_node_t;

/* A fill kernel node as graph.c makes it (fill_params). */
static CUgraphNode add_fill(CUgraph g, const CUgraphNode *deps, size_t ndeps, fill_node_t *f, CUdeviceptr dst,
                            unsigned es, size_t width, size_t height, size_t pitch, unsigned value)
{
    cupool_fill_shape_t shape = cupool_fill_geometry(width, height, es, max_blocks);
    f->dst = dst;
    f->pitch = height > 1 ? pitch : width * es;
    f->width = width;
    f->height = height;
    f->value = value;
    void *args[5] = {&f->dst, &f->pitch, &f->width, &f->height, &f->value};
    memcpy(f->args, args, sizeof args);
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = fill[es == 1 ? 0 : es == 2 ? 1 : 2];
    kp.gridDimX = shape.grid[0], kp.gridDimY = shape.grid[1], kp.gridDimZ = 1;
    kp.blockDimX = shape.block[0], kp.blockDimY = shape.block[1], kp.blockDimZ = 1;
    kp.kernelParams = f->args;
    kp.ctx = ctx;
    CUgraphNode n;
    CK(cuGraphAddKernelNode(&n, g, deps, ndeps, &kp));
    return n;
}

int main(int argc, char **argv)
{
    int v = argc > 1 ? atoi(argv[1]) : 1;
    CUdevice dev;
    ctx = probe_context(&dev);
    int sms = 0;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    max_blocks = (unsigned)sms * CUPOOL_FILL_BLOCKS_PER_SM;
    CUstream stream;
    CK(cuStreamCreate(&stream, 0));
    CUdeviceptr buf;
    const size_t size = 1 << 20;
    if (v == 5) {
        CK(cuMemAlloc(&buf, size));
    } else {
        CUmemoryPool pool;
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CK(cuMemPoolCreate(&pool, &props));
        CK(cuMemAllocFromPoolAsync(&buf, size, pool, v == 7 ? stream : CU_STREAM_LEGACY));
    }
    CK(cuMemsetD8(buf, 0, size));
    if (v == 6 || v == 7) CK(cuCtxSynchronize());
    CUmodule m;
    CK(cuModuleLoadData(&m, cupool_fill_ptx));
    CK(cuModuleGetFunction(&fill[0], m, "cupool_fill_u8"));
    CK(cuModuleGetFunction(&fill[1], m, "cupool_fill_u16"));
    CK(cuModuleGetFunction(&fill[2], m, "cupool_fill_u32"));

    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    fill_node_t f1, f2, f3;
    CUgraphNode root, deps[2], m3, z;
    size_t nd = 0;
    CK(cuGraphAddEmptyNode(&root, g, NULL, 0));
    if (v != 2 && v != 4) deps[nd++] = add_fill(g, &root, 1, &f1, buf + 1, 1, 1000, 1, 0, 0x1a5);
    deps[nd++] = add_fill(g, v == 3 ? &root : NULL, v == 3 ? 1 : 0, &f2, buf + 4096 + 2, 2, 300, 5, 1000, 0xbeef);
    if (v != 2) {
        m3 = add_fill(g, deps, nd, &f3, buf + 65536, 4, 10000, 1, 0, 0xdeadbeef);
        CK(cuGraphAddEmptyNode(&z, g, &m3, 1));
    }
    CUgraphExec e;
    CK(cuGraphInstantiate(&e, g, 0));
    CK(cuGraphLaunch(e, stream));
    CK(cuStreamSynchronize(stream));
    uint16_t got;
    CK(cuMemcpyDtoH(&got, buf + 4098 + 4000, sizeof got));
    printf("variant %d: %s\n", v, got == 0xbeef ? "filled right" : "WRONG");
    return 0;
}
