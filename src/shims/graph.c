/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Graph memset nodes (DESIGN.md, "Graph memsets").  CUDA 12.0/12.1 refused
 * cuGraphAddMemsetNode on stream-ordered memory made outside the graph, which
 * is what every pooled cudaMalloc is, and every driver refuses a 0-byte memset
 * node although the stream memsets accept 0 bytes.  Under CUPOOL_MEMSET=auto
 * each device is probed once, at first need, with a memset node on a pool
 * block in a scratch graph; where the driver refuses it, memset nodes on
 * stream-ordered memory become kernel nodes running cupool's fill kernels
 * (src/shims/fill_kernel.cu, shipped as PTX in src/shims/fill_ptx.h, loaded
 * once per context).  `kernel` rewrites every memset node, `native` none;
 * under both `auto` and `kernel` a 0-byte memset node becomes an empty node.
 *
 * A rewritten node must still look like a memset to the program: one table
 * (uthash, one mutex) maps each rewritten CUgraphNode to the program's
 * parameters, and every entry point that can see a memset node consults it:
 * the Add calls, Get/SetParams in all their forms, the exec-graph SetParams
 * calls, cuGraphNodeGetType, cuGraphClone (the clone's copies are registered
 * too) and node and graph destruction.  Edits a rewritten node cannot take
 * (0-byte <-> non-empty, another node type or another context) answer
 * CUDA_ERROR_INVALID_VALUE, as the driver answers an invalid change.
 */
#include "../engine/engine.h"
#include "fill_ptx.h"
#include "graph.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
/* Out of host memory uthash leaves a record out rather than exit(). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#define FILL_DEFAULT_SMS 132 /* H200, when the driver cannot say */

enum { NODE_KERNEL = 1, NODE_EMPTY };
enum { PROBE_UNKNOWN, PROBE_ACCEPTS, PROBE_REJECTS };

/* ---- the fill kernels, per context ---------------------------------------- */

typedef struct fill_module {
    CUcontext ctx;
    unsigned long long ctx_id; /* cuCtxGetId: tells this context from a later one at the same address */
    int device;
    unsigned max_blocks;
    int state; /* 0 not loaded yet, 1 loaded, -1 failed */
    CUmodule module;
    CUfunction fn[3]; /* element size 1, 2, 4 */
    struct fill_module *next;
} fill_module_t;

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static fill_module_t *modules;

static unsigned long long context_id(CUcontext ctx)
{
    unsigned long long id = 0;
    if (real_cuCtxGetId) real_cuCtxGetId(ctx, &id);
    return id;
}

/* Device and SM count of ctx (which the caller has made current). */
static void describe(fill_module_t *m)
{
    CUdevice device = -1;
    int sms = 0;
    if (real_cuCtxGetDevice(&device) != CUDA_SUCCESS) device = -1;
    if (device < 0 || real_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) != CUDA_SUCCESS ||
        sms <= 0)
        sms = FILL_DEFAULT_SMS;
    m->device = device;
    m->max_blocks = (unsigned)sms * CUPOOL_FILL_BLOCKS_PER_SM;
}

/* cupool's record of a context, made on first use; NULL without memory. */
static fill_module_t *module_of(CUcontext ctx)
{
    unsigned long long id = context_id(ctx);
    pthread_mutex_lock(&modules_lock);
    fill_module_t *m = modules;
    while (m && m->ctx != ctx) m = m->next;
    if (m && m->ctx_id != id) {
        /* A destroyed context's address came back: its module died with it. */
        m->state = 0;
        m->module = NULL;
        m->ctx_id = id;
        int pushed = cupool_enter_context(ctx);
        describe(m);
        cupool_leave_context(pushed);
    }
    if (!m && (m = calloc(1, sizeof *m))) {
        m->ctx = ctx;
        m->ctx_id = id;
        int pushed = cupool_enter_context(ctx);
        describe(m);
        cupool_leave_context(pushed);
        m->next = modules;
        modules = m;
    }
    pthread_mutex_unlock(&modules_lock);
    return m;
}

