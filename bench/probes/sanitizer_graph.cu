/* SPDX-License-Identifier: Apache-2.0 */
// Does compute-sanitizer's stream-ordered checker order a graph's kernel node
// behind a stream-ordered allocation the host has synchronized?  No cupool.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s -> %s\n", #x, cudaGetErrorString(e_)); return 2; } } while (0)
__global__ void fill(char *p, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) p[i] = 1; }
static int graph_fill(char *p, size_t n, cudaStream_t s, int roots = 1, int generic = 0) {
    cudaGraph_t g; cudaGraphExec_t e; cudaGraphNode_t k, other;
    CK(cudaGraphCreate(&g, 0));
    if (roots > 1) CK(cudaGraphAddEmptyNode(&other, g, NULL, 0)); /* a second root, unconnected */
    void *args[] = {&p, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)fill; kp.gridDim = dim3((unsigned)(n / 256)); kp.blockDim = dim3(256); kp.kernelParams = args;
    if (generic) { /* the same node through the generic entry point */
        cudaGraphNodeParams np = {};
        np.type = cudaGraphNodeTypeKernel;
        np.kernel.func = kp.func; np.kernel.gridDim = kp.gridDim; np.kernel.blockDim = kp.blockDim;
        np.kernel.kernelParams = kp.kernelParams;
        CK(cudaGraphAddNode(&k, g, NULL, NULL, 0, &np));
    } else {
        CK(cudaGraphAddKernelNode(&k, g, NULL, 0, &kp));
    }
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    cudaGraphExecDestroy(e); cudaGraphDestroy(g);
    return 0;
}
int main(int argc, char **argv) {
    int v = argc > 1 ? atoi(argv[1]) : 1;
    cudaStream_t X, P;
    CK(cudaStreamCreate(&X));
    CK(cudaStreamCreateWithFlags(&P, cudaStreamNonBlocking));
    char *t; CK(cudaMalloc(&t, 256)); CK(cudaMemsetAsync(t, 0, 256, X)); CK(cudaMemsetAsync(t, 0, 256, P)); CK(cudaDeviceSynchronize());
    size_t n = 1 << 20;
    for (int round = 0; round < 3; round++) {
        char *p;
        switch (v) {
        case 1: /* legacy alloc + device sync, kernel launched on X directly */
            CK(cudaMallocAsync((void **)&p, n, 0)); CK(cudaDeviceSynchronize());
            fill<<<n / 256, 256, 0, X>>>(p, n); CK(cudaStreamSynchronize(X)); CK(cudaFreeAsync(p, 0)); break;
        case 2: /* legacy alloc + device sync, kernel node of a graph launched on X */
            CK(cudaMallocAsync((void **)&p, n, 0)); CK(cudaDeviceSynchronize());
            if (graph_fill(p, n, X)) return 2; CK(cudaFreeAsync(p, 0)); break;
        case 3: /* cudaMalloc, kernel node of a graph on X */
            CK(cudaMalloc((void **)&p, n)); if (graph_fill(p, n, X)) return 2; CK(cudaFree(p)); break;
        case 4: /* alloc on P + stream sync, kernel node of a graph on X */
            CK(cudaMallocAsync((void **)&p, n, P)); CK(cudaStreamSynchronize(P));
            if (graph_fill(p, n, X)) return 2; CK(cudaFreeAsync(p, P)); CK(cudaStreamSynchronize(P)); break;
        case 5: /* alloc on X itself, kernel node of a graph on X */
            CK(cudaMallocAsync((void **)&p, n, X));
            if (graph_fill(p, n, X)) return 2; CK(cudaFreeAsync(p, X)); break;
        case 6: /* legacy alloc, graph on the legacy stream */
            CK(cudaMallocAsync((void **)&p, n, 0));
            if (graph_fill(p, n, 0)) return 2; CK(cudaFreeAsync(p, 0)); break;
        case 7: /* as 2, and the graph has a second root (an empty node) */
            CK(cudaMallocAsync((void **)&p, n, 0)); CK(cudaDeviceSynchronize());
            if (graph_fill(p, n, X, 2)) return 2; CK(cudaFreeAsync(p, 0)); break;
        case 8: /* as 5 (alloc on X), with a second root */
            CK(cudaMallocAsync((void **)&p, n, X));
            if (graph_fill(p, n, X, 2)) return 2; CK(cudaFreeAsync(p, X)); break;
        case 9: /* alloc on P, the host polls cudaStreamQuery(P) until done, kernel on X */
            CK(cudaMallocAsync((void **)&p, n, P)); while (cudaStreamQuery(P) == cudaErrorNotReady) {}
            fill<<<n / 256, 256, 0, X>>>(p, n); CK(cudaStreamSynchronize(X)); CK(cudaFreeAsync(p, X)); break;
        case 10: /* as 9 with cudaStreamSynchronize(P) in place of the polling */
            CK(cudaMallocAsync((void **)&p, n, P)); CK(cudaStreamSynchronize(P));
            fill<<<n / 256, 256, 0, X>>>(p, n); CK(cudaStreamSynchronize(X)); CK(cudaFreeAsync(p, X)); break;
        case 11: /* as 2, the kernel node added with cudaGraphAddNode */
            CK(cudaMallocAsync((void **)&p, n, 0)); CK(cudaDeviceSynchronize());
            if (graph_fill(p, n, X, 1, 1)) return 2; CK(cudaFreeAsync(p, 0)); break;
        case 12: /* as 2, then a memset on the legacy stream the host does not wait for, then the graph on X */
            CK(cudaMallocAsync((void **)&p, n, 0)); CK(cudaDeviceSynchronize()); CK(cudaMemsetAsync(p, 0, n, 0));
            if (graph_fill(p, n, X)) return 2; CK(cudaFreeAsync(p, 0)); break;
        case 13: /* as 12 with the kernel launched on X directly, no graph */
            CK(cudaMallocAsync((void **)&p, n, 0)); CK(cudaDeviceSynchronize()); CK(cudaMemsetAsync(p, 0, n, 0));
            fill<<<n / 256, 256, 0, X>>>(p, n); CK(cudaStreamSynchronize(X)); CK(cudaFreeAsync(p, 0)); break;
        }
        CK(cudaDeviceSynchronize());
    }
    printf("variant %d done\n", v);
    return 0;
}
