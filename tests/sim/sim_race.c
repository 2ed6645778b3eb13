/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stream-ordering race checker of the simulated CUDA driver.
 *
 * The simulator runs every operation the moment it is enqueued, so a program
 * that touches memory from two streams with nothing ordering them computes
 * the right answer here and the wrong one on a GPU.  This checker finds such
 * programs anyway, as compute-sanitizer's --track-stream-ordered-races does
 * on the real driver: it keeps the order CUDA promises, not the order the
 * simulator happened to run things in, and reports any access that order
 * does not place after the allocation it touches, before that allocation's
 * stream-ordered free, and after every earlier access it conflicts with.
 *
 * The order is happens-before over vector clocks.  Each stream owns a slot;
 * an operation on a stream advances the stream's own entry, and the clock of
 * the stream then says which operations of every stream are certainly done
 * before it runs.  The rules are CUDA's:
 *   - a stream runs its operations in order;
 *   - the legacy stream waits for all blocking streams of its context (the
 *     per-thread default streams are blocking), and they wait for it;
 *   - cuStreamWaitEvent orders a stream after the event's record, and
 *     cuCtxRecordEvent records the work of every stream of the context;
 *   - what the host has seen complete (a stream, event or context
 *     synchronized, a query that answered CUDA_SUCCESS, a synchronous copy
 *     to or from host memory, cuMemFree) is before everything it enqueues
 *     afterwards; one host clock stands for all threads, which can only hide
 *     a race, never invent one.
 * Memory accesses are those of memsets, copies, prefetches and the emulated
 * kernels, each an operation of its own or part of a graph launch (one
 * operation), and the host's loads and stores a test reports through
 * simcuda_host_access(), which must be ordered after the allocation and
 * after every conflicting device access by what the host has seen complete.
 * Each allocation keeps the accesses the host has not yet seen complete,
 * the newest 64 at most.
 *
 * SIMCUDA_RACES says what a race does: "fatal" (the default) prints it and
 * ends the process with status 3, so no test can pass over one; "count"
 * prints it and goes on (simcuda_races() tells how many there were); "off"
 * does not look.
 */
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HISTORY_MAX 64

typedef struct {
    size_t slot;             /* the stream's slot */
    unsigned long long tick; /* its entry when the access ran */
    size_t offset, bytes;    /* within the allocation */
    bool write;
    char what[48];
    char stream[SIM_STREAM_NAME];
} sim_access;

struct sim_race_history {
    size_t len;
    sim_access at[HISTORY_MAX];
};

static sim_clock host;                 /* what the host has seen complete */
static unsigned long long *slot_top;   /* highest entry each slot reached */
static size_t slot_count;
static sim_vec free_slots;             /* slots of destroyed streams, (void *)(slot + 1) */
static CUstream current;               /* the operation that runs now, if any */
static char current_what[48];
static unsigned long long race_count;

/* ---- clocks ------------------------------------------------------------------- */

static void clock_reserve(sim_clock *c, size_t len)
{
    if (c->len >= len) return;
    unsigned long long *v = realloc(c->v, len * sizeof *v);
    if (!v) abort(); /* a test tool: a clock that lost entries would report false races */
    memset(v + c->len, 0, (len - c->len) * sizeof *v);
    c->v = v;
    c->len = len;
}

static unsigned long long clock_at(const sim_clock *c, size_t slot)
{
    return slot < c->len ? c->v[slot] : 0;
}

static void clock_join(sim_clock *into, const sim_clock *from)
{
    clock_reserve(into, from->len);
    for (size_t i = 0; i < from->len; i++)
        if (from->v[i] > into->v[i]) into->v[i] = from->v[i];
}

void sim_clock_free(sim_clock *c)
{
    free(c->v);
    *c = (sim_clock){ 0 };
}

/* ---- streams ------------------------------------------------------------------ */

/* The slot of a destroyed stream is reused once the host has seen all its
 * work complete: the new stream's entry starts where the old one's ended,
 * which then claims nothing untrue.  (Reused earlier, the old stream's work
 * would look done to whatever waits for the new stream.) */