/* Loads the PTX into m's context once; false when the kernels are unusable. */
static int kernels_ready(fill_module_t *m)
{
    static const char *const names[3] = {"cupool_fill_u8", "cupool_fill_u16", "cupool_fill_u32"};
    pthread_mutex_lock(&modules_lock);
    if (m->state == 0) {
        int pushed = cupool_enter_context(m->ctx);
        CUstreamCaptureMode previous = cupool_relaxed_begin();
        CUresult r = real_cuModuleLoadData(&m->module, cupool_fill_ptx);
        for (int i = 0; i < 3 && r == CUDA_SUCCESS; i++) r = real_cuModuleGetFunction(&m->fn[i], m->module, names[i]);
        cupool_relaxed_end(previous);
        cupool_leave_context(pushed);
        m->state = r == CUDA_SUCCESS ? 1 : -1;
        if (r != CUDA_SUCCESS)
            cupool_message(CUPOOL_MSG_WARN,
                           "cannot load the fill kernels in context %p (%s); graph memset nodes stay native there",
                           (void *)m->ctx, cupool_result_name(r));
    }
    int ready = m->state == 1;
    pthread_mutex_unlock(&modules_lock);
    return ready;
}

static CUfunction fill_function(const fill_module_t *m, unsigned element_size)
{
    return m->fn[element_size == 1 ? 0 : element_size == 2 ? 1 : 2];
}

/* ---- the probe (CUPOOL_MEMSET=auto) ---------------------------------------- */

static atomic_int probe_state[CUPOOL_MAX_DEVICES];
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* Asks the driver once whether it takes a memset node on a pool block: a
 * 256-byte block of the device's default pool, made on a private stream. */
static int probe(const fill_module_t *m)
{
    int supported = 0;
    CUmemoryPool pool;
    if (real_cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, m->device) != CUDA_SUCCESS ||
        !supported || !real_cuMemAllocFromPoolAsync || real_cuDeviceGetDefaultMemPool(&pool, m->device) != CUDA_SUCCESS)
        return PROBE_ACCEPTS; /* no stream-ordered memory here to begin with */
    int pushed = cupool_enter_context(m->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUstream stream = NULL;
    CUgraph graph = NULL;
    CUgraphNode node;
    CUdeviceptr block = 0;
    CUresult r = real_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS) r = real_cuMemAllocFromPoolAsync(&block, 256, pool, stream);
    if (r == CUDA_SUCCESS) r = real_cuStreamSynchronize(stream);
    int state = PROBE_ACCEPTS;
    if (r == CUDA_SUCCESS && (r = real_cuGraphCreate(&graph, 0)) == CUDA_SUCCESS) {
        CUDA_MEMSET_NODE_PARAMS p = {.dst = block, .pitch = 256, .value = 0, .elementSize = 1, .width = 256, .height = 1};
        CUresult added = real_cuGraphAddMemsetNode(&node, graph, NULL, 0, &p, m->ctx);
        state = added == CUDA_SUCCESS ? PROBE_ACCEPTS : PROBE_REJECTS;
        cupool_message(CUPOOL_MSG_INFO, "device %d: the driver %s graph memset nodes on stream-ordered memory (%s)",
                       m->device, state == PROBE_ACCEPTS ? "accepts" : "rejects", cupool_result_name(added));
        real_cuGraphDestroy(graph);
    } else {
        cupool_message(CUPOOL_MSG_WARN, "device %d: cannot probe graph memset nodes (%s); leaving them native",
                       m->device, cupool_result_name(r));
    }
    if (block) real_cuMemFreeAsync(block, stream);
    if (stream) {
        real_cuStreamSynchronize(stream);
        real_cuStreamDestroy_v2(stream);
    }
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
    return state;
}

