/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading live statistics pages (livepage.h).  A page is trusted only when
 * the opened file itself (fstat, not its name) is a regular file of the
 * calling user that nobody else may read or write: another user could
 * otherwise plant a page that cupool-top shows as the user's, or a link to
 * somewhere else.  A copy is taken with the page's seqlock: the sequence
 * number even and unchanged across the copy.
 *
 * A page is removed only once its process is proven gone: the page says in
 * which PID namespace its pid counts, and only a reader of that namespace
 * can tell (no process of that pid, or one started at another time).  A
 * page of another namespace (a container sharing the directory) is never
 * removed; it is shown while it is updated.
 */
#include "config.h" /* _GNU_SOURCE */
#include "livepage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_TRIES 200
/* The most time one page may take to copy, in ns (a scrape or a refresh
 * reads every page). */
#define COPY_BUDGET_NS 20000000ull
/* A page of another PID namespace not updated for this long is not shown
 * (its process may be gone; this reader cannot tell). */
#define FOREIGN_QUIET_NS (10 * 1000000000ull)

const char *live_dir(const char *dir)
{
    if (dir && *dir) return dir;
    const char *env = getenv("CUPOOL_LIVE_DIR");
    return env && *env ? env : "/dev/shm";
}

/* The inode of this reader's PID namespace (0: unknown). */
static uint64_t own_pid_ns(void)
{
    static uint64_t ns;
    struct stat st;
    if (!ns && stat("/proc/self/ns/pid", &st) == 0) ns = (uint64_t)st.st_ino;
    return ns;
}

/* Whether pid counts in this reader's namespace (and so can be looked up). */
static int same_namespace(uint64_t page_ns)
{
    return page_ns && page_ns == own_pid_ns();
}

/* Gone, as this reader can prove it: its pid is of this namespace, and
 * there is no process of that pid, or one that started at another time
 * (the pid was reused). */
static int process_gone(const cupool_live_page_t *page)
{
    if (!same_namespace(page->pid_ns)) return 0;
    if (kill(page->pid, 0) != 0 && errno == ESRCH) return 1;
    unsigned long long started = cupool_live_process_start((int)page->pid);
    return started && page->start_time && started != page->start_time;
}

static uint64_t realtime_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void pause_briefly(void)
{
    struct timespec t = {0, 100000};
    nanosleep(&t, NULL);
}

static uint64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The page's sequence number, read from the file; 0 with *ok 0 when the
 * file is too short. */
static uint64_t read_seq(int fd, int *ok)
{
    uint64_t seq = 0;
    *ok = pread(fd, &seq, sizeof seq, (off_t)offsetof(cupool_live_page_t, seq)) == (ssize_t)sizeof seq;
    return seq;
}

/* A consistent copy of the page in fd into out: read with pread, never
 * mapped, so that a page cut short while it is read (by anyone who can
 * write it) fails the read instead of raising SIGBUS.  A page whose
 * sequence number stays odd (its writer stopped mid-update, or a forged
 * page) costs at most COPY_BUDGET_NS. */
static int copy_page(int fd, cupool_live_page_t *out)
{
    uint64_t give_up = monotonic_ns() + COPY_BUDGET_NS;
    for (int i = 0; i < COPY_TRIES; i++) {
        int ok;
        uint64_t before = read_seq(fd, &ok);
        if (!ok) return LIVE_BAD;
        if (before & 1) {
            if (monotonic_ns() >= give_up) break;
            pause_briefly();
            continue;
        }
        if (pread(fd, out, sizeof *out, 0) != (ssize_t)sizeof *out) return LIVE_BAD;
        uint64_t after = read_seq(fd, &ok);
        if (!ok) return LIVE_BAD;
        if (after == before && atomic_load_explicit(&out->seq, memory_order_relaxed) == before) return LIVE_OK;
        if (monotonic_ns() >= give_up) break;
    }
    /* Unsettled: read once more all the same, for who the page says it
     * is (its process may be gone). */
    return pread(fd, out, sizeof *out, 0) == (ssize_t)sizeof *out ? LIVE_BUSY : LIVE_BAD;
}

/* The page at path, whose name says pid and start. */
static int read_path(const char *path, int pid, unsigned long long start, cupool_live_page_t *out, int clean)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? LIVE_MISSING : errno == ELOOP ? LIVE_REFUSED : LIVE_MISSING;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        close(fd);
        return LIVE_REFUSED;
    }
    if ((size_t)st.st_size < sizeof *out) {
        close(fd);
        return LIVE_BAD;
    }
    int r = copy_page(fd, out);
    /* Odd for good: its process was killed in the middle of an update
     * (which only a reader of its namespace can tell, from the name). */
    if (r == LIVE_BUSY && out->pid_ns == own_pid_ns() && out->pid == pid && out->start_time == start &&
        process_gone(out)) {
        if (clean) unlink(path);
        close(fd);
        return LIVE_STALE;
    }
    if (r == LIVE_OK && (out->magic != CUPOOL_LIVE_MAGIC || out->format != CUPOOL_LIVE_FORMAT ||
                         out->size != sizeof *out || out->pid != pid || out->start_time != start ||
                         out->uid != getuid() || out->ndevices > CUPOOL_LIVE_DEVICES))
        r = LIVE_BAD;
    if (r == LIVE_OK) {
        out->command[sizeof out->command - 1] = '\0';
        out->version_text[sizeof out->version_text - 1] = '\0';
        out->policy[sizeof out->policy - 1] = '\0';
        out->free_option[sizeof out->free_option - 1] = '\0';
    }
    if (r == LIVE_OK && !same_namespace(out->pid_ns) && realtime_ns() - out->updated_ns > FOREIGN_QUIET_NS) r = LIVE_STALE;
    else if (r == LIVE_OK && process_gone(out)) {
        r = LIVE_STALE;
        /* Removed only if the name still holds the file checked above: a
         * new process of that pid may have just made its own. */
        struct stat now;
        if (clean && stat(path, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) unlink(path);
    }
    close(fd);
    return r;
}