static bool take_free_slot(size_t *slot)
{
    for (size_t i = 0; i < free_slots.len; i++) {
        size_t candidate = (size_t)(uintptr_t)free_slots.items[i] - 1;
        if (clock_at(&host, candidate) < slot_top[candidate]) continue;
        free_slots.items[i] = free_slots.items[--free_slots.len];
        *slot = candidate;
        return true;
    }
    return false;
}

static size_t stream_slot(CUstream s)
{
    if (s->race_slot) return s->race_slot - 1;
    size_t slot;
    if (!take_free_slot(&slot)) {
        unsigned long long *top = realloc(slot_top, (slot_count + 1) * sizeof *top);
        if (!top) abort();
        slot_top = top;
        slot = slot_count++;
        slot_top[slot] = 0;
    }
    s->race_slot = slot + 1;
    clock_reserve(&s->clock, slot + 1);
    s->clock.v[slot] = slot_top[slot];
    return slot;
}

void sim_race_stream_forget(CUstream s)
{
    if (current == s) current = NULL;
    /* Work already given to a stream stays work of the context when the
     * stream is destroyed (cuCtxSynchronize and cuCtxRecordEvent cover it);
     * a blocking stream's stays before the legacy stream's later work, as
     * CUDA orders legacy-stream work after all prior blocking-stream work. */
    if (s->kind == SIM_STREAM_CREATED && s->ctx->alive) {
        clock_join(&s->ctx->retired, &s->clock);
        if (sim_stream_is_blocking(s)) clock_join(&s->ctx->retired_blocking, &s->clock);
    }
    if (s->race_slot) sim_vec_push(&free_slots, (void *)(uintptr_t)s->race_slot);
    s->race_slot = 0;
    sim_clock_free(&s->clock);
}

static void describe_stream(CUstream s, char *out, size_t size)
{
    const char *kind = s->kind == SIM_STREAM_LEGACY       ? "legacy"
                       : s->kind == SIM_STREAM_PER_THREAD ? "per-thread"
                       : (s->flags & CU_STREAM_NON_BLOCKING) ? "non-blocking"
                                                             : "blocking";
    snprintf(out, size, "%s stream %llu (context %llu)", kind, s->id, s->ctx->id);
}

/* The next operation of s: what it runs after, then its own tick. */
static void order_next(CUstream s)
{
    size_t slot = stream_slot(s);
    clock_join(&s->clock, &host);
    if (s->kind == SIM_STREAM_LEGACY) {
        clock_join(&s->clock, &s->ctx->retired_blocking);
        for (size_t i = 0; i < s->ctx->streams.len; i++) {
            CUstream b = s->ctx->streams.items[i];
            if (b != s && sim_stream_is_blocking(b)) clock_join(&s->clock, &b->clock);
        }
    } else if (sim_stream_is_blocking(s) && s->ctx->legacy_stream) {
        clock_join(&s->clock, &s->ctx->legacy_stream->clock);
    }
    clock_reserve(&s->clock, slot + 1);
    slot_top[slot] = ++s->clock.v[slot];
}

/* ---- reports ------------------------------------------------------------------- */

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void report(const char *fmt, ...)
{
    race_count++;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "simcuda: stream-ordered race: %s\n", line);
    if (sim.races == SIM_RACES_FATAL) {
        fprintf(stderr, "simcuda: stopping the process (SIMCUDA_RACES=count reports races and goes on)\n");
        sim_shm_cleanup(); /* _exit skips the destructor that removes this process's /dev/shm files */
        _exit(3);
    }
}

SIM_API long long simcuda_races(void)
{
    SIM_LOCKED;
    return (long long)race_count;
}

/* ---- operations and accesses ------------------------------------------------------ */

static bool checking(void)
{
    return sim.races != SIM_RACES_OFF;
}

