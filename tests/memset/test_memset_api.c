/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUPOOL_MEMSET=kernel: every memset node is rewritten, and every entry point
 * that can see one still shows the program a memset node: the three Add
 * calls, node type, Get/SetParams (typed and generic), the exec-graph
 * SetParams calls (which change the exec graph only), cuGraphExecUpdate,
 * clones and cuGraphNodeFindInClone, edges and dependencies, destruction, a
 * 0-byte node (an empty node underneath) and bad parameters, which get the
 * driver's own errors.  Each launch is checked byte for byte.
 */
#define _GNU_SOURCE
#include "memset_test.h"

#define BUF_SIZE (1u << 20)

/* An empty kernel the simulator knows by name (and a GPU can run), to check
 * that nodes made after a rewritten one was destroyed are not mistaken for it. */
static const char busy_ptx[] = ".version 7.0\n.target sm_75\n.address_size 64\n"
                               ".visible .entry sim_busy()\n{\n\tret;\n}\n";

typedef CUresult (*add_node_v1_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);

static CUcontext ctx;
static CUstream stream;
static CUdeviceptr buf;
static unsigned char *host_expect, *host_got;

static CUDA_MEMSET_NODE_PARAMS params(size_t offset, unsigned es, size_t width, size_t height, size_t pitch,
                                      unsigned value)
{
    CUDA_MEMSET_NODE_PARAMS p = {buf + offset, pitch, value, es, width, height};
    return p;
}

static void check_params_eq(CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *want)
{
    CUDA_MEMSET_NODE_PARAMS got;
    memset(&got, 0xee, sizeof got);
    CHECK_CU(cuGraphMemsetNodeGetParams(n, &got));
    CHECK_EQ(got.dst, want->dst);
    CHECK_EQ(got.pitch, want->pitch);
    CHECK_EQ(got.value, want->value);
    CHECK_EQ(got.elementSize, want->elementSize);
    CHECK_EQ(got.width, want->width);
    CHECK_EQ(got.height, want->height);
}

static void check_type(CUgraphNode n, CUgraphNodeType want)
{
    CUgraphNodeType type = (CUgraphNodeType)-1;
    CHECK_CU(cuGraphNodeGetType(n, &type));
    CHECK_EQ(type, want);
}

/* Resets the buffer to zero and the expectation with it. */
static void reset(void)
{
    CHECK_CU(cuMemsetD8(buf, 0, BUF_SIZE));
    memset(host_expect, 0, BUF_SIZE);
}

static void expect(const CUDA_MEMSET_NODE_PARAMS *p)
{
    memset_test_reference(host_expect + (p->dst - buf), p);
}

static void check_buffer(const char *what)
{
    CHECK_CU(cuMemcpyDtoH(host_got, buf, BUF_SIZE));
    long long at = memset_test_diff(host_got, host_expect, BUF_SIZE);
    if (at >= 0) CHECK_FAIL("%s: byte %lld is 0x%02x, expected 0x%02x", what, at, host_got[at], host_expect[at]);
}

static void launch_exec(CUgraphExec e)
{
    CHECK_CU(cuGraphLaunch(e, stream));
    CHECK_CU(cuStreamSynchronize(stream));
}

