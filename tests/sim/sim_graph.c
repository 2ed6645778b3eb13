/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Graphs of the simulated CUDA driver: creating and destroying graphs and
 * nodes, the memset, kernel and empty node types (memcpy nodes come only from
 * stream capture), their parameters through every API that can see them
 * (the typed Add/Get/SetParams calls, the generic cuGraphAddNode(_v2) and
 * cuGraphNodeSetParams), dependencies and edges, and cloning.  Memset nodes are
 * validated as measured on the real driver (width 0 is refused) and, with
 * SIMCUDA_MEMSET_BUG=1, reproduce the CUDA 12.0/12.1 refusal of stream-ordered
 * destinations.  Instantiation and launch live in sim_graph_exec.c.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* ---- node parameters --------------------------------------------------------- */

CUresult sim_node_params_copy(sim_node_params *dst, const sim_node_params *src)
{
    *dst = *src;
    if (src->type == CU_GRAPH_NODE_TYPE_KERNEL) return sim_kernel_params_copy(&dst->u.kernel, &src->u.kernel);
    return CUDA_SUCCESS;
}

void sim_node_params_free(sim_node_params *p)
{
    if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) sim_kernel_params_free(&p->u.kernel);
}

const char *sim_node_params_name(const sim_node_params *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return sim_handle_is(p->u.kernel.func, SIM_KIND_FUNCTION) ? p->u.kernel.func->name : "kernel";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
    default: return "empty node";
    }
}

CUresult sim_node_params_run(const sim_node_params *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return sim_kernel_run(&p->u.kernel);
    case CU_GRAPH_NODE_TYPE_MEMSET: return sim_memset_run(&p->u.memset);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return sim_memcpy_run(&p->u.memcpy);
    default: return CUDA_SUCCESS;
    }
}

/* A context argument of a node: NULL means the current one. */
static CUresult node_ctx(CUcontext given, CUcontext *out)
{
    if (!given) return sim_current_ctx(out);
    SIM_CHECK(sim_ctx_check(given));
    *out = given;
    return CUDA_SUCCESS;
}

static CUresult memset_from_api(sim_node_params *out, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    out->type = CU_GRAPH_NODE_TYPE_MEMSET;
    out->u.memset = (sim_memset_params){ p->dst, p->pitch, p->value, p->elementSize, p->width, p->height, NULL };
    SIM_CHECK(node_ctx(ctx, &out->u.memset.ctx));
    return sim_memset_validate(&out->u.memset, true);
}

static CUresult kernel_from_api(sim_node_params *out, const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = p->func ? p->func : sim_function_from_kernel(p->kern);
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = p->ctx;
    if (!ctx && sim_handle_is(f, SIM_KIND_FUNCTION)) ctx = f->module->ctx;
    const unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
    const unsigned block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
    out->type = CU_GRAPH_NODE_TYPE_KERNEL;
    CUresult rc = sim_kernel_params_init(&out->u.kernel, f, ctx, grid, block, p->sharedMemBytes, p->kernelParams,
                                         p->extra);
    return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
}

static CUDA_KERNEL_NODE_PARAMS kernel_v1_to_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2 = { 0 };
    memcpy(&v2, p, sizeof *p); /* v1 is a prefix of v2 */
    return v2;
}

/* The generic CUgraphNodeParams form, for the node types the simulator knows. */
static CUresult params_from_generic(sim_node_params *out, const CUgraphNodeParams *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS v1 = { m->dst, m->pitch, m->value, m->elementSize, m->width, m->height };
        return memset_from_api(out, &v1, m->ctx);
    }
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k;
        memcpy(&k, &p->kernel, sizeof k); /* v3 has v2's layout */
        return kernel_from_api(out, &k);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY: out->type = CU_GRAPH_NODE_TYPE_EMPTY; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ---- graphs and nodes ---------------------------------------------------------- */

CUresult sim_graph_new(CUgraph *out)
{
    CUgraph g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->id = sim_next_id();
    sim_handle_add(g, SIM_KIND_GRAPH);
    *out = g;
    return CUDA_SUCCESS;
}

static void node_destroy(CUgraphNode n)
{
    for (size_t i = 0; i < n->deps.len; i++) sim_vec_remove(&((CUgraphNode)n->deps.items[i])->dependents, n);
    for (size_t i = 0; i < n->dependents.len; i++) sim_vec_remove(&((CUgraphNode)n->dependents.items[i])->deps, n);
    sim_vec_remove(&n->graph->nodes, n);
    sim_vec_free(&n->deps);
    sim_vec_free(&n->dependents);
    sim_node_params_free(&n->params);
    sim_handle_remove(n);
    free(n);
}