void sim_race_op_begin(CUstream s, const char *what)
{
    if (!checking()) return;
    order_next(s);
    current = s;
    snprintf(current_what, sizeof current_what, "%s", what);
}

void sim_race_op_end(void)
{
    current = NULL;
}

static bool ordered_before(const sim_clock *now, size_t slot, unsigned long long tick)
{
    return clock_at(now, slot) >= tick;
}

/* Drops the accesses the host has seen complete: everything is after them. */
static void history_prune(struct sim_race_history *h)
{
    size_t kept = 0;
    for (size_t i = 0; i < h->len; i++)
        if (!ordered_before(&host, h->at[i].slot, h->at[i].tick)) h->at[kept++] = h->at[i];
    h->len = kept;
}

/* The allocation must have been made, in stream order, before `now`. */
static bool check_born(const sim_alloc *a, const sim_clock *now, const char *what, const char *who)
{
    if (!a->born_slot || ordered_before(now, a->born_slot - 1, a->born_tick)) return true;
    report("%s on %s touches the block at %#lx (%zu bytes) before its allocation on %s is ordered before it", what,
           who, (unsigned long)a->base, a->size, a->born_stream);
    return false;
}

void sim_race_access(uintptr_t addr, size_t bytes, bool write)
{
    if (!current || !checking() || bytes == 0) return;
    sim_alloc *a = sim_alloc_find(addr);
    if (!a) return; /* host memory */
    size_t offset = addr - a->base;
    if (bytes > a->size - offset) bytes = a->size - offset;
    const sim_clock *now = &current->clock;
    size_t slot = current->race_slot - 1;
    char who[SIM_STREAM_NAME];
    describe_stream(current, who, sizeof who);
    check_born(a, now, current_what, who);
    if (!a->history && !(a->history = calloc(1, sizeof *a->history))) abort();
    struct sim_race_history *h = a->history;
    history_prune(h);
    for (size_t i = 0; i < h->len; i++) {
        const sim_access *r = &h->at[i];
        bool overlap = r->offset < offset + bytes && offset < r->offset + r->bytes;
        if (!overlap || !(r->write || write) || ordered_before(now, r->slot, r->tick)) continue;
        report("%s (%s) on %s of %zu bytes at %#lx is not ordered after the %s (%s) on %s of %zu bytes at %#lx",
               current_what, write ? "write" : "read", who, bytes, (unsigned long)addr, r->what,
               r->write ? "write" : "read", r->stream, r->bytes, (unsigned long)(a->base + r->offset));
    }
    sim_access entry = { slot, clock_at(now, slot), offset, bytes, write, "", "" };
    snprintf(entry.what, sizeof entry.what, "%s", current_what);
    snprintf(entry.stream, sizeof entry.stream, "%s", who);
    for (size_t i = 0; i < h->len; i++) {
        sim_access *r = &h->at[i];
        if (r->slot == slot && r->offset == offset && r->bytes == bytes && r->write == write) {
            *r = entry; /* the same access again on the same stream: the newer stands for both */
            return;
        }
    }
    if (h->len == HISTORY_MAX) memmove(&h->at[0], &h->at[1], --h->len * sizeof *h->at);
    h->at[h->len++] = entry;
}

/* The host reads or writes [p, p + bytes) now: a test stands in for the loads
 * and stores the simulator cannot see.  Nothing the host does needs recording:
 * whatever it enqueues afterwards is ordered after it.  A range outside every
 * allocation is host memory the checker does not follow. */
