/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A call log read into memory for the tools: every well-formed line of one
 * or more logs becomes a trace_record_t, and the records are put in the
 * order the calls started.  (A log is not in time order: each thread
 * buffers its own lines, so lines of different threads arrive in batches.)
 * Malformed lines are reported as "prog: file:line: why" on stderr and
 * skipped: the first TRACE_SHOWN_REJECTS of a file, then how many more.
 */
#ifndef CUPOOL_TRACE_H
#define CUPOOL_TRACE_H

#include <stddef.h>
#include <stdint.h>

enum { TRACE_OTHER, TRACE_ALLOC, TRACE_FREE, TRACE_START, TRACE_MESSAGE, TRACE_END };
enum { TRACE_ROUTE_NONE, TRACE_ROUTE_POOL, TRACE_ROUTE_NATIVE, TRACE_ROUTE_REWRITTEN, TRACE_ROUTE_UNKNOWN };
/* The memory an allocation or free is of: the line's "kind" field ("host",
 * "managed"; device lines have none), else what its call implies
 * (cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost: pinned host;
 * cuMemAllocManaged: managed).  A cuMemFree line without "kind" says
 * device, but frees whatever its pointer was allocated as: the tools match
 * it to its allocation (has_kind tells them the line did not name it). */
enum { TRACE_MEM_DEVICE, TRACE_MEM_HOST, TRACE_MEM_MANAGED, TRACE_MEM_KINDS };

typedef struct trace_record {
    uint64_t t;          /* CLOCK_MONOTONIC ns at the start of the call */
    uint64_t ptr;
    uint64_t size;       /* allocations: bytes asked; pooled frees: block size */
    uint64_t dur_ns;
    uint64_t reserved;   /* pool bytes reserved after the call, when has_reserved */
    uint32_t seq;        /* line number in its file */
    uint16_t file;       /* index of its log */
    uint16_t call;       /* index into trace_t.names */
    uint16_t result;     /* index into trace_t.names; the empty name when absent */
    uint8_t kind;        /* TRACE_* */
    uint8_t route;       /* TRACE_ROUTE_* */
    uint8_t ok;          /* result was CUDA_SUCCESS (or absent) */
    uint8_t has_reserved;
    uint8_t mem;         /* TRACE_MEM_*: allocations and frees */
    uint8_t has_kind;    /* the line has a "kind" field */
    uint8_t has_flags;
    uint8_t from_store;  /* an allocation a ready store served ("store": true) */
    uint32_t flags;      /* host and managed allocations: the "flags" field */
    int32_t dev;         /* -1 unknown */
    int32_t tid;         /* 0 when absent */
} trace_record_t;

typedef struct trace {
    trace_record_t *records;
    size_t count, capacity;
    char **names; /* interned call and result names */
    size_t name_count;
    size_t rejected; /* malformed lines skipped */
    size_t incomplete; /* logs that say they are incomplete, or lack the end line their start promised */
    size_t files;
    int quiet;       /* set before reading: no message for a malformed line */
} trace_t;

/* Malformed lines of one log named one by one; past them, one count. */
#define TRACE_SHOWN_REJECTS 10

/* Reads the log at path into t (appending to what is there); -1 when the
 * file cannot be opened or is a directory (message printed), else 0.
 * `prog` prefixes every message. */
int trace_read(trace_t *t, const char *path, const char *prog);
/* Puts the records in start-time order (stable: file, then line). */
void trace_sort(trace_t *t);
void trace_free(trace_t *t);
/* realloc that ends the tool with a message when memory runs out (the tools
 * are commands of their own, never inside someone else's process). */
void *trace_xrealloc(void *p, size_t n);

#endif
