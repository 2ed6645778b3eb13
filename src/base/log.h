/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The call bracket every shim uses (cupool_call_t, CUPOOL_SHIM_BEGIN,
 * cupool_call_end) and the call log (log.c) that a timed call is written
 * to.
 */
#ifndef CUPOOL_BASE_LOG_H
#define CUPOOL_BASE_LOG_H

#include "options.h"
#include "stats.h"

typedef struct cupool_call {
    int sym;             /* enum cupool_symbol */
    uint64_t start_ns;   /* 0 when neither log nor stats timing is on */
    CUdeviceptr ptr;
    size_t size;
    int device;          /* -1 unknown */
    CUstream stream;
    int route;           /* enum cupool_route */
    int mode;            /* CUPOOL_FREE_* in effect, -1 none */
    uint64_t reserved;   /* pool bytes reserved after the call, when known */
    int kind;            /* enum cupool_kind: what memory an allocation or free is of */
    unsigned flags;      /* a pinned host or managed allocation's flags */
    int from_store;      /* an allocation a ready store served: the log's "store" */
} cupool_call_t;

/* The memory a call allocates or frees: the log's "kind", written for the
 * kinds other than device memory. */
enum cupool_kind { CUPOOL_KIND_DEVICE, CUPOOL_KIND_HOST, CUPOOL_KIND_MANAGED };

static inline void cupool_call_begin(cupool_call_t *c, int sym)
{
    c->sym = sym;
    c->start_ns = cupool_hot.timing ? cupool_now_ns() : 0;
    c->ptr = 0;
    c->size = 0;
    c->device = -1;
    c->stream = NULL;
    c->route = CUPOOL_ROUTE_NONE;
    c->mode = -1;
    c->reserved = 0;
    c->kind = CUPOOL_KIND_DEVICE;
    c->flags = 0;
    c->from_store = 0;
}
/* Counts the call, logs it, returns result unchanged.  Inline: without
 * log or statistics timing (start_ns 0) a call only counts itself. */
CUresult cupool_call_end_timed(cupool_call_t *c, CUresult result);
static inline CUresult cupool_call_end(cupool_call_t *c, CUresult result)
{
    if (CUPOOL_UNLIKELY(c->start_ns)) return cupool_call_end_timed(c, result);
    cupool_stats_count(c->sym);
    return result;
}

/* Opens a shim: makes sure the real function exists. */
#define CUPOOL_SHIM_BEGIN(call, name)                                                                       \
    cupool_call_t call;                                                                                     \
    cupool_call_begin(&call, CUPOOL_SYM_##name);                                                            \
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_##name))                                             \
        return cupool_call_end(&call, cupool_missing(#name));



void cupool_log_open(void);
void cupool_log_call(const cupool_call_t *c, CUresult result, uint64_t end_ns);
void cupool_log_message(int level, const char *text);
void cupool_log_flush(void);
/* Lines of the log that could not be written, and the first failure's
 * errno (*err, 0: none). */
unsigned long long cupool_log_lost(int *err);
extern int cupool_log_level; /* -1 when no log */

#endif