SIM_API void simcuda_host_access(const void *p, size_t bytes, int write)
{
    SIM_LOCKED;
    if (!checking() || bytes == 0) return;
    sim_alloc *a = sim_alloc_find((uintptr_t)p);
    if (!a) return;
    size_t offset = (uintptr_t)p - a->base;
    if (bytes > a->size - offset) bytes = a->size - offset;
    check_born(a, &host, write ? "a write" : "a read", "the host");
    const char *what = write ? "host write" : "host read";
    if (!a->history) return;
    history_prune(a->history); /* what is left, the host has not seen complete */
    for (size_t i = 0; i < a->history->len; i++) {
        const sim_access *r = &a->history->at[i];
        bool overlap = r->offset < offset + bytes && offset < r->offset + r->bytes;
        if (!overlap || !(r->write || write)) continue;
        report("%s of %zu bytes at %#lx is not ordered after the %s (%s) on %s of %zu bytes at %#lx", what, bytes,
               (unsigned long)(uintptr_t)p, r->what, r->write ? "write" : "read", r->stream, r->bytes,
               (unsigned long)(a->base + r->offset));
    }
}

void sim_race_alloc_forget(sim_alloc *a)
{
    free(a->history);
    a->history = NULL;
}

/* ---- stream-ordered allocation ------------------------------------------------------ */

void sim_race_pool_alloc(sim_alloc *a, CUstream s)
{
    if (!checking()) return;
    order_next(s);
    a->born_slot = s->race_slot;
    a->born_tick = clock_at(&s->clock, s->race_slot - 1);
    describe_stream(s, a->born_stream, sizeof a->born_stream);
}

void sim_race_pool_free(sim_alloc *a, CUstream s)
{
    if (!checking()) return;
    order_next(s);
    char who[SIM_STREAM_NAME];
    describe_stream(s, who, sizeof who);
    if (!check_born(a, &s->clock, "cuMemFreeAsync", who) || !a->history) return;
    history_prune(a->history);
    for (size_t i = 0; i < a->history->len; i++) {
        const sim_access *r = &a->history->at[i];
        if (ordered_before(&s->clock, r->slot, r->tick)) continue;
        report("cuMemFreeAsync on %s frees the block at %#lx (%zu bytes) while the %s (%s) on %s may still run",
               who, (unsigned long)a->base, a->size, r->what, r->write ? "write" : "read", r->stream);
    }
}

/* ---- events and synchronization --------------------------------------------------- */

void sim_race_event_record(CUevent e, CUstream s)
{
    if (!checking()) return;
    order_next(s);
    sim_clock_free(&e->clock);
    clock_join(&e->clock, &s->clock);
}

void sim_race_ctx_record(CUevent e, CUcontext ctx)
{
    if (!checking()) return;
    sim_clock_free(&e->clock);
    clock_join(&e->clock, &host);
    clock_join(&e->clock, &ctx->retired);
    for (size_t i = 0; i < ctx->streams.len; i++) clock_join(&e->clock, &((CUstream)ctx->streams.items[i])->clock);
}

void sim_race_stream_waits(CUstream s, CUevent e)
{
    if (!checking()) return;
    stream_slot(s);
    clock_join(&s->clock, &e->clock);
}

/* The host sees work complete here: so, too, the stream-ordered frees
 * before it (SIMCUDA_TRIM_OBSERVED, sim_pool.c). */
void sim_race_host_waits_stream(CUstream s)
{
    sim_pool_frees_observed(s->ctx, s, sim.pool_frees);
    if (checking()) clock_join(&host, &s->clock);
}

void sim_race_host_waits_event(CUevent e)
{
    if (e->recorded) sim_pool_frees_observed(e->ctx, e->stream, e->frees_before);
    if (checking()) clock_join(&host, &e->clock);
}

void sim_race_host_waits_ctx(CUcontext ctx)
{
    sim_pool_frees_observed(ctx, NULL, sim.pool_frees);
    if (!checking() || !ctx->alive) return;
    clock_join(&host, &ctx->retired);
    for (size_t i = 0; i < ctx->streams.len; i++) clock_join(&host, &((CUstream)ctx->streams.items[i])->clock);
}

/* cuMemFree waits for the device; taken as everything enqueued anywhere so
 * far, which can only hide a race. */
void sim_race_host_waits_all(void)
{
    if (!checking()) return;
    clock_reserve(&host, slot_count);
    for (size_t i = 0; i < slot_count; i++)
        if (slot_top[i] > host.v[i]) host.v[i] = slot_top[i];
}