static int driver_rejects(const fill_module_t *m)
{
    if (m->device < 0 || m->device >= CUPOOL_MAX_DEVICES) return 0;
    int state = atomic_load_explicit(&probe_state[m->device], memory_order_acquire);
    if (CUPOOL_LIKELY(state != PROBE_UNKNOWN)) return state == PROBE_REJECTS;
    pthread_mutex_lock(&probe_lock);
    state = atomic_load(&probe_state[m->device]);
    if (state == PROBE_UNKNOWN) {
        state = probe(m);
        atomic_store_explicit(&probe_state[m->device], state, memory_order_release);
    }
    pthread_mutex_unlock(&probe_lock);
    return state == PROBE_REJECTS;
}

/* Stream-ordered memory: a block of cupool's (the origin table knows block
 * starts) or any pointer into any pool, cupool's or the program's own. */
static int stream_ordered(CUdeviceptr dst)
{
    cupool_origin_t o;
    if (cupool_origin_find(dst, &o) == 0) return 1;
    CUmemoryPool pool = NULL;
    return real_cuPointerGetAttribute &&
           real_cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, dst) == CUDA_SUCCESS && pool;
}

/* ---- the table of rewritten nodes ------------------------------------------ */

typedef struct rewritten {
    CUgraphNode node; /* key */
    CUgraph graph;
    CUDA_MEMSET_NODE_PARAMS params; /* what the program set, returned by GetParams */
    CUcontext ctx;
    fill_module_t *module;
    int kind; /* NODE_KERNEL / NODE_EMPTY */
    UT_hash_handle hh;
} rewritten_t;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static rewritten_t *table;
static atomic_size_t records; /* lets the common case (nothing rewritten) skip the lock */

/* Copies the record of node into *out; false when node was not rewritten. */
static int find_record(CUgraphNode node, rewritten_t *out)
{
    if (!node || atomic_load_explicit(&records, memory_order_acquire) == 0) return 0;
    pthread_mutex_lock(&table_lock);
    rewritten_t *r;
    HASH_FIND_PTR(table, &node, r);
    if (r) *out = *r;
    pthread_mutex_unlock(&table_lock);
    return r != NULL;
}

/* Called with table_lock held. */
static void insert_locked(const rewritten_t *rec)
{
    rewritten_t *r, *old;
    HASH_FIND_PTR(table, &rec->node, old);
    if (old) {
        /* A node cupool never saw destroyed (a path outside these shims). */
        HASH_DEL(table, old);
        free(old);
        atomic_fetch_sub(&records, 1);
    }
    if ((r = malloc(sizeof *r))) {
        *r = *rec;
        HASH_ADD_PTR(table, node, r);
        if (r->hh.tbl) {
            atomic_fetch_add(&records, 1);
            return;
        }
        free(r); /* uthash had no memory for its table */
    }
    cupool_message_once(CUPOOL_MSG_WARN, "out of host memory for the table of rewritten memset nodes");
}

static void insert_record(const rewritten_t *rec)
{
    pthread_mutex_lock(&table_lock);
    insert_locked(rec);
    pthread_mutex_unlock(&table_lock);
}

/* ---- parameters -------------------------------------------------------------- */

/* Checks memset parameters the way the driver checks a memset node (element
 * size 1, 2 or 4; a non-NULL destination aligned to it; a pitch holding a row
 * and aligned too when there are several rows; the whole fill inside one
 * allocation), so bad input gets the driver's answer rather than a kernel
 * fault later.  A 0-byte fill is accepted as the stream memsets accept it:
 * *empty says so. */
