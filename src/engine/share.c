/*
 * One GPU, several processes (share.h).  Each cupool process keeps device
 * memory it does not use: what its pools reserve beyond their allocations,
 * freed blocks waiting in its ready store, blocks whose fences have
 * completed.  When another process on the same GPU runs out of memory,
 * that reserve cannot help it unless the holder hands it back.  So every
 * cupool process of a user listens on a Unix socket in a private folder,
 * <CUPOOL_SHARE_DIR>/cupool-share.<uid> (mode 0700, owned by the user:
 * nobody else can put a socket there), and an allocation about to fail
 * with CUDA_ERROR_OUT_OF_MEMORY, after cupool's own trim and retry, asks
 * every other process there, at once, to hand back what it holds idle on
 * the same device (named by its UUID: ordinals differ under
 * CUDA_VISIBLE_DEVICES), waits for their answers, and tries once more.
 * A process that takes the request says so at once (SHARE_WORKING), then
 * answers when it has handed its memory back: handing back tens of
 * gigabytes takes the driver longer than the bound for an answer.  The
 * asker waits CUPOOL_SHARE_WAIT_MS for processes to take the request, and
 * CUPOOL_SHARE_GIVE_WAIT_MS in all for those that took it.
 *
 * Who may ask whom: only processes of the same user.  The folder and each
 * socket in it must belong to the user and be closed to everyone else, or
 * they are ignored; each side checks the other's user on the connection
 * (SO_PEERCRED).  A socket nobody listens on (its process died) refuses
 * the connection and is removed; one whose process is stopped or hung
 * accepts it into the kernel's backlog and never answers, and the wait
 * runs out; a full backlog refuses at once (non-blocking connect).  So no
 * peer can hold an allocation longer than the bounds.
 *
 * The answering side is a thread of cupool's, blocked in poll() on its
 * socket: no signal handler, no driver call outside that thread.  It hands
 * back what an out-of-memory trim would, but waits for no work of the
 * program: blocks whose fences have completed go back to their pools, the
 * ready stores empty (a block whose users may still run goes back on the
 * legacy stream, behind them), cupool's own stream is synchronized (it
 * holds only those frees) and the pools are trimmed to what they have in
 * use; kept managed blocks go back to the driver.  The program's threads
 * meet it only where they would meet an out-of-memory trim of their own:
 * the locks of the contexts, briefly.
 *
 * The same thread, under CUPOOL_IDLE_KEEP, looks four times a second at
 * what each device's pools hold idle, and once that has stayed above the
 * bound for two looks in a row, hands the excess back the same way.
 */
#define _GNU_SOURCE
#include "free/free.h"
#include "share.h"
#include "kept_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SHARE_MAGIC "cupoolS1"
/* A query (CUPOOL_SHARE_INFO): how much the process holds idle on the
 * device, nothing handed back.  A magic of its own, so that a process that
 * does not know queries refuses one instead of handing memory back. */
#define SHARE_QUERY_MAGIC "cupoolQ1"
#define SHARE_FOLDER_PREFIX "cupool-share."
/* The most processes one allocation asks (the rest are not asked). */
#define SHARE_MAX_PEERS 64
/* How long the answering thread waits for a request once connected. */
#define SHARE_REQUEST_WAIT_MS 100
/* CUPOOL_SHARE_INFO: the longest cuMemGetInfo waits for the others' answers,
 * and how long a device's answer serves later calls. */
#define SHARE_QUERY_WAIT_MS 50
#define SHARE_QUERY_KEEP_NS 1000000000ull
/* How long exit waits for an answer in progress (a driver call that hangs
 * must not hang the exit). */
#define SHARE_STOP_WAIT_NS 2000000000ll
/* CUPOOL_IDLE_KEEP: a look every IDLE_TICK_MS; the recent peak in use is
 * the highest of the last IDLE_PEAK_TICKS looks (ten seconds). */
#define IDLE_TICK_MS 250
#define IDLE_PEAK_TICKS 40
/* Without CUPOOL_IDLE_KEEP the thread still wakes this often, to end with
 * the program's last thread (cupool_threads_alone). */
#define ALONE_TICK_MS 1000

typedef struct {
    char magic[8];
    uint32_t pid;      /* the asker, as it sees itself: for messages */
    uint32_t unused;
    uint8_t uuid[16];  /* the device */
    uint64_t size;     /* the allocation that failed */
} share_request_t;

