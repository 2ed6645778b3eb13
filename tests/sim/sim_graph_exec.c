/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Executable graphs of the simulated CUDA driver: instantiation (which copies
 * every node's parameters, so later edits of the graph do not reach the exec
 * graph), launch (nodes run synchronously in a topological order), the
 * cuGraphExec*SetParams calls that edit one node of an exec graph, and
 * cuGraphExecUpdate, which succeeds when the new graph has the same topology and
 * node types (nodes paired by creation order) and otherwise reports
 * CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with the result info filled in.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    CUgraphNode key; /* the graph node this one was made from */
    sim_node_params params;
    size_t *deps; /* indices into the exec graph's nodes */
    size_t ndeps;
} sim_exec_node;

struct CUgraphExec_st {
    size_t count;
    sim_exec_node *nodes;
    size_t *order; /* topological */
};

static void exec_free(CUgraphExec e)
{
    for (size_t i = 0; i < e->count; i++) {
        sim_node_params_free(&e->nodes[i].params);
        free(e->nodes[i].deps);
    }
    free(e->nodes);
    free(e->order);
    sim_handle_remove(e);
    free(e);
}

/* Kahn's algorithm over dependency indices; false on a cycle. */
static bool topological_order(CUgraphExec e)
{
    size_t *waiting = calloc(e->count ? e->count : 1, sizeof *waiting);
    if (!waiting) return false;
    for (size_t i = 0; i < e->count; i++) waiting[i] = e->nodes[i].ndeps;
    size_t done = 0;
    for (bool progress = true; progress && done < e->count;) {
        progress = false;
        for (size_t i = 0; i < e->count; i++) {
            if (waiting[i] != 0) continue;
            waiting[i] = SIZE_MAX; /* scheduled */
            e->order[done++] = i;
            progress = true;
            for (size_t j = 0; j < e->count; j++)
                for (size_t d = 0; d < e->nodes[j].ndeps; d++)
                    if (e->nodes[j].deps[d] == i) waiting[j]--;
        }
    }
    free(waiting);
    return done == e->count;
}

static CUresult exec_create(CUgraphExec *out, CUgraph g, CUgraphNode *error_node)
{
    if (!out || !sim_handle_is(g, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    CUgraphExec e = calloc(1, sizeof *e);
    size_t n = g->nodes.len;
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_handle_add(e, SIM_KIND_EXEC);
    e->nodes = calloc(n ? n : 1, sizeof *e->nodes);
    e->order = calloc(n ? n : 1, sizeof *e->order);
    CUresult rc = (e->nodes && e->order) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
        CUgraphNode src = g->nodes.items[i];
        sim_exec_node *x = &e->nodes[i];
        x->key = src;
        x->deps = calloc(src->deps.len ? src->deps.len : 1, sizeof *x->deps);
        if (!x->deps) rc = CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t d = 0; x->deps && d < src->deps.len; d++)
            x->deps[x->ndeps++] = (size_t)sim_vec_find(&g->nodes, src->deps.items[d]);
        if (rc == CUDA_SUCCESS) rc = sim_node_params_copy(&x->params, &src->params);
        if (rc != CUDA_SUCCESS) {
            x->params.type = CU_GRAPH_NODE_TYPE_EMPTY; /* nothing to free */
            if (error_node) *error_node = src;
        }
        e->count = i + 1;
    }
    if (rc == CUDA_SUCCESS && !topological_order(e)) rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS) {
        exec_free(e);
        return rc;
    }
    *out = e;
    return CUDA_SUCCESS;
}

static const unsigned long long known_instantiate_flags =
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

SIM_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
    SIM_BEGIN;
    if (flags & ~known_instantiate_flags) return CUDA_ERROR_INVALID_VALUE;
    return exec_create(out, g, NULL);
}

SIM_API CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *error_node, char *log,
                                               size_t log_size)
{
    SIM_BEGIN;
    if (log && log_size) log[0] = '\0';
    return exec_create(out, g, error_node);
}

SIM_API CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *out, CUgraph g, CUgraphNode *error_node, char *log,
                                            size_t log_size)
{
    return cuGraphInstantiate_v2(out, g, error_node, log, log_size);
}

static CUresult instantiate_with_params(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    SIM_BEGIN;
    if (!p || (p->flags & ~known_instantiate_flags)) return CUDA_ERROR_INVALID_VALUE;
    p->hErrNode_out = NULL;
    CUresult rc = exec_create(out, g, &p->hErrNode_out);
    p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

SIM_API CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_with_params(out, g, p);
}

SIM_API CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph g,
                                                           CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_with_params(out, g, p);
}

SIM_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e)
{
    SIM_BEGIN;
    if (!sim_handle_is(e, SIM_KIND_EXEC)) return CUDA_ERROR_INVALID_VALUE;
    exec_free(e);
    return CUDA_SUCCESS;
}

/* ---- launch ------------------------------------------------------------------------ */

/* Resolves the stream of a launch or upload; a graph launched into a capture
 * would become a child-graph node, which is not modelled. */
static CUresult launch_stream(CUgraphExec e, CUstream h, bool ptds, CUstream *s)
{
    bool capture;
    if (!sim_handle_is(e, SIM_KIND_EXEC)) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, s));
    SIM_CHECK(sim_capture_check_enqueue(*s, &capture));
    if (capture) {
        sim_capture_invalidate(*s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

/* The whole graph is one operation of the stream for the race checker. */
static CUresult graph_launch(CUgraphExec e, CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    SIM_CHECK(launch_stream(e, h, ptds, &s));
    CUresult rc = CUDA_SUCCESS;
    sim_race_op_begin(s, "graph launch");
    for (size_t i = 0; i < e->count && rc == CUDA_SUCCESS; i++) rc = sim_node_params_run(&e->nodes[e->order[i]].params);
    sim_race_op_end();
    return rc;
}

SIM_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream s) { return graph_launch(e, s, false); }
SIM_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return graph_launch(e, s, true); }

