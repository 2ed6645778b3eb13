/* Placeholder: graph memset shims pass through (replaced by the memset rewrite). */
#include "common.h"

#define PASS(name, params, args)                                   \
    CUPOOL_EXPORT CUresult name params                              \
    {                                                               \
        CUPOOL_SHIM_BEGIN(call, name);                              \
        return cupool_call_end(&call, real_##name args);            \
    }

PASS(cuGraphAddMemsetNode, (CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c), (n, g, d, nd, p, c))
PASS(cuGraphAddNode, (CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, CUgraphNodeParams *p), (n, g, d, nd, p))
PASS(cuGraphAddNode_v2, (CUgraphNode *n, CUgraph g, const CUgraphNode *d, const CUgraphEdgeData *e, size_t nd, CUgraphNodeParams *p), (n, g, d, e, nd, p))
PASS(cuGraphMemsetNodeGetParams, (CUgraphNode n, CUDA_MEMSET_NODE_PARAMS *p), (n, p))
PASS(cuGraphMemsetNodeSetParams, (CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p), (n, p))
PASS(cuGraphExecMemsetNodeSetParams, (CUgraphExec e, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c), (e, n, p, c))
PASS(cuGraphNodeSetParams, (CUgraphNode n, CUgraphNodeParams *p), (n, p))
PASS(cuGraphExecNodeSetParams, (CUgraphExec e, CUgraphNode n, CUgraphNodeParams *p), (e, n, p))
PASS(cuGraphNodeGetType, (CUgraphNode n, CUgraphNodeType *t), (n, t))
PASS(cuGraphClone, (CUgraph *c, CUgraph g), (c, g))
PASS(cuGraphNodeFindInClone, (CUgraphNode *n, CUgraphNode o, CUgraph c), (n, o, c))
PASS(cuGraphDestroyNode, (CUgraphNode n), (n))
PASS(cuGraphDestroy, (CUgraph g), (g))
