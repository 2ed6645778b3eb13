/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pointer-origin table: for every block cupool allocated from a pool, the
 * context and pool it came from, its size and the free mode in force when it
 * was made.  A free finds its block here; a pointer that is not here goes to
 * the real driver unchanged.
 */
#ifndef CUPOOL_ORIGIN_H
#define CUPOOL_ORIGIN_H

#include "../base/base.h"

/* The engine's state of a context: opaque but to the engine's own files
 * (state.h). */
typedef struct cupool_context cupool_context_t;

typedef struct cupool_origin {
    CUdeviceptr ptr;
    size_t size;
    cupool_context_t *owner;
    CUmemoryPool pool;
    int mode;  /* CUPOOL_FREE_* the block was allocated under */
    int freed; /* the program freed it; cupool still holds it (deferred, or kept for reuse) */
    int exported; /* a cuIpcGetMemHandle handle names it: its free asks ipc_export.c first */
} cupool_origin_t;

/* Records a block; 0 on success, -1 when cupool's own host memory ran out. */
int cupool_origin_insert(const cupool_origin_t *origin);
/* Removes the block starting at ptr, copying its record to *out; 0 if found. */
int cupool_origin_remove(CUdeviceptr ptr, cupool_origin_t *out);
/* The program frees the block starting at ptr.  Under one lock: copies its
 * record and asks keep() whether cupool will hold the block for a while
 * (deferred frees); a held block stays, marked freed, until it goes back to
 * its pool; any other block leaves the table now.  Returns 0, 1 when the
 * block was already freed and is still held (a double free), or -1 when
 * cupool does not know ptr.  *kept says what keep() answered. */
int cupool_origin_claim(CUdeviceptr ptr, cupool_origin_t *out, int (*keep)(const cupool_origin_t *), int *kept);
/* What cupool_origin_take does with a block the program frees. */
enum cupool_origin_action {
    CUPOOL_ORIGIN_LEAVE,  /* nothing: cupool_origin_claim decides */
    CUPOOL_ORIGIN_REMOVE, /* the block goes back to its pool at once */
    CUPOOL_ORIGIN_KEEP,   /* cupool keeps it for a while, marked freed */
};
/* The program frees the block starting at ptr, not freed yet: under one
 * lock, asks action() what to do with it and does that, copying its record
 * to *out.  Returns the action taken: CUPOOL_ORIGIN_LEAVE for a block
 * unknown or already freed, which stays as it is. */
enum cupool_origin_action cupool_origin_take(CUdeviceptr ptr, cupool_origin_t *out,
                                             enum cupool_origin_action (*action)(const cupool_origin_t *, const void *),
                                             const void *arg);
/* Marks the live, unfreed block starting at ptr as exported; 0 if found. */
int cupool_origin_mark_exported(CUdeviceptr ptr);
/* Copies the record of the block starting at ptr without removing it; 0 if found. */
int cupool_origin_find(CUdeviceptr ptr, cupool_origin_t *out);
/* Removes every block owned by a context and not freed, calling fn on each. */
void cupool_origin_drain(cupool_context_t *owner, void (*fn)(const cupool_origin_t *, void *), void *arg);
/* Lock/unlock every shard around fork(). */
void cupool_origin_lock_all(void);
void cupool_origin_unlock_all(void);

#endif