void sim_graph_destroy_obj(CUgraph g)
{
    if (!g) return;
    while (g->nodes.len) node_destroy(g->nodes.items[g->nodes.len - 1]);
    sim_vec_free(&g->nodes);
    sim_handle_remove(g);
    free(g);
}

static bool node_in(CUgraphNode n, CUgraph g)
{
    return sim_handle_is(n, SIM_KIND_NODE) && n->graph == g;
}

static bool add_edge(CUgraphNode from, CUgraphNode to)
{
    if (!sim_vec_push(&to->deps, from)) return false;
    if (sim_vec_push(&from->dependents, to)) return true;
    sim_vec_remove(&to->deps, from);
    return false;
}

CUresult sim_graph_add(CUgraph g, const CUgraphNode *deps, size_t ndeps, sim_node_params *params, CUgraphNode *out)
{
    CUresult rc = CUDA_SUCCESS;
    if (!sim_handle_is(g, SIM_KIND_GRAPH) || (ndeps && !deps)) rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < ndeps; i++) {
        if (!node_in(deps[i], g)) rc = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i]) rc = CUDA_ERROR_INVALID_VALUE;
    }
    CUgraphNode n = rc == CUDA_SUCCESS ? calloc(1, sizeof *n) : NULL;
    if (rc == CUDA_SUCCESS && (!n || !sim_vec_push(&g->nodes, n))) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        free(n);
        sim_node_params_free(params);
        return rc;
    }
    n->graph = g;
    n->params = *params;
    sim_handle_add(n, SIM_KIND_NODE);
    for (size_t i = 0; i < ndeps; i++) {
        if (!add_edge(deps[i], n)) {
            node_destroy(n);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    *out = n;
    return CUDA_SUCCESS;
}

/* Common tail of the typed Add*Node calls: params already converted (or not). */
static CUresult add_converted(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              sim_node_params *params, CUresult conversion)
{
    if (!out) conversion = CUDA_ERROR_INVALID_VALUE;
    if (conversion != CUDA_SUCCESS) {
        sim_node_params_free(params);
        return conversion;
    }
    return sim_graph_add(g, deps, ndeps, params, out);
}

SIM_API CUresult CUDAAPI cuGraphCreate(CUgraph *out, unsigned int flags)
{
    SIM_BEGIN;
    if (!out || flags) return CUDA_ERROR_INVALID_VALUE;
    return sim_graph_new(out);
}

SIM_API CUresult CUDAAPI cuGraphDestroy(CUgraph g)
{
    SIM_BEGIN;
    if (!sim_handle_is(g, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    sim_graph_destroy_obj(g);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                              const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    SIM_BEGIN;
    sim_node_params params = { 0 };
    CUresult rc = memset_from_api(&params, p, ctx);
    return add_converted(out, g, deps, ndeps, &params, rc);
}

SIM_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                                 const CUDA_KERNEL_NODE_PARAMS *p)
{
    SIM_BEGIN;
    sim_node_params params = { 0 };
    CUresult rc = kernel_from_api(&params, p);
    return add_converted(out, g, deps, ndeps, &params, rc);
}

SIM_API CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                              const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2 = kernel_v1_to_v2(p);
    return cuGraphAddKernelNode_v2(out, g, deps, ndeps, &v2);
}

SIM_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps)
{
    SIM_BEGIN;
    sim_node_params params = { .type = CU_GRAPH_NODE_TYPE_EMPTY };
    return add_converted(out, g, deps, ndeps, &params, CUDA_SUCCESS);
}

SIM_API CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                           const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
    SIM_BEGIN;
    (void)edges; /* only default edges are modelled */
    sim_node_params params = { 0 };
    CUresult rc = params_from_generic(&params, p);
    return add_converted(out, g, deps, ndeps, &params, rc);
}

SIM_API CUresult CUDAAPI cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                        CUgraphNodeParams *p)
{
    return cuGraphAddNode_v2(out, g, deps, NULL, ndeps, p);
}