enum { SHARE_GAVE, SHARE_NOT_HERE, SHARE_STOPPING, SHARE_WORKING };

typedef struct {
    char magic[8];
    int32_t status;    /* SHARE_GAVE, or why nothing */
    uint32_t pid;      /* the answerer, as it sees itself */
    uint64_t released; /* bytes the device's pools reserve less than before */
} share_reply_t;

static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t share_cond;
/* Under share_lock: the thread runs, has been asked to stop, is giving back. */
static int running, stopping, giving;
static int listen_fd = -1, wake_fds[2] = {-1, -1};
static pid_t owner; /* the process that made the socket: only it removes it */
static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
/* One asking at a time in a process: a second thread out of memory waits
 * for the first, then asks anew. */
static pthread_mutex_t ask_lock = PTHREAD_MUTEX_INITIALIZER;

/* What was asked and given, for CUPOOL_STATS. */
static atomic_ullong asked, answers, received_bytes, given, given_bytes, idle_returns, idle_bytes;

void cupool_share_counts(cupool_live_share_t *out)
{
    out->answers_peers = cupool_option(CUPOOL_OPT_SHARE) != 0;
    out->idle_keep = cupool_option(CUPOOL_OPT_IDLE_KEEP) != CUPOOL_SIZE_UNLIMITED;
    out->asked = atomic_load(&asked);
    out->answers = atomic_load(&answers);
    out->received_bytes = atomic_load(&received_bytes);
    out->given = atomic_load(&given);
    out->given_bytes = atomic_load(&given_bytes);
    out->idle_returns = atomic_load(&idle_returns);
    out->idle_bytes = atomic_load(&idle_bytes);
}

static uint64_t ms_since(uint64_t start_ns)
{
    return (cupool_now_ns() - start_ns) / 1000000u;
}

/* ---- the folder and the device ----------------------------------------------- */

/* The private folder's path; 0 when it exists (made now if need be) as a
 * folder of this user that nobody else may enter.  A folder that is not
 * such is said once and never used. */
static int private_folder(char *out, size_t cap)
{
    const char *base = cupool_option_string(CUPOOL_OPT_SHARE_DIR);
    if (!base || !*base) base = "/dev/shm";
    int n = snprintf(out, cap, "%s/%s%u", base, SHARE_FOLDER_PREFIX, (unsigned)geteuid());
    if (n <= 0 || (size_t)n >= cap) {
        cupool_message_once(CUPOOL_MSG_WARN, "sharing the device off: CUPOOL_SHARE_DIR is too long");
        return -1;
    }
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        cupool_message_once(CUPOOL_MSG_WARN, "sharing the device off: cannot make %s: %s", out, strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        cupool_message_once(CUPOOL_MSG_WARN,
                            "sharing the device off: %s is not a folder of this user closed to others", out);
        return -1;
    }
    /* Made under a umask that left the owner out: let the owner in. */
    if ((st.st_mode & 0700) != 0700 && chmod(out, 0700) != 0) return -1;
    return 0;
}

/* The device's UUID; 0 on success.  Asked of the driver once per ordinal
 * (the asking thread and the answering one may both ask: uuid_lock). */
static pthread_mutex_t uuid_lock = PTHREAD_MUTEX_INITIALIZER;
static int device_uuid(int ordinal, uint8_t out[16])
{
    static uint8_t uuids[CUPOOL_MAX_DEVICES][16];
    static int known[CUPOOL_MAX_DEVICES];
    if (ordinal < 0 || ordinal >= CUPOOL_MAX_DEVICES) return -1;
    pthread_mutex_lock(&uuid_lock);
    if (!known[ordinal]) {
        CUuuid uuid;
        if (real_cuDeviceGetUuid_v2 && real_cuDeviceGetUuid_v2(&uuid, (CUdevice)ordinal) == CUDA_SUCCESS) {
            memcpy(uuids[ordinal], uuid.bytes, 16);
            known[ordinal] = 1;
        }
    }
    int ok = known[ordinal];
    if (ok) memcpy(out, uuids[ordinal], 16);
    pthread_mutex_unlock(&uuid_lock);
    return ok ? 0 : -1;
}