/* Reads a directory entry's name: cupool.UID.PID.START.RANDOM of this
 * user (*pid, *start); 0 when it is one. */
static int page_name(const char *name, int *pid, unsigned long long *start)
{
    char prefix[64];
    int plen = snprintf(prefix, sizeof prefix, "%s%u.", CUPOOL_LIVE_PREFIX, (unsigned)getuid());
    if (strncmp(name, prefix, (size_t)plen) != 0) return -1;
    const char *p = name + plen;
    char *end;
    errno = 0;
    long value = strtol(p, &end, 10);
    if (end == p || *end != '.' || value <= 0 || value > 0x7fffffff) return -1;
    p = end + 1;
    unsigned long long started = strtoull(p, &end, 10);
    if (end == p || *end != '.' || errno) return -1;
    p = end + 1;
    if (strlen(p) != 16 || strspn(p, "0123456789abcdef") != 16) return -1;
    *pid = (int)value;
    *start = started;
    return 0;
}

/* Reads each page of the directory (of pid only, when pid > 0) into
 * pages; *count read; the most telling failure of a page of that pid in
 * *why. */
static cupool_live_page_t *scan(const char *dir, int only, size_t *count, int clean, size_t *refused, int *why)
{
    *count = 0;
    if (refused) *refused = 0;
    if (why) *why = LIVE_MISSING;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    cupool_live_page_t *pages = NULL;
    size_t cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int pid;
        unsigned long long start;
        if (page_name(e->d_name, &pid, &start) != 0 || (only > 0 && pid != only)) continue;
        if (*count == cap) {
            size_t more = cap ? 2 * cap : 16;
            cupool_live_page_t *grown = realloc(pages, more * sizeof *pages);
            if (!grown) break;
            pages = grown;
            cap = more;
        }
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        int r = read_path(path, pid, start, &pages[*count], clean);
        if (r == LIVE_OK) ++*count;
        else if (r == LIVE_REFUSED && refused) ++*refused;
        if (why && r != LIVE_OK && (*why == LIVE_MISSING || r == LIVE_REFUSED)) *why = r;
    }
    closedir(d);
    return pages;
}

int live_read_pid(const char *dir, int pid, cupool_live_page_t *out, int clean)
{
    size_t n;
    int why;
    cupool_live_page_t *pages = scan(live_dir(dir), pid, &n, clean, NULL, &why);
    /* Pages of that pid in other namespaces too: this one's first. */
    size_t pick = n;
    for (size_t i = 0; i < n; i++)
        if (pick == n || same_namespace(pages[i].pid_ns)) pick = i;
    if (pick < n) *out = pages[pick];
    free(pages);
    return pick < n ? LIVE_OK : why;
}

cupool_live_page_t *live_scan(const char *dir, size_t *count, int clean, size_t *refused)
{
    return scan(live_dir(dir), 0, count, clean, refused, NULL);
}

const struct live_kept_kind live_kept_kinds[CUPOOL_LIVE_KEPT_KINDS] = {
    [CUPOOL_LIVE_KEPT_HOST] = {"pinned_host", "pinned host"},
    [CUPOOL_LIVE_KEPT_MANAGED] = {"managed", "managed"},
};

const char *live_modes(const cupool_live_device_t *d, char *buf, size_t len)
{
    static const char *const names[] = {"auto", "ordered", "deferred", "sync"};
    size_t o = 0;
    buf[0] = '\0';
    for (int m = 1; m < 4; m++)
        if (d->modes & (1u << m)) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%s", o ? "+" : "", names[m]);
    if (!o) snprintf(buf, len, "%s", d->pooled ? "-" : "native");
    return buf;
}

/* ---- text from a page ------------------------------------------------------
 * A page's strings are whatever bytes the process's command line held
 * (cut at a byte count, perhaps inside a character) or whoever wrote the
 * page put there: every output decodes them as UTF-8 and writes only valid
 * UTF-8, with control characters escaped or replaced. */

int live_utf8_next(const char **text, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)*text;
    if (!*p) return 0;
    unsigned c = *p;
    int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            len = 0;
            break;
        }
        v = (v << 6) | (p[i] & 0x3f);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
    if (len == 0 || (len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10ffff ||
        (v >= 0xd800 && v <= 0xdfff)) {
        *text += 1;
        *cp = LIVE_INVALID;
        return 1;
    }
    *text += len;
    *cp = v;
    return len;
}

int live_is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

const char *live_printable(const char *text, char *out, size_t cap, size_t columns)
{
    size_t o = 0, cols = 0;
    uint32_t cp;
    const char *at = text;
    for (int n; cols < columns && (n = live_utf8_next(&at, &cp)) > 0; cols++) {
        if (cp == LIVE_INVALID || live_is_control(cp)) {
            if (o + 2 > cap) break;
            out[o++] = '?';
            continue;
        }
        if (o + (size_t)n + 1 > cap) break;
        memcpy(out + o, at - n, (size_t)n);
        o += (size_t)n;
    }
    out[o] = '\0';
    return out;
}

size_t live_columns(const char *text)
{
    size_t cols = 0;
    uint32_t cp;
    while (live_utf8_next(&text, &cp) > 0) cols++;
    return cols;
}

const char *live_human(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}