static CUresult graph_upload(CUgraphExec e, CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    return launch_stream(e, h, ptds, &s);
}

SIM_API CUresult CUDAAPI cuGraphUpload(CUgraphExec e, CUstream s) { return graph_upload(e, s, false); }
SIM_API CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec e, CUstream s) { return graph_upload(e, s, true); }

/* ---- editing an exec graph ------------------------------------------------------ */

/* Replaces the parameters of the exec node made from `key` with those of a
 * scratch graph node built through the ordinary graph API. */
static CUresult exec_replace(CUgraphExec e, CUgraphNode key, CUgraphNode scratch)
{
    if (!sim_handle_is(e, SIM_KIND_EXEC)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < e->count; i++) {
        sim_exec_node *x = &e->nodes[i];
        if (x->key != key) continue;
        if (x->params.type != scratch->params.type) return CUDA_ERROR_INVALID_VALUE;
        sim_node_params copy;
        SIM_CHECK(sim_node_params_copy(&copy, &scratch->params));
        sim_node_params_free(&x->params);
        x->params = copy;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Builds the new parameters in a throw-away graph so that validation and
 * conversion are exactly those of the graph API, then applies them. */
#define WITH_SCRATCH_NODE(ADD_CALL)                                 \
    do {                                                            \
        CUgraph scratch_graph;                                      \
        CUgraphNode scratch;                                        \
        SIM_CHECK(sim_graph_new(&scratch_graph));                   \
        CUresult rc_ = (ADD_CALL);                                  \
        if (rc_ == CUDA_SUCCESS) rc_ = exec_replace(e, n, scratch); \
        sim_graph_destroy_obj(scratch_graph);                       \
        return rc_;                                                 \
    } while (0)

SIM_API CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode n,
                                                        const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    SIM_BEGIN;
    WITH_SCRATCH_NODE(cuGraphAddMemsetNode(&scratch, scratch_graph, NULL, 0, p, ctx));
}

SIM_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode n,
                                                           const CUDA_KERNEL_NODE_PARAMS *p)
{
    SIM_BEGIN;
    WITH_SCRATCH_NODE(cuGraphAddKernelNode_v2(&scratch, scratch_graph, NULL, 0, p));
}

SIM_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode n,
                                                        const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    SIM_BEGIN;
    WITH_SCRATCH_NODE(cuGraphAddKernelNode(&scratch, scratch_graph, NULL, 0, p));
}

SIM_API CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode n, CUgraphNodeParams *p)
{
    SIM_BEGIN;
    WITH_SCRATCH_NODE(cuGraphAddNode_v2(&scratch, scratch_graph, NULL, NULL, 0, p));
}

/* ---- whole-graph update ------------------------------------------------------------ */

static bool same_dependencies(const sim_exec_node *x, CUgraphNode n, CUgraph g)
{
    if (x->ndeps != n->deps.len) return false;
    for (size_t d = 0; d < n->deps.len; d++) {
        size_t idx = (size_t)sim_vec_find(&g->nodes, n->deps.items[d]);
        bool found = false;
        for (size_t k = 0; k < x->ndeps && !found; k++) found = x->deps[k] == idx;
        if (!found) return false;
    }
    return true;
}

SIM_API CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    SIM_BEGIN;
    if (!info || !sim_handle_is(e, SIM_KIND_EXEC) || !sim_handle_is(g, SIM_KIND_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    memset(info, 0, sizeof *info);
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    if (g->nodes.len != e->count) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    for (size_t i = 0; i < e->count; i++) {
        CUgraphNode n = g->nodes.items[i];
        info->errorNode = n;
        if (!same_dependencies(&e->nodes[i], n, g)) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        if (n->params.type != e->nodes[i].params.type) {
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
            return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        }
    }
    /* Copy everything first so a failure leaves the exec graph untouched. */
    sim_node_params *copies = calloc(e->count ? e->count : 1, sizeof *copies);
    if (!copies) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t copied = 0;
    CUresult rc = CUDA_SUCCESS;
    for (; copied < e->count && rc == CUDA_SUCCESS; copied++) {
        info->errorNode = g->nodes.items[copied];
        rc = sim_node_params_copy(&copies[copied], &((CUgraphNode)g->nodes.items[copied])->params);
    }
    if (rc != CUDA_SUCCESS) {
        for (size_t i = 0; i + 1 < copied; i++) sim_node_params_free(&copies[i]);
        free(copies);
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    for (size_t i = 0; i < e->count; i++) {
        sim_node_params_free(&e->nodes[i].params);
        e->nodes[i].params = copies[i];
        e->nodes[i].key = g->nodes.items[i]; /* later Exec*SetParams name the new nodes */
    }
    free(copies);
    memset(info, 0, sizeof *info);
    info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode *error_node,
                                           CUgraphExecUpdateResult *result)
{
    CUgraphExecUpdateResultInfo info = { 0 };
    CUresult rc = cuGraphExecUpdate_v2(e, g, &info);
    if (error_node) *error_node = info.errorNode;
    if (result) *result = info.result;
    return rc;
}