/* This process's ordinal of the device with this UUID, or -1. */
static int ordinal_of(const uint8_t uuid[16])
{
    int count = 0;
    if (!real_cuDeviceGetCount || real_cuDeviceGetCount(&count) != CUDA_SUCCESS) return -1;
    for (int d = 0; d < count && d < CUPOOL_MAX_DEVICES; d++) {
        uint8_t mine[16];
        if (device_uuid(d, mine) == 0 && memcmp(mine, uuid, 16) == 0) return d;
    }
    return -1;
}

static int peer_same_user(int fd, pid_t *pid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) return 0;
    *pid = cred.pid;
    return 1;
}

/* ---- handing memory back ------------------------------------------------------ */

typedef struct {
    int ordinal;
    uint64_t keep;           /* idle bytes the device's pools may keep */
    int seen;                /* a context of the device was found */
    uint64_t before, after;  /* what the pools reserve */
} give_t;

/* Blocks whose users may still run went back on the legacy stream, behind
 * the program's work (free/ready_store.c), and a pool trims only memory
 * whose free the host has seen complete.  An event recorded after those
 * frees, if it has completed by now, is synchronized: that shows the pool
 * the frees and waits for nothing.  If the program's work is still
 * running, its blocks stay reserved: no work of the program is waited for.
 * Not while a capture is in progress (the legacy stream would disturb it). */
