/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The IPC files' own header, for ipc.c, ipc_export.c and ipc_wire.c alone
 * (tests/test_layers.sh checks; the rest of the engine and the shims see
 * ipc.h): the handle, requests and replies the two sides exchange and the
 * socket helpers both use (ipc_wire.c); the lock that guards both sides'
 * state (ipc.c); and the little the importer's side asks of the
 * exporter's (ipc_export.c).
 */
#ifndef CUPOOL_ENGINE_IPC_WIRE_H
#define CUPOOL_ENGINE_IPC_WIRE_H

#include "state.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* H2: requests say open or close and carry a sequence number (one
 * connection per exporter); a handle of an H1 cupool is none of ours. */
#define IPC_MAGIC "cupoolH2"
#define IPC_SOCKET_PREFIX "cupool-ipc."
/* What an open answers for a handle that names nothing it can reach: a
 * forged one, one whose block is gone, one of a process that has ended. */
#define IPC_BAD_HANDLE CUDA_ERROR_INVALID_VALUE
/* Room for a socket's path, its final zero included. */
#define IPC_PATH_CAP sizeof(((struct sockaddr_un *)0)->sun_path)

/* The 64 bytes of a CUipcMemHandle cupool makes. */
typedef struct {
    char magic[8];
    uint32_t uid, pid;    /* the exporter's user, and its pid as it sees itself (names the socket) */
    uint8_t server[8];    /* random, per exporting process (names the socket) */
    uint8_t tag[16];      /* random, per exported block */
    uint64_t size;        /* the block's, for the importer's log */
    uint8_t unused[16];
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) == sizeof(CUipcMemHandle), "a cupool handle fills a CUipcMemHandle");

/* What an importer says on its connection: open a block (answered with an
 * ipc_reply_t and the pool's descriptor) or close one (not answered). */
enum { IPC_OPEN = 1, IPC_CLOSE = 2 };
typedef struct {
    char magic[8];
    uint32_t op;
    uint32_t unused;
    uint64_t seq; /* echoed by the reply: an answer that came too late is told from the next */
    uint8_t tag[16];
} ipc_request_t;

typedef struct {
    int32_t status; /* CUresult */
    uint32_t unused;
    uint64_t seq;
    uint64_t pool_key; /* names the pool among the exporter's: device * CUPOOL_POOLS_PER_DEVICE + index */
    CUmemPoolPtrExportData data;
} ipc_reply_t;

/* ---- ipc_wire.c: the wire and the sockets ------------------------------------ */

/* Grows an array of `size`-byte items to hold one more; 0 on success. */
int cupool_ipc_grow(void **items, int count, int *cap, size_t size);
/* Whether the process at the other end of socket fd runs as this one's user. */
int cupool_ipc_same_user(int fd);
/* Sends len bytes (and descriptor passed, unless negative); 0 on success. */
int cupool_ipc_send_with_fd(int fd, const void *buf, size_t len, int passed);
/* Receives exactly len bytes and the descriptor passed with them (-1 if
 * none); 0 on success, else -1 and errno (EAGAIN: the wait ran out). */
int cupool_ipc_recv_with_fd(int fd, void *buf, size_t len, int *passed);
/* The directory of the sockets: CUPOOL_IPC_DIR, else /dev/shm. */
const char *cupool_ipc_dir(void);
/* The address of the socket at path (shorter than sun_path). */
struct sockaddr_un cupool_ipc_socket_address(const char *path);
/* The socket path of exporter (uid, pid, server); -1 when out is too short. */
int cupool_ipc_socket_name(char *out, size_t cap, uint32_t uid, uint32_t pid, const uint8_t server[8]);

/* ---- ipc.c: the lock --------------------------------------------------------- */

/* Guards the state of both sides: ipc_export.c's exports, connections
 * and server, ipc.c's imports, imported pools and peers.  Never held
 * together with a peer's io lock: an importer waits for an exporter's
 * answer under io alone, so that two processes opening each other's
 * handles do not wait for each other's server. */
extern pthread_mutex_t cupool_ipc_lock;
/* Sets IPC up once per process: pool descriptors unset, fork handlers. */
void cupool_ipc_init(void);

/* ---- ipc_export.c: what the importer's side and the fork handlers ask -------- */

/* Marks every pool's descriptor not fetched yet; from cupool_ipc_init. */
void cupool_ipc_exporter_init(void);
/* In a fork()ed child: the exporter's descriptors closed, its state reset. */
void cupool_ipc_exporter_fork_child(void);
/* Whether server names this process's own socket; cupool_ipc_lock held. */
int cupool_ipc_own_server(const uint8_t server[8]);

#endif