static CUresult check_params(const CUDA_MEMSET_NODE_PARAMS *p, int *empty, size_t *extent)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    unsigned es = p->elementSize;
    if (es != 1 && es != 2 && es != 4) return CUDA_ERROR_INVALID_VALUE;
    *empty = p->width == 0 || p->height == 0;
    *extent = 0;
    if (*empty) return CUDA_SUCCESS;
    if (!p->dst || p->dst % es) return CUDA_ERROR_INVALID_VALUE;
    if (p->width > SIZE_MAX / es) return CUDA_ERROR_INVALID_VALUE;
    size_t row = p->width * es;
    if (p->height > 1) {
        if (p->pitch < row || p->pitch % es) return CUDA_ERROR_INVALID_VALUE;
        if (p->height - 1 > (SIZE_MAX - row) / p->pitch) return CUDA_ERROR_INVALID_VALUE;
    }
    *extent = (p->height - 1) * (p->height > 1 ? p->pitch : 0) + row;
    CUdeviceptr start = 0;
    size_t size = 0;
    if (real_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p->dst) != CUDA_SUCCESS ||
        real_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p->dst) != CUDA_SUCCESS || !start ||
        p->dst < start || p->dst - start > size || *extent > size - (p->dst - start))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Kernel-node parameters for a fill.  kernelParams may point at the stack:
 * the driver copies the values when it takes the parameters (cuda.h: each
 * pointer "points to the region of memory from which the actual parameter
 * will be copied"). */
typedef struct fill_launch {
    unsigned long long dst, pitch, width, height;
    unsigned int value;
    void *args[5];
    CUDA_KERNEL_NODE_PARAMS kp;
} fill_launch_t;

static void fill_params(fill_launch_t *l, const fill_module_t *m, CUcontext ctx, const CUDA_MEMSET_NODE_PARAMS *p)
{
    cupool_fill_shape_t shape = cupool_fill_geometry(p->width, p->height, p->elementSize, m->max_blocks);
    size_t row = p->width * p->elementSize;
    l->dst = p->dst;
    l->pitch = p->height > 1 ? p->pitch : row;
    l->width = p->width;
    l->height = p->height;
    l->value = p->value;
    l->args[0] = &l->dst;
    l->args[1] = &l->pitch;
    l->args[2] = &l->width;
    l->args[3] = &l->height;
    l->args[4] = &l->value;
    memset(&l->kp, 0, sizeof l->kp);
    l->kp.func = fill_function(m, p->elementSize);
    l->kp.gridDimX = shape.grid[0];
    l->kp.gridDimY = shape.grid[1];
    l->kp.gridDimZ = 1;
    l->kp.blockDimX = shape.block[0];
    l->kp.blockDimY = shape.block[1];
    l->kp.blockDimZ = 1;
    l->kp.kernelParams = l->args;
    l->kp.ctx = ctx;
}

/* ---- adding memset nodes ------------------------------------------------------- */

enum { VIA_MEMSET, VIA_NODE, VIA_NODE_V2 };

typedef struct add_request {
    int via;                      /* which entry point the program called */
    CUgraphNode *out;
    CUgraph graph;
    const CUgraphNode *deps;
    const CUgraphEdgeData *edges; /* cuGraphAddNode_v2 only */
    size_t ndeps;
} add_request_t;

/* Adds the replacement node through the program's own entry point, with its
 * dependencies (and edge data) unchanged. */
static CUresult add_replacement(const add_request_t *rq, int kind, const fill_launch_t *l)
{
    CUresult r;
    if (rq->via == VIA_MEMSET) {
        if (kind == NODE_KERNEL) r = real_cuGraphAddKernelNode_v2(rq->out, rq->graph, rq->deps, rq->ndeps, &l->kp);
        else r = real_cuGraphAddEmptyNode(rq->out, rq->graph, rq->deps, rq->ndeps);
        return r;
    }
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = kind == NODE_KERNEL ? CU_GRAPH_NODE_TYPE_KERNEL : CU_GRAPH_NODE_TYPE_EMPTY;
    if (kind == NODE_KERNEL) memcpy(&np.kernel, &l->kp, sizeof l->kp); /* v3 has v2's layout */
    if (rq->via == VIA_NODE) r = real_cuGraphAddNode(rq->out, rq->graph, rq->deps, rq->ndeps, &np);
    else r = real_cuGraphAddNode_v2(rq->out, rq->graph, rq->deps, rq->edges, rq->ndeps, &np);
    return r;
}

/* Rewrites a memset node if the mode says so.  Returns 1 with *result set
 * when it handled the call (rewritten, or bad input answered as the driver
 * answers it), 0 when the node must go to the driver unchanged. */
static int try_rewrite(const add_request_t *rq, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx, cupool_call_t *call,
                       CUresult *result)
{
    int mode = (int)cupool_option(CUPOOL_OPT_MEMSET);
    if (mode == CUPOOL_MEMSET_NATIVE || !cupool_active() || !p || !rq->out) return 0;
    if (!ctx && real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) return 0;
    fill_module_t *m = ctx ? module_of(ctx) : NULL;
    if (!m) return 0;
    call->device = m->device;
    call->ptr = p->dst;

    /* auto: a non-empty fill is ours only on stream-ordered memory of a
     * driver that refuses it (the probe runs here, at first need). */
    int empty = p->width == 0 || p->height == 0;
    if (mode == CUPOOL_MEMSET_AUTO && !empty && !(p->dst && driver_rejects(m) && stream_ordered(p->dst))) return 0;
    size_t extent;
    CUresult r = check_params(p, &empty, &extent);
    if (r != CUDA_SUCCESS) {
        *result = r;
        return 1;
    }
    call->size = extent;
    int kind = empty ? NODE_EMPTY : NODE_KERNEL;
    if (kind == NODE_KERNEL && !kernels_ready(m)) return 0;

    fill_launch_t l = {0};
    if (kind == NODE_KERNEL) fill_params(&l, m, ctx, p);
    r = add_replacement(rq, kind, &l);
    if (r == CUDA_SUCCESS) {
        rewritten_t rec = {.node = *rq->out, .graph = rq->graph, .params = *p, .ctx = ctx, .module = m, .kind = kind};
        insert_record(&rec);
        atomic_fetch_add_explicit(&cupool_stats_for(m->device)->rewritten_memsets, 1, memory_order_relaxed);
        call->route = CUPOOL_ROUTE_REWRITTEN;
        cupool_message_once(CUPOOL_MSG_INFO, "rewriting graph memset nodes the driver would refuse (CUPOOL_MEMSET=%s)",
                            cupool_option_string(CUPOOL_OPT_MEMSET));
    }
    *result = r;
    return 1;
}

static CUDA_MEMSET_NODE_PARAMS memset_v1(const CUDA_MEMSET_NODE_PARAMS_v2 *m)
{
    CUDA_MEMSET_NODE_PARAMS p = {m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
    return p;
}

CUPOOL_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                            CUcontext ctx)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphAddMemsetNode);
    add_request_t rq = {VIA_MEMSET, phGraphNode, hGraph, dependencies, NULL, numDependencies};
    CUresult r;
    if (try_rewrite(&rq, memsetParams, ctx, &call, &r)) return cupool_call_end(&call, r);
    r = real_cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies, memsetParams, ctx);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphAddNode);
    CUresult r;
    if (nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        add_request_t rq = {VIA_NODE, phGraphNode, hGraph, dependencies, NULL, numDependencies};
        CUDA_MEMSET_NODE_PARAMS p = memset_v1(&nodeParams->memset);
        if (try_rewrite(&rq, &p, nodeParams->memset.ctx, &call, &r)) return cupool_call_end(&call, r);
    }
    r = real_cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                         CUgraphNodeParams *nodeParams)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphAddNode_v2);
    CUresult r;
    if (nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        add_request_t rq = {VIA_NODE_V2, phGraphNode, hGraph, dependencies, dependencyData, numDependencies};
        CUDA_MEMSET_NODE_PARAMS p = memset_v1(&nodeParams->memset);
        if (try_rewrite(&rq, &p, nodeParams->memset.ctx, &call, &r)) return cupool_call_end(&call, r);
    }
    r = real_cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams);
    return cupool_call_end(&call, r);
}

