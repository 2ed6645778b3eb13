/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The live statistics page: what a process under cupool publishes about
 * itself (live.c) and what cupool-top and cupool stat read (src/tools/).
 * One file per process, <dir>/cupool.<uid>.<pid>.<start>.<random> (dir:
 * CUPOOL_LIVE_DIR, /dev/shm by default; start: the process's start time,
 * random: 16 hex digits), mode 0600, rewritten whole about four times a
 * second and removed at exit.  The pid alone names no process once
 * containers in other PID namespaces share the directory: the start time
 * and the random part keep two processes' names apart, and pid_ns says in
 * which namespace the pid means something.  The layout is fixed-size and native-endian:
 * the writer and its readers run on the same machine.  A reader takes a
 * consistent copy with the sequence number (a seqlock): odd while an update
 * is being written, and the same even value before and after the copy.
 * Plain C11 and POSIX only: the readers do not see the library's headers.
 */
#ifndef CUPOOL_LIVE_H
#define CUPOOL_LIVE_H

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUPOOL_LIVE_MAGIC 0x3165766c6c6f6f70ull /* "poollve1", read as a little-endian word */
#define CUPOOL_LIVE_FORMAT 4
#define CUPOOL_LIVE_PREFIX "cupool."
#define CUPOOL_LIVE_DEVICES 16  /* devices a page carries, those with activity first come first */
#define CUPOOL_LIVE_COMMAND 256 /* bytes of the command line kept, NUL included */
#define CUPOOL_LIVE_INTERVAL_MS 250

/* Free modes a device's contexts are in (bit CUPOOL_LIVE_MODE_x of modes). */
enum { CUPOOL_LIVE_MODE_ORDERED = 1, CUPOOL_LIVE_MODE_DEFERRED = 2, CUPOOL_LIVE_MODE_SYNC = 3 };

typedef struct cupool_live_device {
    int32_t ordinal;         /* device ordinal; -1: calls on no known device */
    uint32_t modes;          /* bit m set: a context of the device is in free mode m */
    uint32_t contexts;       /* contexts cupool keeps state for */
    uint32_t pooled;         /* cupool's pools serve this device */
    uint64_t pooled_allocs, pooled_frees, native_allocs;
    uint64_t in_use;         /* pooled bytes allocated and not freed */
    uint64_t peak_in_use;    /* exact under CUPOOL_STATS or CUPOOL_LOG, else the most seen by an update */
    uint64_t reserved;       /* what the device's pools hold, asked of the driver at the last update */
    uint64_t peak_reserved;  /* the most of that seen (or counted, under CUPOOL_STATS/CUPOOL_LOG) */
    uint64_t alloc_rate;     /* allocations (pooled and native) per second, over the last second */
    uint64_t free_rate;      /* pooled frees per second, over the last second */
    uint64_t trims, oom_retries, rewritten_memsets;
    uint64_t ready_reuses, ordered_fences;
    uint64_t misses_given_back, given_back_bytes, oversize_kept, deferred_waits, queued_calls;
} cupool_live_device_t;

/* Pinned host and managed memory (kept[CUPOOL_LIVE_KEPT_HOST] and
 * [CUPOOL_LIVE_KEPT_MANAGED]): what the kept store counted. */
enum { CUPOOL_LIVE_KEPT_HOST, CUPOOL_LIVE_KEPT_MANAGED, CUPOOL_LIVE_KEPT_KINDS };
typedef struct cupool_live_kept {
    uint64_t allocs, reused;     /* allocations cupool tracked, of them served by a kept block */
    uint64_t frees, kept_frees;  /* frees of tracked blocks, of them kept */
    uint64_t kept, peak_kept;    /* bytes kept now, the most kept at once */
    uint64_t limit_frees, oom_frees, advice_frees; /* kept blocks handed back: for the limit, out of memory,
                                                    * advice in their mapping (managed) */
} cupool_live_kept_t;

/* One GPU, several processes (CUPOOL_SHARE, CUPOOL_IDLE_KEEP): what this
 * process asked of the others and gave them. */
typedef struct cupool_live_share {
    uint32_t answers_peers;      /* 1: CUPOOL_SHARE is on, other processes may ask this one */
    uint32_t idle_keep;          /* 1: CUPOOL_IDLE_KEEP bounds the idle memory it holds */
    uint64_t asked;              /* allocations that asked the others after out of memory */
    uint64_t answers, received_bytes; /* answers that handed memory back, and their bytes */
    uint64_t given, given_bytes; /* requests this process answered by handing memory back, and their bytes */
    uint64_t idle_returns, idle_bytes; /* hand-backs of idle memory under CUPOOL_IDLE_KEEP, and their bytes */
} cupool_live_share_t;

typedef struct cupool_live_page {
    uint64_t magic;          /* CUPOOL_LIVE_MAGIC */
    uint32_t format;         /* CUPOOL_LIVE_FORMAT */
    uint32_t size;           /* sizeof(cupool_live_page_t) */
    _Atomic uint64_t seq;    /* odd while being written */
    int32_t pid;
    uint32_t uid;
    uint64_t start_time;     /* the process's start, clock ticks after boot (/proc/PID/stat field 22) */
    uint64_t pid_ns;         /* inode of the writer's PID namespace (/proc/self/ns/pid): where pid is its pid */
    uint64_t updated_ns;     /* CLOCK_REALTIME of the last update */
    uint64_t updates;        /* updates so far */
    uint32_t interval_ms;    /* between updates */
    uint32_t version;        /* cupool_version(): MAJOR*10000 + MINOR*100 + PATCH */
    char version_text[16];
    char policy[16];         /* CUPOOL_POLICY in force */
    char free_option[16];    /* CUPOOL_FREE in force */
    uint32_t ndevices;       /* entries of device[] in use */
    uint32_t devices_left_out; /* devices with activity that did not fit */
    char command[CUPOOL_LIVE_COMMAND]; /* /proc/self/cmdline, arguments joined by spaces, cut */
    cupool_live_device_t device[CUPOOL_LIVE_DEVICES];
    cupool_live_kept_t kept[CUPOOL_LIVE_KEPT_KINDS];
    cupool_live_share_t share;
} cupool_live_page_t;

/* The start of process pid (0: the calling process) in clock ticks after
 * boot, field 22 of /proc/PID/stat; 0 if unknown.  A page's writer records
 * its own, and a reader compares it with the live process of that pid: with
 * the pid it tells a process from a later one of the same pid. */
static inline uint64_t cupool_live_process_start(int pid)
{
    char path[64], text[1024];
    if (pid) snprintf(path, sizeof path, "/proc/%d/stat", pid);
    else snprintf(path, sizeof path, "/proc/self/stat");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: fields
     * are counted after its last ')'. */
    char *p = strrchr(text, ')');
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

#endif
