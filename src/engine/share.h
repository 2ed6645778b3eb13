/*
 * One device, several processes (share.c): the cupool processes of one
 * user on one GPU ask each other for the device memory they hold idle when
 * one of them runs out (CUPOOL_SHARE), and each may hand back by itself
 * what it holds idle past a bound (CUPOOL_IDLE_KEEP).  The shims call
 * cupool_share_reclaim on the out-of-memory path, after cupool's own trim
 * and retry; start-up and exit start and stop the thread that answers.
 */
#ifndef CUPOOL_ENGINE_SHARE_H
#define CUPOOL_ENGINE_SHARE_H

#include "live.h"
#include "origin.h"

/* Makes this process's socket and starts the thread that answers other
 * processes (and hands idle memory back under CUPOOL_IDLE_KEEP); nothing
 * with CUPOOL_SHARE=0 and no CUPOOL_IDLE_KEEP.  At start-up, once. */
void cupool_share_start(void);
/* At exit, before the driver may be gone: no more answers, the socket
 * removed (an answer in progress is waited for, a bounded time), and
 * with CUPOOL_STATS what was asked and handed back. */
void cupool_share_stop(void);
/* The device of c is out of memory for an allocation of `size` bytes
 * after cupool's own trim: asks the other cupool processes of this user
 * on that device to hand back what they hold idle, waiting at most
 * CUPOOL_SHARE_WAIT_MS for each to take the request and
 * CUPOOL_SHARE_GIVE_WAIT_MS in all for those that took it.  Returns 1 when one of
 * them handed memory back, or did not answer in time (and may have: the
 * allocation is worth trying again), 0 otherwise; never blocks on a process that is dead, stopped or hung. */
int cupool_share_reclaim(cupool_context_t *c, size_t size);

/* CUPOOL_SHARE_INFO (with CUPOOL_SHARE): what the other cupool processes
 * of this user hold idle on the device of c, as they answer a query (at
 * most SHARE_QUERY_WAIT_MS, 50 ms, for those that answer; an answer serves
 * the calls of the next second); 0 when the option is off. */
uint64_t cupool_share_peers_idle(cupool_context_t *c);

/* What this process asked and gave so far, and whether it answers the
 * others and bounds its idle memory, in the live page's form (live.h). */
void cupool_share_counts(cupool_live_share_t *out);

/* The longest an allocation waits for the other processes to take its
 * request, and for those that took it to hand their memory back (a trim of
 * many gigabytes can outlast the first bound). */
#define CUPOOL_SHARE_WAIT_MS 200
#define CUPOOL_SHARE_GIVE_WAIT_MS 5000

#endif