/* ---- parameters of rewritten nodes ------------------------------------------------ */

/* New memset parameters for a rewritten node: of the graph node (exec NULL)
 * or of its instance in an exec graph.  A kernel node takes any non-empty
 * fill (the element size picks the function), an empty node only 0-byte
 * ones; the other changes would need a node of another type, which the
 * program's handle cannot become, so they answer CUDA_ERROR_INVALID_VALUE as
 * the driver answers a memset node set to 0 bytes. */
static CUresult set_rewritten(const rewritten_t *rec, const CUDA_MEMSET_NODE_PARAMS *p, CUgraphExec exec,
                              cupool_call_t *call)
{
    int empty;
    size_t extent;
    call->route = CUPOOL_ROUTE_REWRITTEN;
    call->device = rec->module ? rec->module->device : -1;
    CUresult r = check_params(p, &empty, &extent);
    if (r != CUDA_SUCCESS) return r;
    call->ptr = p->dst;
    call->size = extent;
    if (empty != (rec->kind == NODE_EMPTY)) return CUDA_ERROR_INVALID_VALUE;
    if (!empty) {
        fill_launch_t l;
        fill_params(&l, rec->module, rec->ctx, p);
        if (exec) r = real_cuGraphExecKernelNodeSetParams_v2(exec, rec->node, &l.kp);
        else r = real_cuGraphKernelNodeSetParams_v2(rec->node, &l.kp);
    }
    if (r == CUDA_SUCCESS && !exec) {
        pthread_mutex_lock(&table_lock);
        rewritten_t *live;
        HASH_FIND_PTR(table, &rec->node, live);
        if (live) live->params = *p;
        pthread_mutex_unlock(&table_lock);
    }
    return r;
}