static void observe_legacy_frees(void)
{
    CUevent done;
    if (!cupool_legacy_enter()) return;
    if (real_cuEventCreate(&done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        if (real_cuEventRecord(done, CU_STREAM_LEGACY) == CUDA_SUCCESS && real_cuEventQuery(done) == CUDA_SUCCESS)
            real_cuEventSynchronize(done);
        real_cuEventDestroy_v2(done);
    }
    cupool_legacy_leave();
}

/* For each context of the device (registry lock held, none torn down
 * meanwhile): its completed blocks and ready store back to its pools, its
 * own stream's frees done; then the pools trimmed to what is in use and
 * g->keep more. */
static int give_back_context(cupool_context_t *c, void *arg)
{
    give_t *g = arg;
    cupool_device_t *dev = c->device;
    if (dev->ordinal != g->ordinal || !dev->pooled) return 0;
    int pushed = cupool_enter_context(c->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    if (!g->seen) g->before = cupool_device_reserved(dev);
    g->seen = 1;
    cupool_reclaim(c);
    cupool_ready_return_all(c);
    /* The frees just made on cupool's own stream (it holds nothing
     * else): done before the trim, or their memory would stay reserved. */
    real_cuStreamSynchronize(c->private_stream);
    observe_legacy_frees();
    /* Frees ordered on the GPU behind `deferred`'s fences (free/deferred_fence.c)
     * go on cupool's fence stream: a query shows the pool those the GPU has
     * passed, without a wait for the program's work. */
    pthread_mutex_lock(&c->lock);
    CUstream fence_stream = c->fence_stream;
    pthread_mutex_unlock(&c->lock);
    if (fence_stream) real_cuStreamQuery(fence_stream);
    uint64_t allowance = g->keep;
    for (int i = 0; i < dev->npools; i++) {
        cuuint64_t used = 0, reserved = 0;
        real_cuMemPoolGetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
        uint64_t keep = allowance > UINT64_MAX - used ? UINT64_MAX : used + allowance;
        real_cuMemPoolTrimTo(dev->pools[i], (size_t)keep);
        real_cuMemPoolGetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        uint64_t idle = reserved > used ? reserved - used : 0;
        allowance -= idle < allowance ? idle : allowance;
    }
    g->after = cupool_device_reserved(dev);
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
    return 0;
}

/* Hands back what the device's pools hold idle beyond `keep` bytes; the
 * bytes the pools reserve less than before.  -1 when cupool has no
 * context on that device. */
static int64_t give_back(int ordinal, uint64_t keep)
{
    give_t g = {.ordinal = ordinal, .keep = keep};
    cupool_each_context(give_back_context, &g);
    if (!g.seen) return -1;
    return g.before > g.after ? (int64_t)(g.before - g.after) : 0;
}

/* Whether exit has begun; else marks a give-back in progress, which exit
 * waits for. */
static int give_begin(void)
{
    pthread_mutex_lock(&share_lock);
    int ok = !stopping && cupool_active();
    if (ok) giving = 1;
    pthread_mutex_unlock(&share_lock);
    return ok;
}

static void give_end(void)
{
    pthread_mutex_lock(&share_lock);
    giving = 0;
    pthread_cond_broadcast(&share_cond);
    pthread_mutex_unlock(&share_lock);
}

/* ---- answering ---------------------------------------------------------------- */

static uint64_t idle_on(int ordinal);

/* One connection: its request read (a bounded wait), the memory handed
 * back (or, for a query, what could be measured), the reply sent; the
 * connection closed. */
static void answer(int fd)
{
    pid_t peer;
    share_request_t req;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (!peer_same_user(fd, &peer) || poll(&p, 1, SHARE_REQUEST_WAIT_MS) != 1 ||
        recv(fd, &req, sizeof req, MSG_DONTWAIT) != (ssize_t)sizeof req ||
        (memcmp(req.magic, SHARE_MAGIC, 8) != 0 && memcmp(req.magic, SHARE_QUERY_MAGIC, 8) != 0)) {
        close(fd);
        return;
    }
    int query = memcmp(req.magic, SHARE_QUERY_MAGIC, 8) == 0;
    share_reply_t reply = {.status = SHARE_NOT_HERE, .pid = (uint32_t)getpid()};
    memcpy(reply.magic, req.magic, 8);
    int ordinal = -1;
    if (!give_begin()) {
        reply.status = SHARE_STOPPING;
    } else if (query) {
        ordinal = ordinal_of(req.uuid);
        if (ordinal >= 0) {
            reply.status = SHARE_GAVE;
            reply.released = idle_on(ordinal);
        }
        give_end();
    } else {
        uint64_t start = cupool_now_ns();
        ordinal = ordinal_of(req.uuid);
        if (ordinal >= 0) {
            /* Taken: the asker now waits for the hand-back itself. */
            share_reply_t working = reply;
            working.status = SHARE_WORKING;
            ssize_t sent = send(fd, &working, sizeof working, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)sent;
        }
        int64_t released = ordinal >= 0 ? give_back(ordinal, 0) : -1;
        /* Managed memory lives on the device too, while it is there. */
        if (released >= 0) cupool_kept_release(CUPOOL_KEPT_CLASS_MANAGED);
        give_end();
        if (released >= 0) {
            reply.status = SHARE_GAVE;
            reply.released = (uint64_t)released;
            atomic_fetch_add(&given, 1);
            atomic_fetch_add(&given_bytes, (uint64_t)released);
            cupool_message(CUPOOL_MSG_INFO, "handed back %llu bytes of device %d for process %u in %llu ms",
                           (unsigned long long)released, ordinal, req.pid, (unsigned long long)ms_since(start));
        }
    }
    ssize_t sent = send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;
    close(fd);
}

/* ---- handing back idle memory by itself (CUPOOL_IDLE_KEEP) ---------------- */

_Static_assert(CUPOOL_MAX_DEVICES <= 64, "a device is a bit of idle_look_t.seen");

typedef struct {
    uint64_t seen;                      /* bit d: device d measured this look */
    uint64_t reserved[CUPOOL_MAX_DEVICES];
    uint64_t pool_used[CUPOOL_MAX_DEVICES];
    uint64_t ready[CUPOOL_MAX_DEVICES]; /* in the pools' use, but idle */
} idle_look_t;

static int measure_context(cupool_context_t *c, void *arg)
{
    idle_look_t *look = arg;
    cupool_device_t *dev = c->device;
    int d = dev->ordinal;
    if (!dev->pooled || d < 0 || d >= CUPOOL_MAX_DEVICES) return 0;
    look->ready[d] += cupool_ready_bytes(c);
    if (look->seen & (1ull << d)) return 0;
    look->seen |= 1ull << d;
    int pushed = cupool_enter_context(c->ctx);
    for (int i = 0; i < dev->npools; i++) {
        cuuint64_t used = 0, reserved = 0;
        real_cuMemPoolGetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
        real_cuMemPoolGetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        look->pool_used[d] += used;
        look->reserved[d] += reserved;
    }
    cupool_leave_context(pushed);
    return 0;
}

/* Of a look at device d: the bytes the program uses (the pools' use less
 * the ready stores'), and the idle bytes, what the pools hold beyond it. */
static uint64_t look_in_use(const idle_look_t *look, int d)
{
    return look->pool_used[d] > look->ready[d] ? look->pool_used[d] - look->ready[d] : 0;
}

static uint64_t look_idle(const idle_look_t *look, int d, uint64_t in_use)
{
    return look->reserved[d] > in_use ? look->reserved[d] - in_use : 0;
}

/* What a request for the device would get back. */
static uint64_t idle_on(int ordinal)
{
    idle_look_t look;
    memset(&look, 0, sizeof look);
    if (ordinal < 0 || ordinal >= CUPOOL_MAX_DEVICES) return 0;
    cupool_each_context(measure_context, &look);
    if (!(look.seen & (1ull << ordinal))) return 0;
    return look_idle(&look, ordinal, look_in_use(&look, ordinal));
}

/* One look: per device, the bytes in use now (the pools' less the ready
 * stores'), the recent peak of them, the idle bytes; a device idle beyond
 * the bound for two looks in a row hands the excess back. */
static void idle_tick(uint64_t bound)
{
    static uint64_t in_use_ring[CUPOOL_MAX_DEVICES][IDLE_PEAK_TICKS];
    static unsigned tick;
    static uint8_t over[CUPOOL_MAX_DEVICES];
    idle_look_t look;
    memset(&look, 0, sizeof look);
    if (!give_begin()) return;
    cupool_each_context(measure_context, &look);
    unsigned slot = tick++ % IDLE_PEAK_TICKS;
    for (int d = 0; d < CUPOOL_MAX_DEVICES; d++) {
        if (!(look.seen & (1ull << d))) {
            over[d] = 0;
            continue;
        }
        uint64_t in_use = look_in_use(&look, d);
        in_use_ring[d][slot] = in_use;
        uint64_t keep = bound;
        if (cupool_is_share(bound)) {
            uint64_t peak = 0;
            for (int i = 0; i < IDLE_PEAK_TICKS; i++)
                if (in_use_ring[d][i] > peak) peak = in_use_ring[d][i];
            keep = (uint64_t)((double)peak * (double)(bound & ~CUPOOL_SHARE_FLAG) / 10000.0);
        }
        uint64_t idle = look_idle(&look, d, in_use);
        if (idle <= keep) {
            over[d] = 0;
            continue;
        }
        if (++over[d] < 2) continue;
        over[d] = 0;
        int64_t released = give_back(d, keep);
        if (released > 0) {
            atomic_fetch_add(&idle_returns, 1);
            atomic_fetch_add(&idle_bytes, (uint64_t)released);
            cupool_message(CUPOOL_MSG_INFO, "handed back %llu idle bytes of device %d (CUPOOL_IDLE_KEEP)",
                           (unsigned long long)released, d);
        }
    }
    give_end();
}

/* ---- the thread ------------------------------------------------------------- */


static void *serve(void *unused)
{
    (void)unused;
    uint64_t bound = cupool_option(CUPOOL_OPT_IDLE_KEEP);
    int idle_on = bound != CUPOOL_SIZE_UNLIMITED;
    int tick_ms = idle_on ? IDLE_TICK_MS : ALONE_TICK_MS;
    uint64_t next_tick = cupool_now_ns() + (uint64_t)tick_ms * 1000000u;
    for (;;) {
        pthread_mutex_lock(&share_lock);
        int stop = stopping;
        pthread_mutex_unlock(&share_lock);
        if (stop) break;
        uint64_t now = cupool_now_ns();
        int wait_ms = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000u) + 1;
        struct pollfd fds[2] = {{.fd = wake_fds[0], .events = POLLIN}, {.fd = listen_fd, .events = POLLIN}};
        int n = poll(fds, listen_fd >= 0 ? 2 : 1, wait_ms);
        if (n < 0 && errno != EINTR) break;
        if (n > 0 && (fds[1].revents & POLLIN)) {
            int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) answer(fd);
        }
        if (cupool_now_ns() >= next_tick) {
            if (idle_on) idle_tick(bound);
            if (cupool_threads_alone()) break;
            next_tick = cupool_now_ns() + (uint64_t)tick_ms * 1000000u;
        }
    }
    pthread_mutex_lock(&share_lock);
    running = 0;
    pthread_cond_broadcast(&share_cond);
    pthread_mutex_unlock(&share_lock);
    return NULL;
}

