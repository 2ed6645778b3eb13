/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What both sides of legacy IPC on pooled memory use (ipc.c tells the
 * design, ipc_wire.h holds the handle and the messages): messages of a
 * fixed size with at most one file descriptor passed along (SCM_RIGHTS),
 * the check that the process at the other end of a connection runs as this
 * user, where an exporter's socket lives and what it is called, and the
 * growth of the arrays both sides keep.  An exporter and its importers are
 * separate processes, each under its own cupool: what they must agree on
 * is kept in one place.
 *
 * A path socket, not an abstract one: abstract sockets belong to a network
 * namespace, and containers that share the IPC namespace (and so
 * /dev/shm) often do not share the network one.
 */
#define _GNU_SOURCE
#include "ipc_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cupool_ipc_grow(void **items, int count, int *cap, size_t size)
{
    if (count < *cap) return 0;
    int want = *cap ? *cap * 2 : 8;
    void *p = realloc(*items, (size_t)want * size);
    if (!p) return -1;
    *items = p;
    *cap = want;
    return 0;
}

int cupool_ipc_same_user(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

/* Room for one passed file descriptor. */
typedef union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
} fd_control_t;

/* A message of one buffer, with room for one file descriptor in ctl. */
static struct msghdr message(struct iovec *iov, fd_control_t *ctl)
{
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = iov;
    m.msg_iovlen = 1;
    memset(ctl, 0, sizeof *ctl);
    m.msg_control = ctl->buf;
    m.msg_controllen = sizeof ctl->buf;
    return m;
}

int cupool_ipc_send_with_fd(int fd, const void *buf, size_t len, int passed)
{
    struct iovec iov = {(void *)buf, len};
    fd_control_t ctl;
    struct msghdr m = message(&iov, &ctl);
    if (passed < 0) {
        m.msg_control = NULL;
        m.msg_controllen = 0;
    } else {
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &passed, sizeof passed);
    }
    ssize_t n;
    do n = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

int cupool_ipc_recv_with_fd(int fd, void *buf, size_t len, int *passed)
{
    struct iovec iov = {buf, len};
    fd_control_t ctl;
    struct msghdr m = message(&iov, &ctl);
    ssize_t n;
    do n = recvmsg(fd, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    *passed = -1;
    /* Nothing received (the wait ran out): no control message to read. */
    for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(passed, CMSG_DATA(c), sizeof *passed);
    if (n == (ssize_t)len) return 0;
    if (*passed >= 0) close(*passed);
    *passed = -1;
    /* errno says why: EAGAIN when the wait ran out, else the connection
     * ended (or broke off in the middle of a message). */
    if (n >= 0) errno = ECONNRESET;
    return -1;
}

const char *cupool_ipc_dir(void)
{
    const char *dir = cupool_option_string(CUPOOL_OPT_IPC_DIR);
    return dir && *dir ? dir : "/dev/shm";
}

struct sockaddr_un cupool_ipc_socket_address(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    return a;
}

int cupool_ipc_socket_name(char *out, size_t cap, uint32_t uid, uint32_t pid, const uint8_t server[8])
{
    char hex[17];
    for (int i = 0; i < 8; i++) snprintf(hex + 2 * i, 3, "%02x", server[i]);
    int n = snprintf(out, cap, "%s/%s%u.%u.%s", cupool_ipc_dir(), IPC_SOCKET_PREFIX, uid, pid, hex);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}
