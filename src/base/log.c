/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The call log (CUPOOL_LOG): one JSON object per line per intercepted call,
 * so `jq` and the report tool read it directly.  Each thread copies its calls
 * into its own buffer, which goes to cupool's writer thread when full, when
 * it has held lines for 100 ms (the writer looks every 100 ms, so a thread
 * that went quiet is readable too), and when its thread ends; the writer
 * formats the lines and writes them, whole, to an O_APPEND file, so lines
 * never interleave and a reader sees complete lines while the program runs.
 * Everything is written before the process exits, and calls the exiting
 * thread makes after that (later exit handlers) are written as they come.
 * The file is opened without following a symbolic link, mode 0600, and
 * must be a regular file of the user.  A write that fails (a full disk) is
 * said once, its lines are counted (CUPOOL_STATS), and the log's end line
 * ("cupool.end", written at exit) says whether every line was written; the
 * start line's "end_line" tells a reader to expect one, so that a log
 * without it is known to be cut short.  The call bracket's out-of-line end, which logs
 * and counts a timed call (cupool_call_end_timed), is here too.
 */
#include "log.h"
#include "spin_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_BYTES (256 * 1024)
#define LINE_MAX_BYTES 1024
#define FLUSH_AFTER_NS 100000000ull
/* Full chunks the writer may fall behind by (8 MiB) before a calling thread
 * writes for itself, and free chunks kept for reuse. */
#define MAX_QUEUED 32
#define MAX_SPARE 8

/* Calls and lines on their way to the file, in the order they were logged. */
typedef struct chunk {
    struct chunk *next;
    size_t used;
    char data[CHUNK_BYTES];
} chunk_t;

typedef struct log_buffer {
    cupool_spinlock_t lock;
    chunk_t *chunk; /* the thread's calls not yet handed to the writer */
    uint64_t last_flush_ns;
    int tid;
    struct log_buffer *next;
} log_buffer_t;

int cupool_log_level = -1;
static int log_fd = -1;
static pthread_mutex_t buffers_lock = PTHREAD_MUTEX_INITIALIZER;
static log_buffer_t *buffers;
static pthread_key_t buffer_key;
static CUPOOL_THREAD_LOCAL log_buffer_t *my_buffer;
static CUPOOL_THREAD_LOCAL int my_buffer_gone;
/* Set by the flush at exit.  The exiting thread's later calls (other exit
 * handlers, library destructors) are written at once.  Other threads' later
 * calls are not written: exit kills those threads wherever they are, in the
 * middle of a write() too, which would leave a torn last line that no JSON
 * reader accepts.  Every call that returned before exit() is in the file. */
static atomic_int log_exited;
static CUPOOL_THREAD_LOCAL int flushed_at_exit;

/* Whether this thread may still write, checked under queue_lock: the exit
 * flush takes it last, so a thread that takes it after the flush sees
 * log_exited. */
static int may_write_locked(void)
{
    return !atomic_load(&log_exited) || flushed_at_exit;
}

/*
 * The writer: formatting a line and write() into the page cache were most of
 * a logged call's cost (measured on the GPU machine and under perf), so full
 * chunks go to one thread of cupool's that formats and writes them, in the
 * order they were handed over.
 * write_lock is held by whoever writes a chunk, taken under queue_lock, so
 * the file receives chunks in queue order even when a calling thread writes
 * for itself (no writer thread, or the writer too far behind).
 */
enum { WRITER_NONE, WRITER_RUNNING, WRITER_FAILED };
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static chunk_t *queue_head, **queue_tail = &queue_head, *spare;
static int queued, spares, writer_state;
/* The chunk the writer took off the queue and has not recycled yet (under
 * queue_lock): a fork() can come while it writes it, and only this pointer
 * lets the child, which has no writer, take the chunk back. */
static chunk_t *in_writer;

/* Lines that could not be written, the first failure's errno, whether it
 * has been said, and whether the file ends in the middle of a line (a write
 * cut short): the next write starts a new line, so that the torn one stays
 * a line of its own that readers reject, not the start of the next. */
static atomic_ullong lost_lines;
static atomic_int write_errno, failure_said;
static int torn; /* under write_lock */
static char log_path[4096];

