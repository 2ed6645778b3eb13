/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the live statistics pages of the processes under cupool (the
 * format: src/engine/live.h) for cupool-top: finding the user's pages, copying each
 * consistently, refusing what is not the user's own private file, and
 * removing pages whose process is gone.
 */
#ifndef CUPOOL_TOOLS_LIVEPAGE_H
#define CUPOOL_TOOLS_LIVEPAGE_H

#include "../engine/live.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* What reading one page came to. */
enum {
    LIVE_OK,
    LIVE_MISSING,  /* no such page */
    LIVE_REFUSED,  /* not a regular file of this user with mode 0600 (or stricter) */
    LIVE_BAD,      /* not a page of this format, or of another process than its name says */
    LIVE_STALE,    /* its process is gone (removed when asked to clean) */
    LIVE_BUSY      /* no consistent copy could be taken */
};

/* The directory of the pages: dir if given, else $CUPOOL_LIVE_DIR, else
 * /dev/shm. */
const char *live_dir(const char *dir);

/* Reads the page of pid (one of this user's) into *out; with clean set, a
 * stale page is removed. */
int live_read_pid(const char *dir, int pid, cupool_live_page_t *out, int clean);

/* Every readable page of this user in dir, stale ones removed (with clean
 * set): a malloc()ed array the caller frees, *count entries; NULL with
 * *count 0 when there is none or the directory cannot be read.  *refused
 * (if not NULL) counts pages of this user's name that were refused. */
cupool_live_page_t *live_scan(const char *dir, size_t *count, int clean, size_t *refused);

/* The free modes of a device ("ordered", "ordered+sync", "-"), into buf. */
const char *live_modes(const cupool_live_device_t *d, char *buf, size_t len);
/* What the device's pools hold and the process does not use: what it would
 * hand back to another cupool process that runs out (CUPOOL_SHARE), as of
 * the page's last update. */
static inline uint64_t live_idle(const cupool_live_device_t *d)
{
    return d->reserved > d->in_use ? d->reserved - d->in_use : 0;
}

/* The names of the kinds of kept[]: as a key or label value (JSON,
 * Prometheus: "pinned_host") and as text (as CUPOOL_STATS prints it:
 * "pinned host"). */
extern const struct live_kept_kind {
    const char *key, *text;
} live_kept_kinds[CUPOOL_LIVE_KEPT_KINDS];

/* The next character of NUL-terminated text as UTF-8: its code point in
 * *cp (LIVE_INVALID for a byte that starts no valid character, which is
 * then skipped alone), the bytes it took (0 at the end). */
#define LIVE_INVALID 0xfffdu
int live_utf8_next(const char **text, uint32_t *cp);
/* C0 and C1 control characters and DEL. */
int live_is_control(uint32_t cp);
/* text for a terminal, into out: at most `columns` characters, each
 * control character or byte that is not UTF-8 shown as '?'. */
const char *live_printable(const char *text, char *out, size_t cap, size_t columns);
/* The characters text shows (an invalid byte counts one). */
size_t live_columns(const char *text);

/* Bytes for a person: "1.5 GiB". */
const char *live_human(double bytes, char *buf, size_t len);

/* ---- prom.c: the Prometheus endpoint ------------------------------------ */

/* The pages in Prometheus's text format (0.0.4) into a malloc()ed string
 * (*len bytes); NULL when out of memory. */
char *prom_format(const cupool_live_page_t *pages, size_t n, size_t *len);
/* Serves GET /metrics on 127.0.0.1:port (0: any free port, printed), or
 * on the Unix socket path when path is not NULL, to processes of this user
 * only, from the pages in dir until *stop is set; 0 then, 1 when it cannot
 * listen.  The labels name each process's executable, or with
 * command_lines set its whole command line. */
int prom_serve(const char *dir, int port, const char *path, int command_lines, volatile sig_atomic_t *stop);

#endif