/* Looks a node up and checks its type. */
static CUresult typed_node(CUgraphNode n, CUgraphNodeType type)
{
    if (!sim_handle_is(n, SIM_KIND_NODE)) return CUDA_ERROR_INVALID_VALUE;
    return n->params.type == type ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Replaces a node's parameters with converted ones of the same type. */
static CUresult replace_params(CUgraphNode n, sim_node_params *params, CUresult conversion)
{
    if (conversion == CUDA_SUCCESS) conversion = typed_node(n, params->type);
    if (conversion != CUDA_SUCCESS) {
        sim_node_params_free(params);
        return conversion;
    }
    sim_node_params_free(&n->params);
    n->params = *params;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType *type)
{
    SIM_BEGIN;
    if (!type || !sim_handle_is(n, SIM_KIND_NODE)) return CUDA_ERROR_INVALID_VALUE;
    *type = n->params.type;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode n, CUDA_MEMSET_NODE_PARAMS *p)
{
    SIM_BEGIN;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(typed_node(n, CU_GRAPH_NODE_TYPE_MEMSET));
    const sim_memset_params *m = &n->params.u.memset;
    *p = (CUDA_MEMSET_NODE_PARAMS){ m->dst, m->pitch, m->value, m->element_size, m->width, m->height };
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p)
{
    SIM_BEGIN;
    SIM_CHECK(typed_node(n, CU_GRAPH_NODE_TYPE_MEMSET));
    sim_node_params params = { 0 };
    CUresult rc = memset_from_api(&params, p, n->params.u.memset.ctx);
    return replace_params(n, &params, rc);
}

SIM_API CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS *p)
{
    SIM_BEGIN;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(typed_node(n, CU_GRAPH_NODE_TYPE_KERNEL));
    const sim_kernel_params *k = &n->params.u.kernel;
    *p = (CUDA_KERNEL_NODE_PARAMS){ .func = k->func,
                                    .gridDimX = k->grid[0], .gridDimY = k->grid[1], .gridDimZ = k->grid[2],
                                    .blockDimX = k->block[0], .blockDimY = k->block[1], .blockDimZ = k->block[2],
                                    .sharedMemBytes = k->shared_mem, .kernelParams = k->param_ptrs,
                                    .ctx = k->ctx };
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(cuGraphKernelNodeGetParams_v2(n, &v2));
    memcpy(p, &v2, sizeof *p);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    SIM_BEGIN;
    sim_node_params params = { 0 };
    CUresult rc = kernel_from_api(&params, p);
    return replace_params(n, &params, rc);
}

SIM_API CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2 = kernel_v1_to_v2(p);
    return cuGraphKernelNodeSetParams_v2(n, &v2);
}

SIM_API CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode n, CUgraphNodeParams *p)
{
    SIM_BEGIN;
    sim_node_params params = { 0 };
    CUresult rc = params_from_generic(&params, p);
    return replace_params(n, &params, rc);
}

SIM_API CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode n)
{
    SIM_BEGIN;
    if (!sim_handle_is(n, SIM_KIND_NODE)) return CUDA_ERROR_INVALID_VALUE;
    node_destroy(n);
    return CUDA_SUCCESS;
}

/* ---- listing nodes and edges ------------------------------------------------------- */

/* The driver's convention for "array or count" outputs: with no array, report
 * the count; otherwise fill up to *num entries, NULL the rest, report the count. */
static CUresult list_nodes(const sim_vec *v, bool roots_only, CUgraphNode *out, CUgraphEdgeData *edges, size_t *num)
{
    if (!num) return CUDA_ERROR_INVALID_VALUE;
    size_t count = 0;
    for (size_t i = 0; i < v->len; i++) {
        CUgraphNode n = v->items[i];
        if (roots_only && n->deps.len) continue;
        if (out && count < *num) out[count] = n;
        if (edges && count < *num) memset(&edges[count], 0, sizeof *edges);
        count++;
    }
    for (size_t i = count; out && i < *num; i++) out[i] = NULL;
    *num = count;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *num)
{
    SIM_BEGIN;
    if (!sim_handle_is(g, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    return list_nodes(&g->nodes, false, nodes, NULL, num);
}

SIM_API CUresult CUDAAPI cuGraphGetRootNodes(CUgraph g, CUgraphNode *nodes, size_t *num)
{
    SIM_BEGIN;
    if (!sim_handle_is(g, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    return list_nodes(&g->nodes, true, nodes, NULL, num);
}

SIM_API CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode n, CUgraphNode *deps, CUgraphEdgeData *edges,
                                                       size_t *num)
{
    SIM_BEGIN;
    if (!sim_handle_is(n, SIM_KIND_NODE)) return CUDA_ERROR_INVALID_VALUE;
    return list_nodes(&n->deps, false, deps, edges, num);
}

SIM_API CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode n, CUgraphNode *deps, size_t *num)
{
    return cuGraphNodeGetDependencies_v2(n, deps, NULL, num);
}

SIM_API CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode n, CUgraphNode *out, CUgraphEdgeData *edges,
                                                         size_t *num)
{
    SIM_BEGIN;
    if (!sim_handle_is(n, SIM_KIND_NODE)) return CUDA_ERROR_INVALID_VALUE;
    return list_nodes(&n->dependents, false, out, edges, num);
}

SIM_API CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode n, CUgraphNode *out, size_t *num)
{
    return cuGraphNodeGetDependentNodes_v2(n, out, NULL, num);
}