/* The generic CUgraphNodeParams form: a rewritten node stays a memset node
 * in its context. */
static CUresult set_rewritten_generic(const rewritten_t *rec, const CUgraphNodeParams *np, CUgraphExec exec,
                                      cupool_call_t *call)
{
    call->route = CUPOOL_ROUTE_REWRITTEN;
    if (!np || np->type != CU_GRAPH_NODE_TYPE_MEMSET) return CUDA_ERROR_INVALID_VALUE;
    if (np->memset.ctx && np->memset.ctx != rec->ctx) return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMSET_NODE_PARAMS p = memset_v1(&np->memset);
    return set_rewritten(rec, &p, exec, call);
}

CUPOOL_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphMemsetNodeGetParams);
    rewritten_t rec;
    if (find_record(hNode, &rec)) {
        call.route = CUPOOL_ROUTE_REWRITTEN;
        if (!nodeParams) return cupool_call_end(&call, CUDA_ERROR_INVALID_VALUE);
        *nodeParams = rec.params;
        return cupool_call_end(&call, CUDA_SUCCESS);
    }
    CUresult r;
    r = real_cuGraphMemsetNodeGetParams(hNode, nodeParams);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphMemsetNodeSetParams);
    rewritten_t rec;
    if (find_record(hNode, &rec)) return cupool_call_end(&call, set_rewritten(&rec, nodeParams, NULL, &call));
    CUresult r;
    r = real_cuGraphMemsetNodeSetParams(hNode, nodeParams);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                      const CUDA_MEMSET_NODE_PARAMS *nodeParams, CUcontext ctx)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphExecMemsetNodeSetParams);
    rewritten_t rec;
    /* No executable graph: the driver's own error (set_rewritten would take
     * NULL for the graph's node and change that). */
    if (hGraphExec && find_record(hNode, &rec)) {
        /* A kernel cannot move to another context, nor can a memset node. */
        if (ctx && ctx != rec.ctx) {
            call.route = CUPOOL_ROUTE_REWRITTEN;
            return cupool_call_end(&call, CUDA_ERROR_INVALID_VALUE);
        }
        return cupool_call_end(&call, set_rewritten(&rec, nodeParams, hGraphExec, &call));
    }
    CUresult r;
    r = real_cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, nodeParams, ctx);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphNodeSetParams);
    rewritten_t rec;
    if (find_record(hNode, &rec)) return cupool_call_end(&call, set_rewritten_generic(&rec, nodeParams, NULL, &call));
    CUresult r;
    r = real_cuGraphNodeSetParams(hNode, nodeParams);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                CUgraphNodeParams *nodeParams)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphExecNodeSetParams);
    rewritten_t rec;
    if (hGraphExec && find_record(hNode, &rec)) /* as cuGraphExecMemsetNodeSetParams */
        return cupool_call_end(&call, set_rewritten_generic(&rec, nodeParams, hGraphExec, &call));
    CUresult r;
    r = real_cuGraphExecNodeSetParams(hGraphExec, hNode, nodeParams);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphNodeGetType);
    rewritten_t rec;
    if (type && find_record(hNode, &rec)) {
        call.route = CUPOOL_ROUTE_REWRITTEN;
        *type = CU_GRAPH_NODE_TYPE_MEMSET;
        return cupool_call_end(&call, CUDA_SUCCESS);
    }
    CUresult r;
    r = real_cuGraphNodeGetType(hNode, type);
    return cupool_call_end(&call, r);
}