/* A fork()ed child has no answering thread, and the socket it inherited is
 * its parent's: it closes its copies and never removes the socket.  (A
 * child that execs a program under cupool starts afresh.) */
static void fork_prepare(void)
{
    pthread_mutex_lock(&share_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&share_lock);
}

static void fork_child(void)
{
    if (listen_fd >= 0) close(listen_fd);
    for (int i = 0; i < 2; i++)
        if (wake_fds[i] >= 0) close(wake_fds[i]);
    listen_fd = wake_fds[0] = wake_fds[1] = -1;
    running = stopping = giving = 0;
    owner = 0;
    socket_path[0] = '\0';
    /* A thread of the parent may have been asking, or naming a device. */
    pthread_mutex_init(&ask_lock, NULL);
    pthread_mutex_init(&uuid_lock, NULL);
    pthread_mutex_unlock(&share_lock);
}

/* Removes the sockets in the folder nobody listens on any more (their
 * process ended without removing them). */
static void remove_stale(const char *folder);

/* The socket, bound in the private folder; 0 on success. */
static int make_socket(void)
{
    char folder[sizeof socket_path];
    if (private_folder(folder, sizeof folder - 40) != 0) return -1;
    remove_stale(folder);
    uint8_t id[8];
    if (getrandom(id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id) return -1;
    char hex[17];
    for (int i = 0; i < 8; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    snprintf(socket_path, sizeof socket_path, "%s/%d.%s", folder, (int)getpid(), hex);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, socket_path, strlen(socket_path) + 1);
    /* No umask around the bind: it is the whole process's, and another
     * thread's file made meanwhile would get its mode.  The folder is the
     * user's alone (0700), so nobody else reaches the socket before the
     * chmod; askers refuse a socket that is not 0600 yet. */
    int bound = bind(listen_fd, (struct sockaddr *)&a, sizeof a);
    if (bound != 0 || chmod(socket_path, 0600) != 0 || listen(listen_fd, SHARE_MAX_PEERS) != 0 ||
        pipe2(wake_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        cupool_message(CUPOOL_MSG_WARN, "sharing the device off: cannot make the socket %s: %s", socket_path,
                       strerror(errno));
        if (bound == 0) unlink(socket_path);
        close(listen_fd);
        listen_fd = -1;
        socket_path[0] = '\0';
        return -1;
    }
    owner = getpid();
    return 0;
}

static void init_cond(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&share_cond, &attr);
    pthread_condattr_destroy(&attr);
}

void cupool_share_start(void)
{
    int share = (int)cupool_option(CUPOOL_OPT_SHARE);
    int idle = cupool_option(CUPOOL_OPT_IDLE_KEEP) != CUPOOL_SIZE_UNLIMITED;
    /* Without pools cupool holds nothing to hand back. */
    if ((!share && !idle) || cupool_option(CUPOOL_OPT_POLICY) == CUPOOL_POLICY_OFF) return;
    init_cond();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    pthread_mutex_lock(&share_lock);
    /* The socket makes the wake-up pipe too; CUPOOL_IDLE_KEEP alone needs
     * only the thread, and the pipe to stop it. */
    if (share && make_socket() != 0) share = 0;
    int ready = share || (idle && pipe2(wake_fds, O_CLOEXEC | O_NONBLOCK) == 0);
    running = ready && cupool_thread_start(serve, "cupool-share") == 0;
    if (ready && !running) {
        cupool_message(CUPOOL_MSG_WARN, "sharing the device off: cannot start a thread");
        if (owner == getpid()) unlink(socket_path);
        owner = 0;
    }
    pthread_mutex_unlock(&share_lock);
}

void cupool_share_stop(void)
{
    pthread_mutex_lock(&share_lock);
    if (running) {
        stopping = 1;
        if (wake_fds[1] >= 0) {
            ssize_t w = write(wake_fds[1], "x", 1);
            (void)w;
        }
        struct timespec deadline = cupool_deadline_after_ns(SHARE_STOP_WAIT_NS);
        while (giving && pthread_cond_timedwait(&share_cond, &share_lock, &deadline) != ETIMEDOUT) {
        }
    }
    if (owner == getpid() && socket_path[0]) unlink(socket_path);
    owner = 0;
    pthread_mutex_unlock(&share_lock);
    if (cupool_option(CUPOOL_OPT_STATS) && (asked || given || idle_returns))
        fprintf(stderr,
                "cupool: sharing the device: asked other processes %llu times, %llu answers, %llu bytes handed back "
                "to this one; answered %llu times with %llu bytes; handed back %llu idle bytes %llu times\n",
                (unsigned long long)asked, (unsigned long long)answers, (unsigned long long)received_bytes,
                (unsigned long long)given, (unsigned long long)given_bytes, (unsigned long long)idle_bytes,
                (unsigned long long)idle_returns);
}

/* ---- asking ------------------------------------------------------------------- */

/* Whether a name in the folder is a process's socket ("PID.HEX"), and not
 * this process's own; its pid in *pid. */
static int socket_name(const char *name, pid_t *pid)
{
    char *end;
    long value = strtol(name, &end, 10);
    if (end == name || *end != '.' || value <= 0 || strlen(end + 1) != 16) return 0;
    *pid = (pid_t)value;
    return 1;
}

/* A socket of the folder that may be asked: a socket, of this user, closed
 * to everyone else.  Anything else is not cupool's and is left alone. */
static int askable(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077);
}