static int has_edge(const CUgraphNode *from, const CUgraphNode *to, size_t n, CUgraphNode a, CUgraphNode b)
{
    for (size_t i = 0; i < n; i++)
        if (from[i] == a && to[i] == b) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    memset_test_reexec(argv, "CUPOOL_MEMSET", "kernel");
    ctx = tl_init(0);
    int cupool = check_cupool_loaded();
    if (!cupool) {
        fprintf(stderr, "cupool is not loaded: nothing to test\n");
        return CHECK_SKIP;
    }
    CHECK_CU(cuStreamCreate(&stream, 0));
    CHECK_CU(cuMemAlloc(&buf, BUF_SIZE));
    host_expect = malloc(BUF_SIZE);
    host_got = malloc(BUF_SIZE);
    CHECK_TRUE(host_expect && host_got);
    reset();
    long long rewritten0 = memset_test_rewritten();

    /* ---- the three Add calls, with dependencies ---------------------------- */
    CUgraph g;
    CHECK_CU(cuGraphCreate(&g, 0));
    CUgraphNode root, m1, m2, m3, z;
    CHECK_CU(cuGraphAddEmptyNode(&root, g, NULL, 0));

    CUDA_MEMSET_NODE_PARAMS p1 = params(1, 1, 1000, 1, 0, 0x1a5);
    CHECK_CU(cuGraphAddMemsetNode(&m1, g, &root, 1, &p1, ctx));

    add_node_v1_fn add_node_v1 = (add_node_v1_fn)dlsym(RTLD_DEFAULT, "cuGraphAddNode");
    CHECK_TRUE(add_node_v1 != NULL);
    CUgraphNodeParams np2;
    memset(&np2, 0, sizeof np2);
    np2.type = CU_GRAPH_NODE_TYPE_MEMSET;
    CUDA_MEMSET_NODE_PARAMS p2 = params(4096 + 2, 2, 300, 5, 1000, 0xbeef);
    np2.memset = (CUDA_MEMSET_NODE_PARAMS_v2){p2.dst, p2.pitch, p2.value, p2.elementSize, p2.width, p2.height, ctx};
    CHECK_CU(add_node_v1(&m2, g, NULL, 0, &np2));

    CUgraphNodeParams np3;
    memset(&np3, 0, sizeof np3);
    np3.type = CU_GRAPH_NODE_TYPE_MEMSET;
    CUDA_MEMSET_NODE_PARAMS p3 = params(65536, 4, 10000, 1, 0, 0xdeadbeef);
    np3.memset = (CUDA_MEMSET_NODE_PARAMS_v2){p3.dst, p3.pitch, p3.value, p3.elementSize, p3.width, p3.height, ctx};
    CUgraphNode deps3[2] = {m1, m2};
    CUgraphEdgeData edges3[2];
    memset(edges3, 0, sizeof edges3);
    CHECK_CU(cuGraphAddNode_v2(&m3, g, deps3, edges3, 2, &np3));

    CUDA_MEMSET_NODE_PARAMS pz = params(0, 1, 0, 1, 0, 0x77); /* 0 bytes: an empty node underneath */
    CHECK_CU(cuGraphAddMemsetNode(&z, g, &m3, 1, &pz, ctx));
    CHECK_EQ(memset_test_rewritten() - rewritten0, 4);

    /* ---- what the program sees ------------------------------------------------ */
    check_type(root, CU_GRAPH_NODE_TYPE_EMPTY);
    check_type(m1, CU_GRAPH_NODE_TYPE_MEMSET);
    check_type(m2, CU_GRAPH_NODE_TYPE_MEMSET);
    check_type(m3, CU_GRAPH_NODE_TYPE_MEMSET);
    check_type(z, CU_GRAPH_NODE_TYPE_MEMSET);
    check_params_eq(m1, &p1);
    check_params_eq(m2, &p2);
    check_params_eq(m3, &p3);
    check_params_eq(z, &pz);
    CHECK_CU_EQ(cuGraphMemsetNodeGetParams(m1, NULL), CUDA_ERROR_INVALID_VALUE);

    /* Edges: root->m1, m1->m3, m2->m3, m3->z. */
    size_t nedges = 0;
    CHECK_CU(cuGraphGetEdges(g, NULL, NULL, NULL, &nedges));
    CHECK_EQ(nedges, 4);
    CUgraphNode from[8], to[8];
    CUgraphEdgeData data[8];
    nedges = 8;
    CHECK_CU(cuGraphGetEdges(g, from, to, data, &nedges));
    CHECK_EQ(nedges, 4);
    CHECK_TRUE(has_edge(from, to, nedges, root, m1));
    CHECK_TRUE(has_edge(from, to, nedges, m1, m3));
    CHECK_TRUE(has_edge(from, to, nedges, m2, m3));
    CHECK_TRUE(has_edge(from, to, nedges, m3, z));
    for (size_t i = 0; i < nedges; i++) CHECK_EQ(data[i].type, CU_GRAPH_DEPENDENCY_TYPE_DEFAULT);
    CUgraphNode deps[4];
    size_t ndeps = 4;
    CHECK_CU(cuGraphNodeGetDependencies(m3, deps, NULL, &ndeps));
    CHECK_EQ(ndeps, 2);
    CHECK_TRUE((deps[0] == m1 && deps[1] == m2) || (deps[0] == m2 && deps[1] == m1));
    size_t nnodes = 0;
    CHECK_CU(cuGraphGetNodes(g, NULL, &nnodes));
    CHECK_EQ(nnodes, 5);
    size_t nroots = 4;
    CUgraphNode roots[4];
    CHECK_CU(cuGraphGetRootNodes(g, roots, &nroots));
    CHECK_EQ(nroots, 2);

    /* ---- launch ------------------------------------------------------------------ */
    CUgraphExec exec;
    CHECK_CU(cuGraphInstantiate(&exec, g, 0));
    launch_exec(exec);
    expect(&p1);
    expect(&p2);
    expect(&p3);
    check_buffer("first launch");

    /* ---- SetParams on the graph: GetParams follows, the exec graph does not ---- */
    CUDA_MEMSET_NODE_PARAMS p1b = params(6, 2, 777, 1, 0, 0x1234);
    CHECK_CU(cuGraphMemsetNodeSetParams(m1, &p1b));
    check_params_eq(m1, &p1b);
    CUgraphNodeParams np2b;
    memset(&np2b, 0, sizeof np2b);
    np2b.type = CU_GRAPH_NODE_TYPE_MEMSET;
    CUDA_MEMSET_NODE_PARAMS p2b = params(200000 + 1, 1, 33, 40, 97, 0x5c);
    np2b.memset = (CUDA_MEMSET_NODE_PARAMS_v2){p2b.dst, p2b.pitch, p2b.value, p2b.elementSize, p2b.width, p2b.height,
                                               ctx};
    CHECK_CU(cuGraphNodeSetParams(m2, &np2b));
    check_params_eq(m2, &p2b);
    check_type(m2, CU_GRAPH_NODE_TYPE_MEMSET);

    reset();
    launch_exec(exec);
    expect(&p1);
    expect(&p2);
    expect(&p3);
    check_buffer("old exec after graph SetParams");

    CUgraphExec exec2;
    CHECK_CU(cuGraphInstantiate(&exec2, g, 0));
    reset();
    launch_exec(exec2);
    expect(&p1b);
    expect(&p2b);
    expect(&p3);
    check_buffer("new exec after graph SetParams");

    /* ---- exec SetParams: the exec graph only ---------------------------------- */
    CUDA_MEMSET_NODE_PARAMS p1c = params(500000, 4, 1001, 1, 0, 0xcafef00d);
    CHECK_CU(cuGraphExecMemsetNodeSetParams(exec, m1, &p1c, ctx));
    CUgraphNodeParams np3c;
    memset(&np3c, 0, sizeof np3c);
    np3c.type = CU_GRAPH_NODE_TYPE_MEMSET;
    CUDA_MEMSET_NODE_PARAMS p3c = params(700001, 1, 4097, 3, 5000, 0x3c);
    np3c.memset = (CUDA_MEMSET_NODE_PARAMS_v2){p3c.dst, p3c.pitch, p3c.value, p3c.elementSize, p3c.width, p3c.height,
                                               ctx};
    CHECK_CU(cuGraphExecNodeSetParams(exec, m3, &np3c));
    /* No exec graph: the driver's error, and the graph's nodes unchanged
     * (cupool once took NULL for the graph's node and changed it). */
    CHECK_TRUE(cuGraphExecMemsetNodeSetParams(NULL, m1, &p1c, ctx) != CUDA_SUCCESS);
    CHECK_TRUE(cuGraphExecNodeSetParams(NULL, m3, &np3c) != CUDA_SUCCESS);
    check_params_eq(m1, &p1b);
    check_params_eq(m3, &p3);
    reset();
    launch_exec(exec);
    expect(&p1c);
    expect(&p2);
    expect(&p3c);
    check_buffer("exec SetParams");
    /* The empty node takes 0-byte params (and only those) in an exec graph too. */
    CUDA_MEMSET_NODE_PARAMS pz2 = params(8, 4, 5, 0, 0, 1);
    CHECK_CU(cuGraphExecMemsetNodeSetParams(exec, z, &pz2, ctx));
    CHECK_CU_EQ(cuGraphExecMemsetNodeSetParams(exec, z, &p1, ctx), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU_EQ(cuGraphExecMemsetNodeSetParams(exec, m1, &pz, ctx), CUDA_ERROR_INVALID_VALUE);

    /* ---- clone, FindInClone, exec update ----------------------------------------- */
    CUgraph clone;
    CHECK_CU(cuGraphClone(&clone, g));
    CUgraphNode c1, c2, c3, cz;
    CHECK_CU(cuGraphNodeFindInClone(&c1, m1, clone));
    CHECK_CU(cuGraphNodeFindInClone(&c2, m2, clone));
    CHECK_CU(cuGraphNodeFindInClone(&c3, m3, clone));
    CHECK_CU(cuGraphNodeFindInClone(&cz, z, clone));
    check_type(c1, CU_GRAPH_NODE_TYPE_MEMSET);
    check_type(cz, CU_GRAPH_NODE_TYPE_MEMSET);
    check_params_eq(c1, &p1b);
    check_params_eq(c2, &p2b);
    check_params_eq(c3, &p3);
    check_params_eq(cz, &pz);
    ndeps = 4;
    CHECK_CU(cuGraphNodeGetDependencies(c3, deps, NULL, &ndeps));
    CHECK_EQ(ndeps, 2);
    CHECK_TRUE((deps[0] == c1 && deps[1] == c2) || (deps[0] == c2 && deps[1] == c1));
    /* Editing the clone leaves the original alone. */
    CUDA_MEMSET_NODE_PARAMS p3d = params(300000, 2, 2222, 1, 0, 0x0f0f);
    CHECK_CU(cuGraphMemsetNodeSetParams(c3, &p3d));
    check_params_eq(c3, &p3d);
    check_params_eq(m3, &p3);
    reset();
    memset_test_launch(clone, stream);
    expect(&p1b);
    expect(&p2b);
    expect(&p3d);
    check_buffer("clone");

    /* Whole-graph update of the first exec graph from the edited clone. */
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CHECK_CU(cuGraphExecUpdate(exec, clone, &info));
    CHECK_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
    reset();
    launch_exec(exec);
    expect(&p1b);
    expect(&p2b);
    expect(&p3d);
    check_buffer("exec update");

    /* ---- bad parameters get the driver's errors ------------------------------------ */
    CUgraphNode bad;
    CUDA_MEMSET_NODE_PARAMS q;
    q = params(0, 3, 10, 1, 0, 1); /* element size */
    CHECK_CU_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, &q, ctx), CUDA_ERROR_INVALID_VALUE);
    q = params(0, 1, 10, 1, 0, 1);
    q.dst = 0; /* NULL destination */
    CHECK_CU_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, &q, ctx), CUDA_ERROR_INVALID_VALUE);
    q = params(0, 4, 100, 2, 396, 1); /* pitch below a row */
    CHECK_CU_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, &q, ctx), CUDA_ERROR_INVALID_VALUE);
    q = params(2, 4, 100, 1, 0, 1); /* misaligned for 4-byte elements */
    CHECK_CU_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, &q, ctx), CUDA_ERROR_INVALID_VALUE);
    q = params(BUF_SIZE - 64, 1, 65, 1, 0, 1); /* one byte past the allocation */
    CHECK_CU_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, &q, ctx), CUDA_ERROR_INVALID_VALUE);
    q = params(0, 1, 64, 1, 0, 1);
    CHECK_CU_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, NULL, ctx), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU_EQ(cuGraphAddMemsetNode(NULL, g, NULL, 0, &q, ctx), CUDA_ERROR_INVALID_VALUE);
    q = params(0, 3, 10, 1, 0, 1);
    CHECK_CU_EQ(cuGraphMemsetNodeSetParams(m1, &q), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU_EQ(cuGraphMemsetNodeSetParams(m1, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU_EQ(cuGraphMemsetNodeSetParams(m1, &pz), CUDA_ERROR_INVALID_VALUE); /* to 0 bytes */
    CHECK_CU_EQ(cuGraphMemsetNodeSetParams(z, &p1), CUDA_ERROR_INVALID_VALUE);  /* from 0 bytes */
    CUgraphNodeParams wrong;
    memset(&wrong, 0, sizeof wrong);
    wrong.type = CU_GRAPH_NODE_TYPE_EMPTY; /* a memset node cannot change type */
    CHECK_CU_EQ(cuGraphNodeSetParams(m1, &wrong), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU_EQ(cuGraphExecNodeSetParams(exec, m1, &wrong), CUDA_ERROR_INVALID_VALUE);
    check_params_eq(m1, &p1b);
    check_params_eq(z, &pz);
    /* A 0-byte change of a 0-byte node is fine. */
    CHECK_CU(cuGraphMemsetNodeSetParams(z, &pz2));
    check_params_eq(z, &pz2);
    CHECK_EQ(memset_test_rewritten() - rewritten0, 4);

    /* ---- destruction: records go with their nodes and graphs -------------------------- */
    CUmodule module;
    CUfunction busy;
    CHECK_CU(cuModuleLoadData(&module, busy_ptx));
    CHECK_CU(cuModuleGetFunction(&busy, module, "sim_busy"));
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = busy;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    CHECK_CU(cuGraphDestroyNode(z));
    CHECK_CU(cuGraphDestroyNode(c3));
    CUgraph fresh;
    CHECK_CU(cuGraphCreate(&fresh, 0));
    for (int i = 0; i < 16; i++) {
        CUgraphNode k;
        CHECK_CU(cuGraphAddKernelNode(&k, fresh, NULL, 0, &kp));
        check_type(k, CU_GRAPH_NODE_TYPE_KERNEL);
        CHECK_CU_EQ(cuGraphMemsetNodeGetParams(k, &q), CUDA_ERROR_INVALID_VALUE);
    }
    CHECK_CU(cuGraphExecDestroy(exec));
    CHECK_CU(cuGraphExecDestroy(exec2));
    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuGraphDestroy(clone));
    for (int i = 0; i < 16; i++) {
        CUgraphNode k;
        CHECK_CU(cuGraphAddKernelNode(&k, fresh, NULL, 0, &kp));
        check_type(k, CU_GRAPH_NODE_TYPE_KERNEL);
        CUgraphNode e;
        CHECK_CU(cuGraphAddEmptyNode(&e, fresh, NULL, 0));
        check_type(e, CU_GRAPH_NODE_TYPE_EMPTY);
    }
    memset_test_launch(fresh, stream);
    CHECK_CU(cuGraphDestroy(fresh));
    CHECK_CU(cuModuleUnload(module));

    CHECK_CU(cuMemFree(buf));
    CHECK_CU(cuStreamDestroy(stream));
    free(host_expect);
    free(host_got);
    return 0;
}