/* A write that failed: the lines of what is left are lost. */
static void write_failed(int err, const char *data, size_t len)
{
    int none = 0;
    atomic_compare_exchange_strong(&write_errno, &none, err ? err : EIO);
    unsigned long long lines = 0;
    for (size_t i = 0; i < len; i++) lines += data[i] == '\n';
    atomic_fetch_add(&lost_lines, lines);
}

static void write_all(const char *data, size_t len)
{
    if (!len) return;
    if (torn) {
        ssize_t n;
        do n = write(log_fd, "\n", 1);
        while (n < 0 && errno == EINTR);
        if (n != 1) {
            write_failed(n < 0 ? errno : 0, data, len);
            return;
        }
        torn = 0;
    }
    while (len) {
        ssize_t n = write(log_fd, data, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            write_failed(n < 0 ? errno : 0, data, len);
            return;
        }
        data += n;
        len -= (size_t)n;
        torn = data[-1] != '\n';
    }
}

/* Says once that the log is incomplete; never called with write_lock held
 * (the message goes into the log too). */
static void say_failure(void)
{
    if (!atomic_load_explicit(&write_errno, memory_order_relaxed) || atomic_exchange(&failure_said, 1)) return;
    cupool_message(CUPOOL_MSG_WARN, "cannot write the log %s (%s): it is incomplete; its end line and CUPOOL_STATS count the lines lost",
                   log_path, strerror(atomic_load(&write_errno)));
}

unsigned long long cupool_log_lost(int *err)
{
    *err = atomic_load(&write_errno);
    return atomic_load(&lost_lines);
}

/* Written chunks are kept for reuse, a few of them. */
static void recycle_locked(chunk_t *c)
{
    if (spares < MAX_SPARE) {
        c->next = spare;
        spare = c;
        spares++;
    } else {
        free(c);
    }
}

/* Pops every queued chunk; the caller writes them holding write_lock. */
static chunk_t *take_queue_locked(void)
{
    chunk_t *all = queue_head;
    queue_head = NULL;
    queue_tail = &queue_head;
    queued = 0;
    return all;
}

/*
 * A chunk holds entries: a call (its cupool_call_t, result, end time and
 * thread, copied as they are) or a line of text (start lines, messages).
 * Calls are formatted into JSON only when written, by whoever writes: the
 * calling thread copies about 100 bytes and goes on.
 */
enum { ENTRY_CALL, ENTRY_TEXT };
typedef struct entry_head {
    uint32_t kind, len; /* len: bytes of what follows, before padding */
} entry_head_t;
typedef struct call_entry {
    cupool_call_t call;
    uint64_t end_ns;
    CUresult result;
    int tid;
} call_entry_t;
#define ENTRY_BYTES(len) (sizeof(entry_head_t) + (((len) + 7) & ~(size_t)7))

/* Room for an entry of len bytes at the end of c (which the caller checked). */
static void *put_entry(chunk_t *c, uint32_t kind, size_t len)
{
    entry_head_t *h = (entry_head_t *)(void *)(c->data + c->used);
    h->kind = kind;
    h->len = (uint32_t)len;
    c->used += ENTRY_BYTES(len);
    return h + 1;
}

static size_t format_call(char *text, const cupool_call_t *c, CUresult result, uint64_t end_ns, int tid);

/* Formatted lines on their way to write(); only used under write_lock. */
static char text_out[64 * 1024];

static void write_entries(const chunk_t *c)
{
    size_t out = 0;
    for (size_t at = 0; at < c->used;) {
        const entry_head_t *h = (const entry_head_t *)(const void *)(c->data + at);
        if (out + LINE_MAX_BYTES > sizeof text_out) {
            write_all(text_out, out);
            out = 0;
        }
        if (h->kind == ENTRY_CALL) {
            const call_entry_t *e = (const call_entry_t *)(const void *)(h + 1);
            out += format_call(text_out + out, &e->call, e->result, e->end_ns, e->tid);
        } else {
            memcpy(text_out + out, h + 1, h->len);
            out += h->len;
        }
        at += ENTRY_BYTES(h->len);
    }
    write_all(text_out, out);
}

static void write_chunks(chunk_t *list)
{
    for (chunk_t *c = list; c; c = c->next) write_entries(c);
}