/* Connects without waiting: 0 and *fd, or -1 with errno (ECONNREFUSED:
 * nobody listens; EAGAIN: the listener's backlog is full, it is not
 * answering). */
static int connect_now(const char *path, int *fd)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        close(s);
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        int err = errno;
        close(s);
        errno = err;
        return -1;
    }
    *fd = s;
    return 0;
}

static void remove_stale(const char *folder)
{
    DIR *d = opendir(folder);
    if (!d) return;
    char path[sizeof socket_path];
    pid_t pid;
    for (struct dirent *e; (e = readdir(d));) {
        if (!socket_name(e->d_name, &pid)) continue;
        int n = snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        if (n <= 0 || (size_t)n >= sizeof path || !askable(path)) continue;
        int fd;
        if (connect_now(path, &fd) == 0) close(fd);
        else if (errno == ECONNREFUSED) unlink(path);
    }
    closedir(d);
}

/* Connects to every askable socket of the folder but this process's own
 * and sends it req; the connections in peers (at most SHARE_MAX_PEERS: the
 * others are counted in *left_out).  Returns how many. */
static int send_to_peers(const char *folder, const share_request_t *req, struct pollfd *peers, int *left_out)
{
    int npeers = 0;
    *left_out = 0;
    DIR *d = opendir(folder);
    char path[sizeof socket_path];
    pid_t pid;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!socket_name(e->d_name, &pid) || pid == getpid()) continue;
        int n = snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        if (n <= 0 || (size_t)n >= sizeof path || !askable(path)) continue;
        if (npeers == SHARE_MAX_PEERS) {
            (*left_out)++;
            continue;
        }
        int fd;
        if (connect_now(path, &fd) != 0) {
            /* Nobody listens: its process ended without removing it. */
            if (errno == ECONNREFUSED) unlink(path);
            continue;
        }
        pid_t peer;
        if (!peer_same_user(fd, &peer) || peer == getpid() ||
            send(fd, req, sizeof *req, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof *req) {
            close(fd);
            continue;
        }
        peers[npeers++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    if (d) closedir(d);
    return npeers;
}

/* Reads the peers' replies: those that say SHARE_GAVE counted in
 * *answered, their bytes summed in *bytes.  Every peer is waited for until
 * `deadline` (epoch of cupool_now_ns); one that has said SHARE_WORKING by
 * then, until `working_deadline`.  Closes every connection; returns how
 * many had not answered. */
static int collect_replies(struct pollfd *peers, int npeers, const char *magic, uint64_t deadline,
                           uint64_t working_deadline, int *answered, uint64_t *bytes)
{
    uint8_t taken[SHARE_MAX_PEERS] = {0};
    int waiting = npeers, late = 0;
    *answered = 0;
    *bytes = 0;
    while (waiting > 0) {
        uint64_t now = cupool_now_ns();
        if (now >= deadline) {
            /* Past the first bound, only the peers at work are waited for. */
            for (int i = 0; i < npeers; i++)
                if (peers[i].fd >= 0 && !taken[i]) {
                    close(peers[i].fd);
                    peers[i].fd = -1; /* poll() skips it */
                    waiting--;
                    late++;
                }
            if (!waiting || now >= working_deadline) break;
        }
        uint64_t until = now < deadline ? deadline : working_deadline;
        int n = poll(peers, (nfds_t)npeers, (int)((until - now + 999999u) / 1000000u));
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; n > 0 && i < npeers; i++) {
            if (peers[i].fd < 0 || !peers[i].revents) continue;
            share_reply_t reply;
            int ok = recv(peers[i].fd, &reply, sizeof reply, MSG_DONTWAIT) == (ssize_t)sizeof reply &&
                     memcmp(reply.magic, magic, 8) == 0;
            if (ok && reply.status == SHARE_WORKING && !taken[i]) {
                taken[i] = 1; /* the answer follows */
                continue;
            }
            if (ok && reply.status == SHARE_GAVE) {
                (*answered)++;
                *bytes += reply.released;
            }
            close(peers[i].fd);
            peers[i].fd = -1;
            waiting--;
        }
    }
    for (int i = 0; i < npeers; i++)
        if (peers[i].fd >= 0) close(peers[i].fd);
    return late + waiting;
}

