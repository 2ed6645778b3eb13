/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cupool top --prometheus PORT`: the live statistics pages in Prometheus's
 * text exposition format (version 0.0.4) at http://127.0.0.1:PORT/metrics.
 * One thread and one poll loop: every client socket is non-blocking, a
 * request may be at most REQUEST_MAX bytes and must arrive, and its answer
 * leave, within CLIENT_TIMEOUT_MS; beyond MAX_CLIENTS at once the client
 * that has been sending its request longest gives up its slot to the new
 * one (a client that is being answered keeps it).  So slow or broken
 * clients, however many, cost a slot for a few seconds and can never keep
 * a scrape out; and a page that never settles costs a scrape at most 20 ms
 * (livepage.c).
 *
 * The counters are the user's: only loopback is listened on, and a TCP
 * client is answered only when the kernel's table of connections
 * (/proc/net/tcp) says its socket belongs to the same user as this one
 * (any local user can reach 127.0.0.1); with a path instead of a port the
 * endpoint is a Unix socket of mode 0600 whose peers are checked with
 * SO_PEERCRED.  The labels name each process's executable, not its command
 * line, whose arguments may hold secrets (--command-lines puts them back).
 */
#include "config.h" /* _GNU_SOURCE */
#include "livepage.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 32
#define REQUEST_MAX 8192
#define CLIENT_TIMEOUT_MS 5000

/* ---- the exposition ------------------------------------------------------ */

typedef struct metric {
    const char *name, *type, *help;
    size_t offset; /* of a uint64_t in cupool_live_device_t */
} metric_t;

#define FIELD(f) offsetof(cupool_live_device_t, f)
static const metric_t metrics[] = {
    {"cupool_in_use_bytes", "gauge", "Pooled bytes allocated and not freed.", FIELD(in_use)},
    {"cupool_reserved_bytes", "gauge", "Bytes the device's cupool pools hold.", FIELD(reserved)},
    {"cupool_peak_in_use_bytes", "gauge", "Most pooled bytes in use so far.", FIELD(peak_in_use)},
    {"cupool_peak_reserved_bytes", "gauge", "Most bytes the pools held so far.", FIELD(peak_reserved)},
    {"cupool_pooled_allocations_total", "counter", "Allocations served from a pool.", FIELD(pooled_allocs)},
    {"cupool_pooled_frees_total", "counter", "Frees of pooled allocations.", FIELD(pooled_frees)},
    {"cupool_native_allocations_total", "counter", "Allocations passed to cuMemAlloc.", FIELD(native_allocs)},
    {"cupool_allocations_per_second", "gauge", "Allocations per second over the last second.", FIELD(alloc_rate)},
    {"cupool_frees_per_second", "gauge", "Pooled frees per second over the last second.", FIELD(free_rate)},
    {"cupool_oom_retries_total", "counter", "Allocations retried after out of memory.", FIELD(oom_retries)},
    {"cupool_trims_total", "counter", "Pool trims after out of memory.", FIELD(trims)},
    {"cupool_rewritten_memsets_total", "counter", "Graph memset nodes rewritten into kernel nodes.",
     FIELD(rewritten_memsets)},
};

/* Pinned host and managed memory, labelled by kind (offsets in cupool_live_kept_t). */
#define KEPT(f) offsetof(cupool_live_kept_t, f)
static const metric_t kept_metrics[] = {
    {"cupool_kept_bytes", "gauge", "Freed pinned host or managed bytes cupool keeps for reuse.", KEPT(kept)},
    {"cupool_kept_allocations_total", "counter", "Pinned host or managed allocations cupool tracked.", KEPT(allocs)},
    {"cupool_kept_reuses_total", "counter", "Pinned host or managed allocations served by a kept block.",
     KEPT(reused)},
    {"cupool_kept_frees_total", "counter", "Frees of tracked pinned host or managed blocks.", KEPT(frees)},
};

/* Sharing one GPU (CUPOOL_SHARE, CUPOOL_IDLE_KEEP), per process (offsets in cupool_live_share_t). */
#define SHARE(f) offsetof(cupool_live_share_t, f)
static const metric_t share_metrics[] = {
    {"cupool_share_requests_total", "counter", "Allocations that asked the other cupool processes for memory.",
     SHARE(asked)},
    {"cupool_share_received_bytes_total", "counter", "Bytes other cupool processes handed back when asked.",
     SHARE(received_bytes)},
    {"cupool_share_given_total", "counter", "Requests of other cupool processes answered by handing memory back.",
     SHARE(given)},
    {"cupool_share_given_bytes_total", "counter", "Bytes handed back to other cupool processes' requests.",
     SHARE(given_bytes)},
    {"cupool_idle_returned_bytes_total", "counter", "Idle bytes handed back by the process itself (CUPOOL_IDLE_KEEP).",
     SHARE(idle_bytes)},
};

/* A label value, valid UTF-8 whatever the page holds (Prometheus rejects
 * the whole scrape otherwise): backslash, double quote and newline
 * escaped, other control characters left out, a byte that is not UTF-8
 * written as U+FFFD. */
static void put_label(FILE *out, const char *text)
{
    uint32_t cp;
    for (int n; (n = live_utf8_next(&text, &cp)) > 0;) {
        if (cp == '\\' || cp == '"') fprintf(out, "\\%c", (char)cp);
        else if (cp == '\n') fputs("\\n", out);
        else if (cp == LIVE_INVALID) fputs("\xef\xbf\xbd", out);
        else if (!live_is_control(cp)) fwrite(text - n, 1, (size_t)n, out);
    }
}

/* Whether labels carry whole command lines (--command-lines). */
static int whole_commands;

/* The command label: the executable's name (the first word of the command
 * line, without its directory), or the whole command line. */
static void put_command(FILE *out, const char *command)
{
    if (whole_commands) {
        put_label(out, command);
        return;
    }
    char name[CUPOOL_LIVE_COMMAND];
    size_t n = strcspn(command, " ");
    memcpy(name, command, n);
    name[n] = '\0';
    const char *slash = strrchr(name, '/');
    put_label(out, slash ? slash + 1 : name);
}

static void put_labels(FILE *out, const cupool_live_page_t *p, const cupool_live_device_t *d)
{
    fprintf(out, "{pid=\"%d\",device=\"%d\",command=\"", (int)p->pid, (int)d->ordinal);
    put_command(out, p->command);
    fputs("\"", out);
}

char *prom_format(const cupool_live_page_t *pages, size_t n, size_t *len)
{
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    if (!out) return NULL;
    fputs("# HELP cupool_info A process under cupool: its version and policy.\n# TYPE cupool_info gauge\n", out);
    for (size_t i = 0; i < n; i++) {
        const cupool_live_page_t *p = &pages[i];
        fprintf(out, "cupool_info{pid=\"%d\",command=\"", (int)p->pid);
        put_command(out, p->command);
        fputs("\",version=\"", out);
        put_label(out, p->version_text);
        fputs("\",policy=\"", out);
        put_label(out, p->policy);
        fputs("\",free=\"", out);
        put_label(out, p->free_option);
        fputs("\"} 1\n", out);
    }
    for (size_t m = 0; m < sizeof metrics / sizeof metrics[0]; m++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", metrics[m].name, metrics[m].help, metrics[m].name,
                metrics[m].type);
        for (size_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < pages[i].ndevices; k++) {
                const cupool_live_device_t *d = &pages[i].device[k];
                uint64_t value;
                memcpy(&value, (const char *)d + metrics[m].offset, sizeof value);
                fputs(metrics[m].name, out);
                put_labels(out, &pages[i], d);
                fprintf(out, "} %llu\n", (unsigned long long)value);
            }
    }
    for (size_t m = 0; m < sizeof kept_metrics / sizeof kept_metrics[0]; m++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", kept_metrics[m].name, kept_metrics[m].help, kept_metrics[m].name,
                kept_metrics[m].type);
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < CUPOOL_LIVE_KEPT_KINDS; k++) {
                uint64_t value;
                memcpy(&value, (const char *)&pages[i].kept[k] + kept_metrics[m].offset, sizeof value);
                fprintf(out, "%s{pid=\"%d\",kind=\"%s\",command=\"", kept_metrics[m].name, (int)pages[i].pid,
                        live_kept_kinds[k].key);
                put_command(out, pages[i].command);
                fprintf(out, "\"} %llu\n", (unsigned long long)value);
            }
    }
    fputs("# HELP cupool_idle_bytes Bytes the device's pools hold that the process does not use.\n"
          "# TYPE cupool_idle_bytes gauge\n",
          out);
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < pages[i].ndevices; k++) {
            fputs("cupool_idle_bytes", out);
            put_labels(out, &pages[i], &pages[i].device[k]);
            fprintf(out, "} %llu\n", (unsigned long long)live_idle(&pages[i].device[k]));
        }
    for (size_t m = 0; m < sizeof share_metrics / sizeof share_metrics[0]; m++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", share_metrics[m].name, share_metrics[m].help,
                share_metrics[m].name, share_metrics[m].type);
        for (size_t i = 0; i < n; i++) {
            uint64_t value;
            memcpy(&value, (const char *)&pages[i].share + share_metrics[m].offset, sizeof value);
            fprintf(out, "%s{pid=\"%d\",command=\"", share_metrics[m].name, (int)pages[i].pid);
            put_command(out, pages[i].command);
            fprintf(out, "\"} %llu\n", (unsigned long long)value);
        }
    }
    fputs("# HELP cupool_free_mode Free modes the device's contexts are in (1 per mode in force).\n"
          "# TYPE cupool_free_mode gauge\n",
          out);
    static const char *const modes[] = {"auto", "ordered", "deferred", "sync"};
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < pages[i].ndevices; k++)
            for (int m = 1; m < 4; m++) {
                const cupool_live_device_t *d = &pages[i].device[k];
                if (!(d->modes & (1u << m))) continue;
                fputs("cupool_free_mode", out);
                put_labels(out, &pages[i], d);
                fprintf(out, ",mode=\"%s\"} 1\n", modes[m]);
            }
    if (fclose(out) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* ---- the server ---------------------------------------------------------- */

typedef struct client {
    int fd;
    size_t got;
    char request[REQUEST_MAX + 1];
    char *answer; /* malloc()ed once the request is complete */
    size_t answer_len, sent;
    long long deadline_ms;
} client_t;

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void drop(client_t *c)
{
    close(c->fd);
    free(c->answer);
    c->fd = -1;
    c->answer = NULL;
}

static char *http_answer(const char *status, const char *type, const char *body, size_t body_len, size_t *len)
{
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    if (!out) return NULL;
    fprintf(out, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
            type, body_len);
    fwrite(body, 1, body_len, out);
    if (fclose(out) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The answer to a complete request (or to one too long: too_long set). */
static void answer(client_t *c, const char *dir, int too_long)
{
    static const char plain[] = "text/plain; charset=utf-8";
    if (too_long) {
        c->answer = http_answer("431 Request Header Fields Too Large", plain, "request too large\n", 18, &c->answer_len);
        return;
    }
    char method[16], target[1024];
    if (sscanf(c->request, "%15s %1023s", method, target) != 2) {
        c->answer = http_answer("400 Bad Request", plain, "bad request\n", 12, &c->answer_len);
        return;
    }
    target[strcspn(target, "?")] = '\0';
    if (strcmp(target, "/metrics") != 0) {
        c->answer = http_answer("404 Not Found", plain, "not found; try /metrics\n", 24, &c->answer_len);
        return;
    }
    if (strcmp(method, "GET") != 0) {
        c->answer = http_answer("405 Method Not Allowed", plain, "only GET\n", 9, &c->answer_len);
        return;
    }
    size_t n, len;
    cupool_live_page_t *pages = live_scan(dir, &n, 1, NULL);
    char *body = prom_format(pages, n, &len);
    free(pages);
    if (body) c->answer = http_answer("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len, &c->answer_len);
    free(body);
}

static void on_readable(client_t *c, const char *dir)
{
    ssize_t n = recv(c->fd, c->request + c->got, REQUEST_MAX - c->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        drop(c);
        return;
    }
    c->got += (size_t)n;
    c->request[c->got] = '\0';
    if (strstr(c->request, "\r\n\r\n") || strstr(c->request, "\n\n")) answer(c, dir, 0);
    else if (c->got == REQUEST_MAX) answer(c, dir, 1);
    else return;
    if (!c->answer) drop(c); /* out of memory: the client sees the connection close */
}

static void on_writable(client_t *c)
{
    ssize_t n = send(c->fd, c->answer + c->sent, c->answer_len - c->sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        drop(c);
        return;
    }
    c->sent += (size_t)n;
    if (c->sent == c->answer_len) {
        shutdown(c->fd, SHUT_WR);
        drop(c);
    }
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 16) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A Unix socket at path, mode 0600 (made under umask 077: this program has
 * one thread, so the process-wide umask harms no other).  A socket of this
 * user's left at the path (an earlier run killed) is replaced; anything
 * else there is not. */
static int listen_unix(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == getuid()) unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    mode_t old = umask(077);
    int bound = bind(fd, (struct sockaddr *)&a, sizeof a);
    umask(old);
    if (bound != 0 || chmod(path, 0600) != 0 || listen(fd, 16) != 0) {
        int err = errno;
        if (bound == 0) unlink(path);
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* The user of a loopback TCP client's socket: the line of /proc/net/tcp
 * whose local end is the client's address and whose remote end is ours;
 * -1 when none says. */
static long tcp_peer_uid(int fd)
{
    struct sockaddr_in peer, self;
    socklen_t plen = sizeof peer, slen = sizeof self;
    if (getpeername(fd, (struct sockaddr *)&peer, &plen) != 0 || getsockname(fd, (struct sockaddr *)&self, &slen) != 0 ||
        peer.sin_family != AF_INET)
        return -1;
    FILE *f = fopen("/proc/net/tcp", "re");
    if (!f) return -1;
    char line[512];
    long uid = -1;
    while (uid < 0 && fgets(line, sizeof line, f)) {
        unsigned laddr, lport, raddr, rport, state;
        unsigned long id;
        /* sl local rem st tx:rx tr:when retrnsmt uid */
        if (sscanf(line, " %*d: %x:%x %x:%x %x %*x:%*x %*x:%*x %*x %lu", &laddr, &lport, &raddr, &rport, &state, &id) != 6)
            continue;
        if (laddr == peer.sin_addr.s_addr && lport == ntohs(peer.sin_port) && raddr == self.sin_addr.s_addr &&
            rport == ntohs(self.sin_port))
            uid = (long)id;
    }
    fclose(f);
    return uid;
}

/* Whether the client on fd runs as this user. */
static int same_user(int fd, int unix_socket)
{
    if (unix_socket) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
    }
    return tcp_peer_uid(fd) == (long)getuid();
}

int prom_serve(const char *dir, int port, const char *path, int command_lines, volatile sig_atomic_t *stop)
{
    whole_commands = command_lines;
    int lfd = path ? listen_unix(path) : listen_on(port);
    if (lfd < 0) {
        if (path) fprintf(stderr, "cupool-top: cannot listen on %s: %s\n", path, strerror(errno));
        else fprintf(stderr, "cupool-top: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
        return 1;
    }
    if (path) {
        fprintf(stderr, "cupool-top: serving /metrics on the Unix socket %s (mode 0600, this user's processes only)\n",
                path);
    } else {
        struct sockaddr_in addr;
        socklen_t alen = sizeof addr;
        if (getsockname(lfd, (struct sockaddr *)&addr, &alen) == 0) port = ntohs(addr.sin_port);
        fprintf(stderr, "cupool-top: serving http://127.0.0.1:%d/metrics (to processes of uid %u only)\n", port,
                (unsigned)getuid());
    }
    static client_t clients[MAX_CLIENTS];
    for (int i = 0; i < MAX_CLIENTS; i++) clients[i].fd = -1;
    while (!*stop) {
        struct pollfd fds[MAX_CLIENTS + 1];
        int who[MAX_CLIENTS + 1], n = 0;
        fds[n].fd = lfd;
        fds[n].events = POLLIN;
        who[n++] = -1;
        long long now = now_ms();
        for (int i = 0; i < MAX_CLIENTS; i++) {
            client_t *c = &clients[i];
            if (c->fd < 0) continue;
            if (now >= c->deadline_ms) {
                drop(c);
                continue;
            }
            fds[n].fd = c->fd;
            fds[n].events = c->answer ? POLLOUT : POLLIN;
            who[n++] = i;
        }
        /* A short timeout: deadlines and *stop are looked at often. */
        if (poll(fds, (nfds_t)n, 200) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int k = 1; k < n; k++) {
            client_t *c = &clients[who[k]];
            if (!fds[k].revents || c->fd < 0) continue;
            if (fds[k].revents & (POLLERR | POLLNVAL)) drop(c);
            else if (c->answer) on_writable(c);
            else on_readable(c, dir);
        }
        if (fds[0].revents & POLLIN) {
            for (;;) {
                int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) break;
                if (!same_user(cfd, path != NULL)) {
                    /* Said at once, best effort; the socket does not block. */
                    static const char body[] = "forbidden: not the user running cupool-top\n";
                    char no[256];
                    int len = snprintf(no, sizeof no,
                                       "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                       "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                                       sizeof body - 1, body);
                    ssize_t sent = send(cfd, no, (size_t)len, MSG_NOSIGNAL);
                    (void)sent;
                    close(cfd);
                    continue;
                }
                client_t *slot = NULL;
                for (int i = 0; i < MAX_CLIENTS && !slot; i++)
                    if (clients[i].fd < 0) slot = &clients[i];
                /* Full: the client still sending its request since the
                 * longest gives its slot up (its deadline is the
                 * earliest); with every slot being answered, the new one
                 * is turned away and may try again. */
                for (int i = 0; i < MAX_CLIENTS && (!slot || slot->fd >= 0); i++) {
                    client_t *c = &clients[i];
                    if (!c->answer && (!slot || c->deadline_ms < slot->deadline_ms)) slot = c;
                }
                if (slot && slot->fd >= 0) drop(slot);
                if (!slot) {
                    close(cfd);
                    continue;
                }
                slot->fd = cfd;
                slot->got = 0;
                slot->request[0] = '\0';
                slot->answer = NULL;
                slot->answer_len = slot->sent = 0;
                slot->deadline_ms = now_ms() + CLIENT_TIMEOUT_MS;
            }
        }
    }
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (clients[i].fd >= 0) drop(&clients[i]);
    close(lfd);
    if (path) unlink(path);
    return 0;
}