static void recycle_list(chunk_t *list)
{
    pthread_mutex_lock(&queue_lock);
    while (list) {
        chunk_t *next = list->next;
        recycle_locked(list);
        list = next;
    }
    pthread_mutex_unlock(&queue_lock);
}

static void hand_off_locked(log_buffer_t *b, int sync);

/* Signed: another thread may have stamped last_flush_ns after `now` was
 * read. */
static int flush_due(const log_buffer_t *b, uint64_t now)
{
    return (int64_t)(now - b->last_flush_ns) >= (int64_t)FLUSH_AFTER_NS;
}

/* Hands over the lines of buffers left unflushed for FLUSH_AFTER_NS, so a
 * thread that logged a few calls and went quiet is still readable while the
 * program runs.  A buffer whose thread holds its lock is left for the next
 * round. */
static void hand_off_stale(void)
{
    uint64_t now = cupool_now_ns();
    pthread_mutex_lock(&buffers_lock);
    for (log_buffer_t *b = buffers; b; b = b->next) {
        if (!cupool_spin_trylock(&b->lock)) continue;
        if (b->chunk->used && flush_due(b, now)) {
            hand_off_locked(b, 0);
            b->last_flush_ns = now;
        }
        cupool_spin_unlock(&b->lock);
    }
    pthread_mutex_unlock(&buffers_lock);
}

/* CLOCK_MONOTONIC: a change of the wall clock neither stalls nor hurries
 * the writer's rounds. */
static void init_queue_cond(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&queue_cond, &attr);
    pthread_condattr_destroy(&attr);
}

static struct timespec flush_deadline(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += FLUSH_AFTER_NS % 1000000000ull;
    t.tv_sec += (time_t)(FLUSH_AFTER_NS / 1000000000ull) + t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    return t;
}