SIM_API CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges,
                                            size_t *num)
{
    SIM_BEGIN;
    if (!sim_handle_is(g, SIM_KIND_GRAPH) || !num || (!from != !to)) return CUDA_ERROR_INVALID_VALUE;
    size_t count = 0;
    for (size_t i = 0; i < g->nodes.len; i++) {
        CUgraphNode n = g->nodes.items[i];
        for (size_t d = 0; d < n->deps.len; d++, count++) {
            if (!from || count >= *num) continue;
            from[count] = n->deps.items[d];
            to[count] = n;
            if (edges) memset(&edges[count], 0, sizeof *edges);
        }
    }
    for (size_t i = count; from && i < *num; i++) from[i] = to[i] = NULL;
    *num = count;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
    return cuGraphGetEdges_v2(g, from, to, NULL, num);
}

static CUresult check_edges(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n, bool must_exist)
{
    if (!sim_handle_is(g, SIM_KIND_GRAPH) || (n && (!from || !to))) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        if (!node_in(from[i], g) || !node_in(to[i], g) || from[i] == to[i]) return CUDA_ERROR_INVALID_VALUE;
        if ((sim_vec_find(&to[i]->deps, from[i]) >= 0) != must_exist) return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                                   const CUgraphEdgeData *edges, size_t n)
{
    SIM_BEGIN;
    (void)edges;
    SIM_CHECK(check_edges(g, from, to, n, false));
    for (size_t i = 0; i < n; i++)
        if (!add_edge(from[i], to[i])) return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return cuGraphAddDependencies_v2(g, from, to, NULL, n);
}

SIM_API CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                                      const CUgraphEdgeData *edges, size_t n)
{
    SIM_BEGIN;
    (void)edges;
    SIM_CHECK(check_edges(g, from, to, n, true));
    for (size_t i = 0; i < n; i++) {
        sim_vec_remove(&to[i]->deps, from[i]);
        sim_vec_remove(&from[i]->dependents, to[i]);
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                                   size_t n)
{
    return cuGraphRemoveDependencies_v2(g, from, to, NULL, n);
}

/* ---- cloning ------------------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuGraphClone(CUgraph *out, CUgraph original)
{
    SIM_BEGIN;
    CUgraph g;
    if (!out || !sim_handle_is(original, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_graph_new(&g));
    CUresult rc = CUDA_SUCCESS;
    /* Nodes first, then edges: a dependency added later may point backwards in
     * creation order.  Clones sit at the same index as their originals. */
    for (size_t i = 0; rc == CUDA_SUCCESS && i < original->nodes.len; i++) {
        CUgraphNode src = original->nodes.items[i], copy;
        sim_node_params params;
        rc = sim_node_params_copy(&params, &src->params);
        if (rc == CUDA_SUCCESS) rc = sim_graph_add(g, NULL, 0, &params, &copy);
        if (rc == CUDA_SUCCESS) copy->cloned_from = src;
    }
    for (size_t i = 0; rc == CUDA_SUCCESS && i < original->nodes.len; i++) {
        CUgraphNode src = original->nodes.items[i];
        for (size_t d = 0; rc == CUDA_SUCCESS && d < src->deps.len; d++) {
            CUgraphNode dep = g->nodes.items[sim_vec_find(&original->nodes, src->deps.items[d])];
            if (!add_edge(dep, g->nodes.items[i])) rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS) {
        sim_graph_destroy_obj(g);
        return rc;
    }
    *out = g;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode original, CUgraph clone)
{
    SIM_BEGIN;
    if (!out || !original || !sim_handle_is(clone, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < clone->nodes.len; i++) {
        CUgraphNode n = clone->nodes.items[i];
        if (n->cloned_from == original) {
            *out = n;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}
