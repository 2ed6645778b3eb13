/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The live statistics page (live.h): while the program runs, one thread of
 * cupool's writes what cupool's counters say about each device (allocations,
 * frees, bytes in use, what the pools reserve, free modes, OOM retries,
 * trims) into <CUPOOL_LIVE_DIR>/cupool.<uid>.<pid>.<start>.<random>
 * (live.h), about four times a
 * second, for `cupool top` and `cupool stat`.  The allocation and free paths
 * are not touched: their counters are already kept per thread and folded by
 * cupool_get_stats, which this thread calls; the pools' reserved bytes are
 * asked of the driver from here, never once exit has begun, and never in a
 * fork()ed child (which has no such thread).  The page is created at start,
 * mode 0600, its memory allocated there and then (a full /dev/shm says so
 * at once, instead of raising SIGBUS at a later write), mapped, and its
 * descriptor closed: a program that closes every descriptor, or reuses the
 * number, cannot have cupool write into its own files.  It is removed at
 * exit; a process killed before that leaves it behind, and readers of the
 * same PID namespace remove it once they see its process gone.  CUPOOL_LIVE=0 turns it off.
 */
#include "state.h"
#include "cupool.h"
#include "live.h"
#include "share.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Rates are taken over the last RATE_ROUNDS updates (one second). */
#define RATE_ROUNDS (1000 / CUPOOL_LIVE_INTERVAL_MS)
/* How long exit waits for an update in progress (a driver call that hangs
 * must not hang the exit). */
#define STOP_WAIT_NS 2000000000ll

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cond = PTHREAD_COND_INITIALIZER;
/* Under live_lock: the thread runs in this process, has been asked to
 * stop, is in an update. */
static int running, stopping, in_round;
/* The page, mapped, once it exists; owner: the process whose page it is (a
 * fork()ed child inherits the mapping, never the page). */
static cupool_live_page_t *mapped;
static pid_t owner;
static char page_path[4096];

/* Only the publishing thread touches these once it runs. */
static cupool_live_page_t page;
static struct {
    uint64_t at_ns[RATE_ROUNDS + 1];
    uint64_t allocs[RATE_ROUNDS + 1], frees[RATE_ROUNDS + 1];
    uint64_t peak_in_use, peak_reserved;
} history[CUPOOL_MAX_DEVICES];
static unsigned rounds;

/* ---- what the page says of the process ----------------------------------- */

/* The inode of this process's PID namespace: pid means this process only
 * to readers of the same namespace. */
static uint64_t pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void read_command(char *out, size_t len)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) n = 0;
    /* Cut at len - 1 bytes: not inside a character (readers want UTF-8). */
    if (n == (ssize_t)len - 1) {
        ssize_t lead = n;
        while (lead > 0 && n - lead < 4 && ((unsigned char)out[lead - 1] & 0xc0) == 0x80) lead--;
        if (lead > 0 && ((unsigned char)out[lead - 1] & 0x80)) {
            unsigned char c = (unsigned char)out[lead - 1];
            ssize_t want = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
            if (n - (lead - 1) < want) n = lead - 1;
        }
    }
    out[n] = '\0';
    while (n > 0 && out[n - 1] == '\0') n--;
    for (ssize_t i = 0; i < n; i++)
        if (out[i] == '\0' || out[i] == '\n' || out[i] == '\t') out[i] = ' ';
}

static void copy_text(char *out, size_t len, const char *text)
{
    snprintf(out, len, "%s", text ? text : "");
}

static uint64_t realtime_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- writing the page ---------------------------------------------------- */

/* The seqlock's writer: the sequence number odd, the page's contents, the
 * number even again.  The fields before the number never change. */