static int passed(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

static void *writer_main(void *arg)
{
    (void)arg;
    /* Nobody should cancel cupool's thread; if someone does, it must not
     * go holding write_lock. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    /* A round of hand_off_stale is due at a fixed time, however often
     * hand-offs wake the writer before it. */
    struct timespec stale_round = flush_deadline();
    unsigned rounds = 0;
    pthread_mutex_lock(&queue_lock);
    for (;;) {
        if (passed(&stale_round)) {
            pthread_mutex_unlock(&queue_lock);
            hand_off_stale();
            stale_round = flush_deadline();
            /* Every third round (300 ms): once the program's threads have
             * all ended, the writer ends too, so that the process can; the
             * exit flush, run by whichever of cupool's threads ends last,
             * writes what is left. */
            if (++rounds % 3 == 0 && cupool_threads_alone()) break;
            pthread_mutex_lock(&queue_lock);
        }
        if (!queue_head || atomic_load(&log_exited)) {
            pthread_cond_timedwait(&queue_cond, &queue_lock, &stale_round);
            continue;
        }
        chunk_t *c = queue_head;
        queue_head = c->next;
        if (!queue_head) queue_tail = &queue_head;
        queued--;
        c->next = NULL;
        in_writer = c;
        pthread_mutex_lock(&write_lock);
        pthread_mutex_unlock(&queue_lock);
        write_entries(c);
        pthread_mutex_unlock(&write_lock);
        say_failure();
        pthread_mutex_lock(&queue_lock);
        in_writer = NULL;
        recycle_locked(c);
    }
    /* Lines handed over from now on are written by the threads that hand
     * them over. */
    pthread_mutex_lock(&queue_lock);
    writer_state = WRITER_FAILED;
    pthread_mutex_unlock(&queue_lock);
    return NULL;
}

/* Started with the first buffer (and in a fork()ed child at its first hand
 * over). */
static void start_writer_locked(void)
{
    writer_state = cupool_thread_start(writer_main, "cupool-log") == 0 ? WRITER_RUNNING : WRITER_FAILED;
}

/* Writes, here and in order, everything queued, then own and then line
 * (either may be NULL).  Called with queue_lock held; releases it.
 * write() is a cancellation point: a program that cancels a thread while
 * it writes here must not leave write_lock held, or every other thread
 * would hang on it.  The cancel, if any, comes at the thread's next
 * cancellation point. */
static void write_queue_then_unlock(const chunk_t *own, const char *line, size_t len)
{
    int cancel_state;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
    chunk_t *older = take_queue_locked();
    pthread_mutex_lock(&write_lock);
    pthread_mutex_unlock(&queue_lock);
    write_chunks(older);
    if (own) write_entries(own);
    if (line) write_all(line, len);
    pthread_mutex_unlock(&write_lock);
    say_failure();
    recycle_list(older);
    pthread_setcancelstate(cancel_state, NULL);
}

/* A line with no buffer to go into (out of memory, its thread ending, or
 * no thread buffer once the process exits): written here, after everything
 * queued before it, so its thread's lines stay in order. */
static void write_line_now(const char *line, size_t len)
{
    pthread_mutex_lock(&queue_lock);
    if (may_write_locked()) write_queue_then_unlock(NULL, line, len);
    else pthread_mutex_unlock(&queue_lock);
}

/* Hands the buffer's lines to the writer (the buffer's lock held) and gives
 * the buffer an empty chunk.  With no writer, one too far behind, no memory
 * for a new chunk, sync set, or the process past its exit flush (the writer
 * writes no more), the lines are written here instead, after everything
 * queued before them, and the buffer keeps its chunk; or, past the exit
 * flush in a thread that may not write, they stay where they are. */
static void hand_off_locked(log_buffer_t *b, int sync)
{
    chunk_t *full = b->chunk;
    if (!full->used) return;
    pthread_mutex_lock(&queue_lock);
    if (atomic_load(&log_exited)) {
        /* The lines stay in the buffer of a thread that may not write. */
        if (!flushed_at_exit) {
            pthread_mutex_unlock(&queue_lock);
            return;
        }
        sync = 1;
    }
    if (!sync) {
        if (writer_state == WRITER_NONE) start_writer_locked();
        chunk_t *fresh = spare;
        if (fresh) {
            spare = fresh->next;
            spares--;
        } else if (writer_state == WRITER_RUNNING && queued < MAX_QUEUED) {
            fresh = malloc(sizeof *fresh);
        }
        if (fresh && writer_state == WRITER_RUNNING && queued < MAX_QUEUED) {
            full->next = NULL;
            *queue_tail = full;
            queue_tail = &full->next;
            queued++;
            pthread_cond_signal(&queue_cond);
            pthread_mutex_unlock(&queue_lock);
            fresh->used = 0;
            b->chunk = fresh;
            return;
        }
        if (fresh) recycle_locked(fresh);
    }
    write_queue_then_unlock(full, NULL, 0);
    full->used = 0;
}

static void thread_done(void *arg)
{
    log_buffer_t *b = arg;
    /* Another library's thread-exit destructor may still call the driver
     * after this one: such late lines are written unbuffered. */
    my_buffer = NULL;
    my_buffer_gone = 1;
    /* Handed off before buffers_lock is let go: the exit flush, which walks
     * the buffers and then writes the queue, sees these lines in one place
     * or the other (after it, hand_off_locked writes them itself). */
    pthread_mutex_lock(&buffers_lock);
    for (log_buffer_t **p = &buffers; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    cupool_spin_lock(&b->lock);
    hand_off_locked(b, 0);
    cupool_spin_unlock(&b->lock);
    pthread_mutex_unlock(&buffers_lock);
    pthread_mutex_lock(&queue_lock);
    if (b->chunk) recycle_locked(b->chunk);
    pthread_mutex_unlock(&queue_lock);
    free(b);
}

static log_buffer_t *buffer(void)
{
    if (CUPOOL_LIKELY(my_buffer != NULL)) return my_buffer;
    if (my_buffer_gone) return NULL;
    log_buffer_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    if (!(b->chunk = malloc(sizeof *b->chunk))) {
        free(b);
        return NULL;
    }
    b->chunk->used = 0;
    b->tid = (int)syscall(SYS_gettid);
    b->last_flush_ns = cupool_now_ns();
    pthread_mutex_lock(&buffers_lock);
    b->next = buffers;
    buffers = b;
    pthread_mutex_unlock(&buffers_lock);
    pthread_mutex_lock(&queue_lock);
    if (writer_state == WRITER_NONE) start_writer_locked();
    pthread_mutex_unlock(&queue_lock);
    pthread_setspecific(buffer_key, b);
    return my_buffer = b;
}

/* The calling thread's buffer, or NULL when it has none: once the process
 * has flushed the log at exit, threads keep the buffers they have (each
 * line is written at once, see add_done) but get no new one. */
static log_buffer_t *buffer_for_call(void)
{
    if (atomic_load_explicit(&log_exited, memory_order_relaxed)) return my_buffer;
    return buffer();
}

/* Whether the buffer (its lock held) has room for an entry of len bytes,
 * after handing its lines over if need be.  No room only past the exit
 * flush, in a thread whose lines are no longer written. */
static int room_for(log_buffer_t *b, size_t len)
{
    if (CUPOOL_UNLIKELY(b->chunk->used + ENTRY_BYTES(len) > CHUNK_BYTES)) hand_off_locked(b, 0);
    return b->chunk->used + ENTRY_BYTES(len) <= CHUNK_BYTES;
}

/* After an entry was added (the buffer's lock held): hands the buffer over
 * when it has held lines long enough, and at once after the exit flush.
 * log_exited is read under the lock the exit flush takes too, so an entry
 * added after the flush passed this buffer is seen here. */
static void add_done(log_buffer_t *b, uint64_t now)
{
    if (atomic_load(&log_exited) || flush_due(b, now)) {
        hand_off_locked(b, 0);
        b->last_flush_ns = now;
    }
}

static void expand_path(const char *pattern, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < len; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(out + o, len - o, "%d", (int)getpid());
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o < len ? o : len - 1] = '\0';
}

/* What a path that is not a regular file is, for a message; NULL when it
 * is one (or there is nothing there). */
static const char *not_regular(mode_t mode)
{
    if (S_ISREG(mode)) return NULL;
    if (S_ISLNK(mode)) return "a symbolic link, which cupool does not follow";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    return "something else";
}

/* Only a regular file of this user is a log.  Opened without blocking: a
 * FIFO planted at a guessable path would otherwise hold the program at its
 * start until someone reads it; what is there is then named, whatever error
 * the open gave (in a sticky directory the kernel answers EACCES for a link
 * or FIFO of another user's, ELOOP for a link). */
static int open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    struct stat st;
    if (fd < 0) {
        int err = errno;
        const char *what = lstat(path, &st) == 0 ? not_regular(st.st_mode) : NULL;
        if (what) cupool_message(CUPOOL_MSG_WARN, "not logging: %s is %s; only a regular file is a log", path, what);
        else cupool_message(CUPOOL_MSG_WARN, "not logging: cannot open %s: %s", path, strerror(err));
        return -1;
    }
    const char *what = fstat(fd, &st) != 0 ? "cannot be examined" : not_regular(st.st_mode);
    if (what || st.st_uid != geteuid()) {
        if (what) cupool_message(CUPOOL_MSG_WARN, "not logging: %s is %s; only a regular file is a log", path, what);
        else cupool_message(CUPOOL_MSG_WARN, "not logging: %s belongs to another user", path);
        close(fd);
        return -1;
    }
    /* Writes to a regular file never wait anyway; the flag is dropped so
     * that the file's descriptor is an ordinary one. */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

/* fork() without exec: the child must neither write the parent's buffered
 * lines a second time nor add its own lines to the parent's file when the
 * path names the pid. */
static char log_pattern[4096];
static int start_line_due;

static void fork_prepare(void)
{
    pthread_mutex_lock(&buffers_lock);
    for (log_buffer_t *b = buffers; b; b = b->next) cupool_spin_lock(&b->lock);
    pthread_mutex_lock(&queue_lock);
    pthread_mutex_lock(&write_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&write_lock);
    pthread_mutex_unlock(&queue_lock);
    for (log_buffer_t *b = buffers; b; b = b->next) cupool_spin_unlock(&b->lock);
    pthread_mutex_unlock(&buffers_lock);
}

static void write_start_line(void);

static void fork_child(void)
{
    /* The parent's lines (buffered or queued) are the parent's to write,
     * and the child has no writer thread until it needs one. */
    chunk_t *parents = take_queue_locked();
    while (parents) {
        chunk_t *next = parents->next;
        recycle_locked(parents);
        parents = next;
    }
    if (in_writer) recycle_locked(in_writer);
    in_writer = NULL;
    writer_state = WRITER_NONE;
    init_queue_cond();
    pthread_mutex_unlock(&write_lock);
    pthread_mutex_unlock(&queue_lock);
    for (log_buffer_t *b = buffers; b; b = b->next) {
        b->chunk->used = 0;
        cupool_spin_unlock(&b->lock);
    }
    pthread_mutex_unlock(&buffers_lock);
    if (log_fd != STDERR_FILENO && strstr(log_pattern, "%p")) {
        expand_path(log_pattern, log_path, sizeof log_path);
        close(log_fd);
        log_fd = open_log(log_path);
        atomic_store(&lost_lines, 0);
        atomic_store(&write_errno, 0);
        atomic_store(&failure_said, 0);
        torn = 0;
        /* The start line waits for the child's first line: a child that
         * execs writes its own from the new image instead. */
        if (log_fd >= 0) start_line_due = 1;
        else cupool_log_level = -1;
    }
}

static void write_start_line(void)
{
    char line[LINE_MAX_BYTES];
    int n = snprintf(line, sizeof line,
                     "{\"t\":%llu,\"call\":\"cupool.start\",\"pid\":%d,\"version\":\"%s\",\"policy\":\"%s\","
                     "\"free\":\"%s\",\"memset\":\"%s\",\"end_line\":true}\n",
                     (unsigned long long)cupool_now_ns(), (int)getpid(), PACKAGE_VERSION,
                     cupool_option_string(CUPOOL_OPT_POLICY), cupool_option_string(CUPOOL_OPT_FREE),
                     cupool_option_string(CUPOOL_OPT_MEMSET));
    if (n > 0) write_all(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

void cupool_log_open(void)
{
    /* Messages go into the log too, once it is open (cupool_log_message
     * writes nothing before). */
    cupool_message_sink(cupool_log_message);
    /* "0" means no log, as for the other switches, not a file named 0. */
    const char *pattern = cupool_option_string(CUPOOL_OPT_LOG);
    if (!pattern || !*pattern || strcmp(pattern, "0") == 0) return;
    if (strcmp(pattern, "-") == 0) {
        log_fd = STDERR_FILENO;
        snprintf(log_path, sizeof log_path, "(standard error)");
    } else {
        expand_path(pattern, log_path, sizeof log_path);
        if ((log_fd = open_log(log_path)) < 0) return;
    }
    init_queue_cond();
    pthread_key_create(&buffer_key, thread_done);
    cupool_log_level = (int)cupool_option(CUPOOL_OPT_LOG_LEVEL);
    snprintf(log_pattern, sizeof log_pattern, "%s", pattern);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    write_start_line();
}

static void append(const char *line, size_t len, uint64_t now)
{
    if (CUPOOL_UNLIKELY(start_line_due)) {
        start_line_due = 0;
        write_start_line();
    }
    log_buffer_t *b = buffer_for_call();
    if (!b) {
        write_line_now(line, len);
        return;
    }
    cupool_spin_lock(&b->lock);
    if (!room_for(b, len)) {
        cupool_spin_unlock(&b->lock);
        return;
    }
    memcpy(put_entry(b->chunk, ENTRY_TEXT, len), line, len);
    add_done(b, now);
    cupool_spin_unlock(&b->lock);
}

static const char *const route_names[] = {"none", "pool", "native", "rewritten"};
static const char *const mode_names[] = {"auto", "ordered", "deferred", "sync"};

/* A line is built by hand: snprintf with a dozen conversions costs about a
 * microsecond, several times the rest of a logged call.  Its length is
 * bounded (fixed keys, 8 numbers of at most 20 characters, 4 strings cut at
 * STRING_MAX): well under LINE_MAX_BYTES, so no piece checks for room, and
 * literals copy with a size known at compile time (inlined, no call). */
#define STRING_MAX 96
/* keys and punctuation, 6 decimal numbers, 2 hex numbers, 4 strings */
_Static_assert(120 + 6 * 21 + 2 * 20 + 4 * STRING_MAX < LINE_MAX_BYTES, "a call's line fits LINE_MAX_BYTES");

typedef struct line {
    char *p;
} line_t;

static inline void put_bytes(line_t *l, const char *s, size_t n)
{
    memcpy(l->p, s, n);
    l->p += n;
}

static void put_str(line_t *l, const char *s)
{
    put_bytes(l, s, strnlen(s, STRING_MAX));
}

#define put_lit(l, s) put_bytes((l), (s), sizeof(s) - 1)

/* From the bit length: log10(2) ~ 1233/4096, corrected by one comparison. */
static int decimal_digits(uint64_t v)
{
    static const uint64_t powers[] = {1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
                                      100000000ull, 1000000000ull, 10000000000ull, 100000000000ull,
                                      1000000000000ull, 10000000000000ull, 100000000000000ull,
                                      1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
                                      1000000000000000000ull, 10000000000000000000ull};
    int t = ((64 - __builtin_clzll(v | 1)) * 1233) >> 12;
    int n = t + 1 - (v < powers[t]);
    return n > 0 ? n : 1;
}

/* Digits are written in place, from the last one back: no copy. */
static void put_u64(line_t *l, uint64_t v)
{
    /* Two digits per division. */
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                "8081828384858687888990919293949596979899";
    l->p += decimal_digits(v);
    char *p = l->p;
    while (v >= 100) {
        unsigned two = (unsigned)(v % 100);
        v /= 100;
        *--p = pairs[2 * two + 1];
        *--p = pairs[2 * two];
    }
    if (v >= 10) {
        *--p = pairs[2 * v + 1];
        *--p = pairs[2 * v];
    } else {
        *--p = (char)('0' + v);
    }
}

static void put_i64(line_t *l, int64_t v)
{
    if (v < 0) put_lit(l, "-");
    put_u64(l, v < 0 ? (uint64_t)-v : (uint64_t)v);
}

static void put_hex(line_t *l, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    int nibbles = v ? (64 - __builtin_clzll(v) + 3) / 4 : 1;
    put_lit(l, "\"0x");
    l->p += nibbles;
    for (char *p = l->p; nibbles--; v >>= 4) *--p = hex[v & 15];
    put_lit(l, "\"");
}

/* Writes the JSON line of one call at text (LINE_MAX_BYTES of room). */
static size_t format_call(char *text, const cupool_call_t *c, CUresult result, uint64_t end_ns, int tid)
{
    line_t line = {text}, *l = &line;
    put_lit(l, "{\"t\":");
    put_u64(l, c->start_ns);
    put_lit(l, ",\"tid\":");
    put_i64(l, tid);
    put_lit(l, ",\"call\":\"");
    put_str(l, cupool_symbol_name(c->sym));
    put_lit(l, "\",\"ptr\":");
    put_hex(l, (uint64_t)c->ptr);
    put_lit(l, ",\"size\":");
    put_u64(l, c->size);
    put_lit(l, ",\"dev\":");
    put_i64(l, c->device);
    put_lit(l, ",\"stream\":");
    put_hex(l, (uint64_t)(uintptr_t)c->stream);
    put_lit(l, ",\"route\":\"");
    put_str(l, route_names[c->route]);
    put_lit(l, "\",\"mode\":\"");
    put_str(l, c->mode >= 0 ? mode_names[c->mode] : "none");
    put_lit(l, "\",\"result\":\"");
    put_str(l, cupool_result_name(result));
    put_lit(l, "\",\"dur_ns\":");
    put_u64(l, end_ns - c->start_ns);
    put_lit(l, ",\"reserved\":");
    put_u64(l, c->reserved);
    if (c->from_store) put_lit(l, ",\"store\":true");
    if (c->kind != CUPOOL_KIND_DEVICE) {
        if (c->kind == CUPOOL_KIND_HOST) put_lit(l, ",\"kind\":\"host\",\"flags\":");
        else put_lit(l, ",\"kind\":\"managed\",\"flags\":");
        put_u64(l, c->flags);
    }
    put_lit(l, "}\n");
    return (size_t)(l->p - text);
}

void cupool_log_call(const cupool_call_t *c, CUresult result, uint64_t end_ns)
{
    if (cupool_log_level < CUPOOL_LOG_CALL && result == CUDA_SUCCESS) return;
    if (CUPOOL_UNLIKELY(start_line_due)) {
        start_line_due = 0;
        write_start_line();
    }
    log_buffer_t *b = buffer_for_call();
    if (CUPOOL_UNLIKELY(!b)) {
        char text[LINE_MAX_BYTES];
        size_t len = format_call(text, c, result, end_ns, (int)syscall(SYS_gettid));
        write_line_now(text, len);
        return;
    }
    /* Copied as it is; formatted when written (write_entries). */
    cupool_spin_lock(&b->lock);
    if (CUPOOL_UNLIKELY(!room_for(b, sizeof(call_entry_t)))) {
        cupool_spin_unlock(&b->lock);
        return;
    }
    call_entry_t *e = put_entry(b->chunk, ENTRY_CALL, sizeof *e);
    e->call = *c;
    e->end_ns = end_ns;
    e->result = result;
    e->tid = b->tid;
    add_done(b, end_ns);
    cupool_spin_unlock(&b->lock);
}

void cupool_log_message(int level, const char *text)
{
    if (log_fd < 0 || cupool_log_level < 0) return;
    if (level == CUPOOL_MSG_INFO || (level == CUPOOL_MSG_WARN && cupool_log_level < CUPOOL_LOG_WARN)) return;
    char line[LINE_MAX_BYTES];
    size_t o = (size_t)snprintf(line, sizeof line, "{\"t\":%llu,\"call\":\"cupool.message\",\"level\":\"%s\",\"text\":\"",
                                (unsigned long long)cupool_now_ns(), level == CUPOOL_MSG_ERROR ? "error" : "warning");
    /* Room kept for the longest escape (6) and the closing "}\n plus NUL. */
    for (const char *p = text; *p && o + 6 + 4 <= sizeof line; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') line[o++] = '\\', line[o++] = (char)ch;
        else if (ch < 0x20) o += (size_t)snprintf(line + o, sizeof line - o, "\\u%04x", ch);
        else line[o++] = (char)ch;
    }
    o += (size_t)snprintf(line + o, sizeof line - o, "\"}\n");
    append(line, o, cupool_now_ns());
}

/* At exit: everything buffered or queued is written before this returns,
 * and later calls are written as they come. */
void cupool_log_flush(void)
{
    if (log_fd < 0) return;
    flushed_at_exit = 1;
    atomic_store(&log_exited, 1);
    pthread_mutex_lock(&buffers_lock);
    for (log_buffer_t *b = buffers; b; b = b->next) {
        cupool_spin_lock(&b->lock);
        hand_off_locked(b, 1);
        cupool_spin_unlock(&b->lock);
    }
    pthread_mutex_unlock(&buffers_lock);
    pthread_mutex_lock(&queue_lock);
    write_queue_then_unlock(NULL, NULL, 0);
    /* The end line: whether every line before it was written. */
    int err;
    unsigned long long lost = cupool_log_lost(&err);
    char line[LINE_MAX_BYTES];
    int n = lost || err ? snprintf(line, sizeof line,
                                   "{\"t\":%llu,\"call\":\"cupool.end\",\"pid\":%d,\"complete\":false,\"lost_lines\":%llu,"
                                   "\"error\":\"%s\"}\n",
                                   (unsigned long long)cupool_now_ns(), (int)getpid(), lost, strerror(err))
                        : snprintf(line, sizeof line, "{\"t\":%llu,\"call\":\"cupool.end\",\"pid\":%d,\"complete\":true}\n",
                                   (unsigned long long)cupool_now_ns(), (int)getpid());
    if (n > 0 && (size_t)n < sizeof line) write_line_now(line, (size_t)n);
}

/* ---- the call bracket (base.h) -------------------------------------------- */

CUresult cupool_call_end_timed(cupool_call_t *c, CUresult result)
{
    uint64_t served = 0, end = cupool_now_ns();
    /* Time in cupool means the calls cupool served itself; the rest is the
     * driver's own time, which the program would spend anyway. */
    if (c->route == CUPOOL_ROUTE_POOL || c->route == CUPOOL_ROUTE_REWRITTEN) served = end - c->start_ns;
    if (cupool_log_level >= 0) cupool_log_call(c, result, end);
    cupool_stats_call(c->sym, served);
    return result;
}