/* A request of this magic for the device of c, and the folder to send it
 * in; 0 on success. */
static int make_request(cupool_context_t *c, const char *magic, size_t size, share_request_t *req, char *folder,
                        size_t cap)
{
    memset(req, 0, sizeof *req);
    memcpy(req->magic, magic, 8);
    req->pid = (uint32_t)getpid();
    req->size = size;
    if (device_uuid(c->device->ordinal, req->uuid) != 0 || private_folder(folder, cap - 40) != 0) return -1;
    return 0;
}

int cupool_share_reclaim(cupool_context_t *c, size_t size)
{
    if (!cupool_option(CUPOOL_OPT_SHARE)) return 0;
    share_request_t req;
    char folder[sizeof socket_path];
    if (make_request(c, SHARE_MAGIC, size, &req, folder, sizeof folder) != 0) return 0;

    pthread_mutex_lock(&ask_lock);
    uint64_t start = cupool_now_ns();
    struct pollfd peers[SHARE_MAX_PEERS];
    int left_out, answered;
    int npeers = send_to_peers(folder, &req, peers, &left_out);
    uint64_t released;
    int late = collect_replies(peers, npeers, SHARE_MAGIC, start + (uint64_t)CUPOOL_SHARE_WAIT_MS * 1000000u,
                               start + (uint64_t)CUPOOL_SHARE_GIVE_WAIT_MS * 1000000u, &answered, &released);
    pthread_mutex_unlock(&ask_lock);

    atomic_fetch_add(&asked, 1);
    atomic_fetch_add(&answers, (uint64_t)answered);
    atomic_fetch_add(&received_bytes, released);
    cupool_message(CUPOOL_MSG_INFO,
                   "out of memory on device %d: asked %d other processes (%d not asked), %d answered, %llu bytes "
                   "handed back, in %llu ms",
                   c->device->ordinal, npeers, left_out, answered, (unsigned long long)released,
                   (unsigned long long)ms_since(start));
    /* A process that had not answered by the deadline may still have
     * handed memory back: one more try costs little. */
    return released > 0 || late > 0;
}