static void write_page(void)
{
    uint64_t seq = atomic_load_explicit(&mapped->seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&mapped->seq, seq, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    size_t after = offsetof(cupool_live_page_t, seq) + sizeof page.seq;
    memcpy((char *)mapped + after, (const char *)&page + after, sizeof page - after);
    atomic_store_explicit(&mapped->seq, seq + 1, memory_order_release);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Per second, over the last second (fewer rounds at first), of the counts
 * whose slot `now` was just written. */
static uint64_t rate(const uint64_t *counts, const uint64_t *at_ns, unsigned now, unsigned rounds_kept)
{
    unsigned span = rounds_kept < RATE_ROUNDS ? rounds_kept : RATE_ROUNDS;
    if (!span) return 0;
    unsigned then = (now + RATE_ROUNDS + 1 - span) % (RATE_ROUNDS + 1);
    uint64_t dt = at_ns[now] - at_ns[then];
    if (!dt) return 0;
    return (uint64_t)((double)(counts[now] - counts[then]) * 1e9 / (double)dt);
}

/* The device's counters, folded.  cupool_get_stats sums what is allocated
 * and what is freed one after the other, while the program goes on: a free
 * counted in the second sum whose allocation came too late for the first
 * makes the difference negative (a huge number modulo 2^64).  Such a fold
 * is taken again, and after a few tries the bytes in use of the last update
 * are kept, so that neither the page nor its peak ever shows one. */
static int folded(int device, cupool_stats_t *s)
{
    static uint64_t last_in_use[CUPOOL_MAX_DEVICES];
    for (int tries = 0; tries < 4; tries++) {
        if (cupool_get_stats(device, s) != 0) return 0;
        if (s->in_use <= (uint64_t)INT64_MAX) {
            last_in_use[device] = s->in_use;
            return 1;
        }
    }
    s->in_use = last_in_use[device];
    return 1;
}

/* One update: cupool's counters folded, the pools asked, the page written. */
static void update(int query)
{
    static unsigned modes[CUPOOL_MAX_DEVICES], ncontexts[CUPOOL_MAX_DEVICES];
    static int pooled[CUPOOL_MAX_DEVICES];
    static uint64_t reserved[CUPOOL_MAX_DEVICES];
    int ndevices = cupool_devices_report(query, modes, ncontexts, pooled, reserved);
    uint64_t now = cupool_now_ns();
    unsigned slot = rounds % (RATE_ROUNDS + 1);
    uint32_t n = 0, left_out = 0;
    /* The devices cupool has set up: counts are only ever made on them. */
    for (int d = 0; d < ndevices; d++) {
        cupool_stats_t s;
        if (!folded(d, &s)) continue;
        const cupool_device_stats_t *rare = &cupool_device_stats[d];
        history[d].at_ns[slot] = now;
        history[d].allocs[slot] = s.pooled_allocs + s.native_allocs;
        history[d].frees[slot] = s.pooled_frees;
        history[d].peak_in_use = max_u64(history[d].peak_in_use, max_u64(s.in_use, s.peak_in_use));
        history[d].peak_reserved = max_u64(history[d].peak_reserved, max_u64(reserved[d], s.peak_reserved));
        if (n == CUPOOL_LIVE_DEVICES) {
            left_out++;
            continue;
        }
        cupool_live_device_t *o = &page.device[n++];
        memset(o, 0, sizeof *o);
        o->ordinal = d;
        o->modes = modes[d];
        o->contexts = ncontexts[d];
        o->pooled = (uint32_t)pooled[d];
        o->pooled_allocs = s.pooled_allocs;
        o->pooled_frees = s.pooled_frees;
        o->native_allocs = s.native_allocs;
        o->in_use = s.in_use;
        o->peak_in_use = history[d].peak_in_use;
        o->reserved = reserved[d];
        o->peak_reserved = history[d].peak_reserved;
        o->alloc_rate = rate(history[d].allocs, history[d].at_ns, slot, rounds);
        o->free_rate = rate(history[d].frees, history[d].at_ns, slot, rounds);
        o->trims = s.trims;
        o->oom_retries = s.oom_retries;
        o->rewritten_memsets = s.rewritten_memsets;
        o->ready_reuses = atomic_load_explicit(&rare->ready_reuses, memory_order_relaxed);
        o->ordered_fences = atomic_load_explicit(&rare->ordered_fences, memory_order_relaxed);
        o->misses_given_back = atomic_load_explicit(&rare->misses_given_back, memory_order_relaxed);
        o->given_back_bytes = atomic_load_explicit(&rare->given_back_bytes, memory_order_relaxed);
        o->oversize_kept = atomic_load_explicit(&rare->oversize_kept, memory_order_relaxed);
        o->deferred_waits = atomic_load_explicit(&rare->deferred_waits, memory_order_relaxed);
        o->queued_calls = atomic_load_explicit(&rare->queued_calls, memory_order_relaxed);
    }
    static const int kept_stats[CUPOOL_LIVE_KEPT_KINDS] = {
        [CUPOOL_LIVE_KEPT_HOST] = CUPOOL_KEPT_STATS_HOST,
        [CUPOOL_LIVE_KEPT_MANAGED] = CUPOOL_KEPT_STATS_MANAGED,
    };
    for (int k = 0; k < CUPOOL_LIVE_KEPT_KINDS; k++) {
        const cupool_kept_stats_t *from = &cupool_kept_stats[kept_stats[k]];
        cupool_live_kept_t *to = &page.kept[k];
        to->allocs = atomic_load_explicit(&from->allocs, memory_order_relaxed);
        to->reused = atomic_load_explicit(&from->reused, memory_order_relaxed);
        to->frees = atomic_load_explicit(&from->frees, memory_order_relaxed);
        to->kept_frees = atomic_load_explicit(&from->kept_frees, memory_order_relaxed);
        to->kept = atomic_load_explicit(&from->kept_bytes, memory_order_relaxed);
        to->peak_kept = atomic_load_explicit(&from->peak_kept, memory_order_relaxed);
        to->limit_frees = atomic_load_explicit(&from->limit_frees, memory_order_relaxed);
        to->oom_frees = atomic_load_explicit(&from->oom_frees, memory_order_relaxed);
        to->advice_frees = atomic_load_explicit(&from->advice_frees, memory_order_relaxed);
    }
    cupool_share_counts(&page.share);
    rounds++;
    page.ndevices = n;
    page.devices_left_out = left_out;
    page.updated_ns = realtime_ns();
    page.updates++;
    write_page();
}

/* ---- the thread ---------------------------------------------------------- */

static void *publisher_main(void *arg)
{
    (void)arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_mutex_lock(&live_lock);
    while (!stopping) {
        in_round = 1;
        pthread_mutex_unlock(&live_lock);
        /* Only while cupool is active: a stopped cupool (a forked child
         * passes everything through) asks no driver. */
        update(cupool_active());
        /* The program's threads all ended: so must this one (and the
         * process with it, once cupool's other threads see the same). */
        int last = cupool_threads_alone();
        pthread_mutex_lock(&live_lock);
        in_round = 0;
        pthread_cond_broadcast(&live_cond);
        if (last) break;
        struct timespec next = cupool_deadline_after_ns((long long)CUPOOL_LIVE_INTERVAL_MS * 1000000ll);
        while (!stopping && pthread_cond_timedwait(&live_cond, &live_lock, &next) != ETIMEDOUT) {
        }
    }
    running = 0;
    pthread_mutex_unlock(&live_lock);
    return NULL;
}

static void init_cond(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&live_cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* A fork()ed child has no publishing thread, and the page it inherited is
 * its parent's: it neither writes nor removes it.  (cupool passes a child's
 * calls through, so it has nothing of its own to publish; a child that
 * execs a program under cupool publishes that program's page.) */
static void fork_prepare(void)
{
    pthread_mutex_lock(&live_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&live_lock);
}

static void fork_child(void)
{
    running = stopping = in_round = 0;
    if (mapped) munmap(mapped, sizeof *mapped);
    mapped = NULL;
    init_cond();
    pthread_mutex_unlock(&live_lock);
}

/* ---- start and stop ------------------------------------------------------ */

static int create_page(void)
{
    const char *dir = cupool_option_string(CUPOOL_OPT_LIVE_DIR);
    if (!dir || !*dir) dir = "/dev/shm";
    uint64_t started = cupool_live_process_start(0), random = 0;
    if (getrandom(&random, sizeof random, GRND_NONBLOCK) != (ssize_t)sizeof random)
        random = realtime_ns() ^ ((uint64_t)getpid() << 32);
    int len = snprintf(page_path, sizeof page_path, "%s/%s%u.%d.%llu.%016llx", dir, CUPOOL_LIVE_PREFIX,
                       (unsigned)geteuid(), (int)getpid(), (unsigned long long)started, (unsigned long long)random);
    if (len < 0 || (size_t)len >= sizeof page_path) {
        cupool_message(CUPOOL_MSG_WARN, "live statistics off: CUPOOL_LIVE_DIR is too long");
        return -1;
    }
    /* The name is this process's alone (start time, random part): one
     * there already is no page of an earlier process to replace. */
    int fd = open(page_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        cupool_message(CUPOOL_MSG_WARN, "live statistics off: cannot create %s: %s", page_path, strerror(errno));
        return -1;
    }
    /* Whatever the umask: readers refuse a page others may read. */
    struct stat st;
    if (fchmod(fd, 0600) != 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        cupool_message(CUPOOL_MSG_WARN, "live statistics off: %s is not a private file of this user", page_path);
        close(fd);
        unlink(page_path);
        return -1;
    }
    /* The file's memory allocated now: a full file system says so here. */
    int err = posix_fallocate(fd, 0, sizeof page);
    void *m = err ? MAP_FAILED : mmap(NULL, sizeof page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        cupool_message(CUPOOL_MSG_WARN, "live statistics off: cannot make room for %s: %s", page_path,
                       strerror(err ? err : errno));
        close(fd);
        unlink(page_path);
        return -1;
    }
    close(fd);
    page.magic = CUPOOL_LIVE_MAGIC;
    page.format = CUPOOL_LIVE_FORMAT;
    page.size = sizeof page;
    page.pid = (int32_t)getpid();
    page.uid = (uint32_t)geteuid();
    page.start_time = started;
    page.pid_ns = pid_namespace();
    page.interval_ms = CUPOOL_LIVE_INTERVAL_MS;
    page.version = (uint32_t)cupool_version();
    copy_text(page.version_text, sizeof page.version_text, PACKAGE_VERSION);
    copy_text(page.policy, sizeof page.policy, cupool_option_string(CUPOOL_OPT_POLICY));
    copy_text(page.free_option, sizeof page.free_option, cupool_option_string(CUPOOL_OPT_FREE));
    read_command(page.command, sizeof page.command);
    page.updated_ns = realtime_ns();
    mapped = m;
    memcpy(mapped, &page, offsetof(cupool_live_page_t, seq));
    write_page();
    owner = getpid();
    return 0;
}

void cupool_live_start(void)
{
    if (!cupool_option(CUPOOL_OPT_LIVE)) return;
    init_cond();
    if (create_page() != 0) return;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    pthread_mutex_lock(&live_lock);
    running = cupool_thread_start(publisher_main, "cupool-live") == 0;
    pthread_mutex_unlock(&live_lock);
    if (!running) {
        cupool_message(CUPOOL_MSG_WARN, "live statistics off: cannot start a thread");
        unlink(page_path);
    }
}

/* At exit, before the statistics are printed and the log flushed: the
 * thread finishes the update in progress (its driver call included) and
 * makes no other; then the page goes.  The mapping stays: should the update
 * not finish in time, it still writes to memory that is there. */
void cupool_live_stop(void)
{
    pthread_mutex_lock(&live_lock);
    if (!mapped || owner != getpid()) {
        pthread_mutex_unlock(&live_lock);
        return;
    }
    stopping = 1;
    pthread_cond_broadcast(&live_cond);
    struct timespec deadline = cupool_deadline_after_ns(STOP_WAIT_NS);
    while (in_round && pthread_cond_timedwait(&live_cond, &live_lock, &deadline) != ETIMEDOUT) {
    }
    unlink(page_path);
    owner = 0;
    pthread_mutex_unlock(&live_lock);
}