/* ---- clones and destruction ----------------------------------------------------- */

/* Registers the clone's copy of every rewritten node of the original. */
static void register_clone(CUgraph original, CUgraph clone)
{
    pthread_mutex_lock(&table_lock);
    rewritten_t *rec, *tmp, *found = NULL;
    size_t nfound = 0, cap = 0;
    HASH_ITER(hh, table, rec, tmp) {
        if (rec->graph != original) continue;
        CUgraphNode copy = NULL;
        CUresult r;
        r = real_cuGraphNodeFindInClone(&copy, rec->node, clone);
        if (r != CUDA_SUCCESS || !copy) {
            cupool_message(CUPOOL_MSG_WARN, "cannot find rewritten memset node %p in clone %p (%s)",
                           (void *)rec->node, (void *)clone, cupool_result_name(r));
            continue;
        }
        if (nfound == cap) {
            size_t grown_cap = cap ? 2 * cap : 16;
            rewritten_t *grown = realloc(found, grown_cap * sizeof *grown);
            if (!grown) break;
            found = grown;
            cap = grown_cap;
        }
        found[nfound] = *rec;
        found[nfound].node = copy;
        found[nfound].graph = clone;
        nfound++;
    }
    /* Inserted after the walk: adding while iterating may reorder the table. */
    for (size_t i = 0; i < nfound; i++) insert_locked(&found[i]);
    pthread_mutex_unlock(&table_lock);
    free(found);
}

CUPOOL_EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphClone);
    CUresult r;
    r = real_cuGraphClone(phGraphClone, originalGraph);
    if (r == CUDA_SUCCESS && atomic_load(&records)) register_clone(originalGraph, *phGraphClone);
    return cupool_call_end(&call, r);
}

/* The table lock is held across the driver call so that a node made at the
 * same address by another thread right after cannot lose its record. */
CUPOOL_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphDestroyNode);
    CUresult r;
    if (!atomic_load(&records)) {
        r = real_cuGraphDestroyNode(hNode);
        return cupool_call_end(&call, r);
    }
    pthread_mutex_lock(&table_lock);
    r = real_cuGraphDestroyNode(hNode);
    rewritten_t *rec;
    HASH_FIND_PTR(table, &hNode, rec);
    if (r == CUDA_SUCCESS && rec) {
        HASH_DEL(table, rec);
        free(rec);
        atomic_fetch_sub(&records, 1);
        call.route = CUPOOL_ROUTE_REWRITTEN;
    }
    pthread_mutex_unlock(&table_lock);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUPOOL_SHIM_BEGIN(call, cuGraphDestroy);
    CUresult r;
    if (!atomic_load(&records)) {
        r = real_cuGraphDestroy(hGraph);
        return cupool_call_end(&call, r);
    }
    pthread_mutex_lock(&table_lock);
    r = real_cuGraphDestroy(hGraph);
    if (r == CUDA_SUCCESS) {
        rewritten_t *rec, *tmp;
        HASH_ITER(hh, table, rec, tmp) {
            if (rec->graph != hGraph) continue;
            HASH_DEL(table, rec);
            free(rec);
            atomic_fetch_sub(&records, 1);
        }
    }
    pthread_mutex_unlock(&table_lock);
    return cupool_call_end(&call, r);
}