uint64_t cupool_share_peers_idle(cupool_context_t *c)
{
    static pthread_mutex_t query_lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t idle_of[CUPOOL_MAX_DEVICES], asked_at[CUPOOL_MAX_DEVICES];
    int d = c->device->ordinal;
    if (!cupool_option(CUPOOL_OPT_SHARE_INFO) || !cupool_option(CUPOOL_OPT_SHARE) || d < 0 || d >= CUPOOL_MAX_DEVICES)
        return 0;
    /* One asker at a time; the others take its answer. */
    pthread_mutex_lock(&query_lock);
    uint64_t now = cupool_now_ns();
    if (!asked_at[d] || now - asked_at[d] >= SHARE_QUERY_KEEP_NS) {
        share_request_t req;
        char folder[sizeof socket_path];
        uint64_t idle = 0;
        if (make_request(c, SHARE_QUERY_MAGIC, 0, &req, folder, sizeof folder) == 0) {
            struct pollfd peers[SHARE_MAX_PEERS];
            int left_out, answered;
            int npeers = send_to_peers(folder, &req, peers, &left_out);
            uint64_t deadline = now + (uint64_t)SHARE_QUERY_WAIT_MS * 1000000u;
            collect_replies(peers, npeers, SHARE_QUERY_MAGIC, deadline, deadline, &answered, &idle);
        }
        idle_of[d] = idle;
        asked_at[d] = cupool_now_ns();
    }
    uint64_t idle = idle_of[d];
    pthread_mutex_unlock(&query_lock);
    return idle;
}
