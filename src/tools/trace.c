/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading call logs into trace_t (trace.h): each line is parsed by jsonl.c,
 * its fields checked and turned into a fixed-size record.  Every call line
 * needs "t" and "call"; allocation and free lines also need "ptr" and
 * "size".  Other fields are optional and extra fields are ignored, so logs
 * of older and newer cupool versions read alike; an allocation or free of a
 * "kind" of memory this reader does not know is read as a call of no
 * memory (TRACE_OTHER).
 */
#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE: program_invocation_short_name */
#endif

#include "trace.h"
#include "jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void *trace_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "%s: out of memory\n", program_invocation_short_name);
        exit(1);
    }
    return q;
}

static uint16_t intern(trace_t *t, const char *name)
{
    for (size_t i = 0; i < t->name_count; i++)
        if (strcmp(t->names[i], name) == 0) return (uint16_t)i;
    if (t->name_count >= 65535) return 0;
    t->names = trace_xrealloc(t->names, (t->name_count + 1) * sizeof *t->names);
    size_t len = strlen(name) + 1;
    t->names[t->name_count] = memcpy(trace_xrealloc(NULL, len), name, len);
    return (uint16_t)t->name_count++;
}

/* The calls that allocate and free, with the memory each implies. */
static const struct {
    const char *name;
    uint8_t kind, mem;
} memory_calls[] = {
    {"cuMemAlloc_v2", TRACE_ALLOC, TRACE_MEM_DEVICE},
    {"cuMemAlloc", TRACE_ALLOC, TRACE_MEM_DEVICE},
    {"cuMemAllocPitch_v2", TRACE_ALLOC, TRACE_MEM_DEVICE},
    {"cuMemAllocPitch", TRACE_ALLOC, TRACE_MEM_DEVICE},
    {"cuMemAllocHost_v2", TRACE_ALLOC, TRACE_MEM_HOST},
    {"cuMemAllocHost", TRACE_ALLOC, TRACE_MEM_HOST},
    {"cuMemHostAlloc", TRACE_ALLOC, TRACE_MEM_HOST},
    {"cuMemAllocManaged", TRACE_ALLOC, TRACE_MEM_MANAGED},
    {"cuMemFree_v2", TRACE_FREE, TRACE_MEM_DEVICE},
    {"cuMemFree", TRACE_FREE, TRACE_MEM_DEVICE},
    {"cuMemFreeAsync", TRACE_FREE, TRACE_MEM_DEVICE},
    {"cuMemFreeAsync_ptsz", TRACE_FREE, TRACE_MEM_DEVICE},
    {"cuMemFreeHost", TRACE_FREE, TRACE_MEM_HOST},
};

static int call_kind(const char *call, uint8_t *mem)
{
    *mem = TRACE_MEM_DEVICE;
    for (size_t i = 0; i < sizeof memory_calls / sizeof *memory_calls; i++)
        if (strcmp(call, memory_calls[i].name) == 0) return *mem = memory_calls[i].mem, memory_calls[i].kind;
    if (strcmp(call, "cupool.start") == 0) return TRACE_START;
    if (strcmp(call, "cupool.message") == 0) return TRACE_MESSAGE;
    if (strcmp(call, "cupool.end") == 0) return TRACE_END;
    return TRACE_OTHER;
}

/* The "kind" field's memory, or -1 for a kind this reader does not know. */
static int mem_code(const char *kind)
{
    static const char *const names[] = {"device", "host", "managed"};
    for (int i = 0; i < TRACE_MEM_KINDS; i++)
        if (strcmp(kind, names[i]) == 0) return i;
    return -1;
}

static int route_code(const char *route)
{
    static const char *const names[] = {"none", "pool", "native", "rewritten"};
    for (int i = 0; i < 4; i++)
        if (strcmp(route, names[i]) == 0) return i;
    return TRACE_ROUTE_UNKNOWN;
}

/* What a log says of its own completeness: start lines promising an end
 * line, end lines, and what the incomplete ones say. */
typedef struct ending {
    unsigned promised, ends, incomplete;
    uint64_t lost;
    char error[128];
} ending_t;

static void note_ending(const jsonl_line_t *line, int kind, ending_t *e)
{
    const jsonl_field_t *f;
    if (kind == TRACE_START && (f = jsonl_get(line, "end_line")) && f->type == JSONL_TRUE) e->promised++;
    if (kind != TRACE_END) return;
    e->ends++;
    f = jsonl_get(line, "complete");
    if (f && f->type == JSONL_TRUE) return;
    e->incomplete++;
    uint64_t lost = 0;
    if (jsonl_get_u64(line, "lost_lines", &lost) == 0) e->lost += lost;
    if (!e->error[0]) jsonl_get_str(line, "error", e->error, sizeof e->error);
}

/* Fills *r from one line; returns NULL or why the line is rejected. */
static const char *record_of(trace_t *t, const char *text, size_t len, trace_record_t *r, ending_t *ending)
{
    jsonl_line_t line;
    const char *error;
    if (jsonl_parse(text, len, &line, &error) != 0) return error;
    char call[128], buf[128];
    int64_t i64;
    memset(r, 0, sizeof *r);
    if (jsonl_get_u64(&line, "t", &r->t) != 0) return "missing or bad \"t\" (a time in ns)";
    if (jsonl_get_str(&line, "call", call, sizeof call) != 0 || !call[0]) return "missing or bad \"call\"";
    r->kind = (uint8_t)call_kind(call, &r->mem);
    r->call = intern(t, call);
    note_ending(&line, r->kind, ending);
    r->dev = -1;
    r->ok = 1;
    r->route = TRACE_ROUTE_UNKNOWN;
    if (jsonl_get(&line, "tid") && (jsonl_get_i64(&line, "tid", &i64) != 0 || i64 < 0 || i64 > INT32_MAX))
        return "bad \"tid\"";
    else if (jsonl_get(&line, "tid")) r->tid = (int32_t)i64;
    if (jsonl_get(&line, "dev") && (jsonl_get_i64(&line, "dev", &i64) != 0 || i64 < -1 || i64 > INT32_MAX))
        return "bad \"dev\"";
    else if (jsonl_get(&line, "dev")) r->dev = (int32_t)i64;
    if (jsonl_get(&line, "ptr") && jsonl_get_ptr(&line, "ptr", &r->ptr) != 0) return "bad \"ptr\" (want \"0x...\")";
    if (jsonl_get(&line, "size") && jsonl_get_u64(&line, "size", &r->size) != 0) return "bad \"size\"";
    if (jsonl_get(&line, "dur_ns") && jsonl_get_u64(&line, "dur_ns", &r->dur_ns) != 0) return "bad \"dur_ns\"";
    if (jsonl_get(&line, "reserved")) {
        if (jsonl_get_u64(&line, "reserved", &r->reserved) != 0) return "bad \"reserved\"";
        r->has_reserved = 1;
    }
    if (jsonl_get(&line, "route")) {
        if (jsonl_get_str(&line, "route", buf, sizeof buf) != 0) return "bad \"route\"";
        r->route = (uint8_t)route_code(buf);
    }
    if (jsonl_get(&line, "kind")) {
        if (jsonl_get_str(&line, "kind", buf, sizeof buf) != 0) return "bad \"kind\"";
        int mem = mem_code(buf);
        if (mem < 0 && (r->kind == TRACE_ALLOC || r->kind == TRACE_FREE)) r->kind = TRACE_OTHER;
        else if (mem >= 0) r->mem = (uint8_t)mem;
        r->has_kind = 1;
    }
    const jsonl_field_t *store = jsonl_get(&line, "store");
    if (store && store->type != JSONL_TRUE && store->type != JSONL_FALSE) return "bad \"store\" (want true or false)";
    r->from_store = store && store->type == JSONL_TRUE;
    if (jsonl_get(&line, "flags")) {
        if (jsonl_get_i64(&line, "flags", &i64) != 0 || i64 < 0 || i64 > UINT32_MAX) return "bad \"flags\"";
        r->flags = (uint32_t)i64;
        r->has_flags = 1;
    }
    buf[0] = '\0';
    if (jsonl_get(&line, "result") && jsonl_get_str(&line, "result", buf, sizeof buf) != 0) return "bad \"result\"";
    r->result = intern(t, buf);
    r->ok = !buf[0] || strcmp(buf, "CUDA_SUCCESS") == 0;
    if ((r->kind == TRACE_ALLOC || r->kind == TRACE_FREE) && (!jsonl_get(&line, "ptr") || !jsonl_get(&line, "size")))
        return "an allocation or free without \"ptr\" and \"size\"";
    return NULL;
}

/*
 * A log compressed with gzip (the examples ship so; a long run's log is best
 * kept so) is read through "gzip -dc", so that no compression library is
 * needed.  Its first byte tells: 0x1f never starts a line of JSON.
 */
static FILE *open_gzip(const char *path, const char *prog, pid_t *gzip)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: cannot read %s: %s\n", prog, path, strerror(errno));
        return NULL;
    }
    posix_spawn_file_actions_t acts;
    posix_spawn_file_actions_init(&acts);
    posix_spawn_file_actions_adddup2(&acts, fds[1], STDOUT_FILENO);
    char *argv[] = {"gzip", "-dc", "--", (char *)path, NULL};
    int err = posix_spawnp(gzip, "gzip", &acts, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&acts);
    close(fds[1]);
    if (err != 0) {
        close(fds[0]);
        fprintf(stderr, "%s: %s is compressed with gzip, and gzip cannot be run: %s\n", prog, path, strerror(err));
        return NULL;
    }
    FILE *f = fdopen(fds[0], "r");
    if (!f) {
        close(fds[0]);
        waitpid(*gzip, NULL, 0);
    }
    return f;
}

/* The log at path ("-": standard input), or NULL after saying why not. */
static FILE *open_log(const char *path, const char *prog, pid_t *gzip)
{
    *gzip = -1;
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
        return NULL;
    }
    /* fopen opens a directory for reading; its first read fails (EISDIR). */
    struct stat st;
    const char *why = NULL;
    int first = EOF;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) why = "is a directory, not a log";
    else if ((first = getc(f)) == 0x1f && f == stdin) why = "is compressed: give its path, or pipe it through zcat";
    if (why) {
        fprintf(stderr, "%s: %s %s\n", prog, f == stdin ? "standard input" : path, why);
        if (f != stdin) fclose(f);
        return NULL;
    }
    if (first == 0x1f) {
        fclose(f);
        return open_gzip(path, prog, gzip);
    }
    if (first != EOF) ungetc(first, f);
    return f;
}

/* Closes what open_log opened; nonzero when gzip found the file damaged (it has said how). */
static int close_log(FILE *f, pid_t gzip)
{
    if (f != stdin) fclose(f);
    if (gzip < 0) return 0;
    int status;
    while (waitpid(gzip, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int trace_read(trace_t *t, const char *path, const char *prog)
{
    pid_t gzip;
    FILE *f = open_log(path, prog, &gzip);
    if (!f) return -1;
    if (t->name_count == 0) intern(t, ""); /* index 0: no result */
    char *text = NULL;
    size_t size = 0;
    ssize_t len;
    uint32_t lineno = 0;
    size_t rejected = 0;
    ending_t ending;
    memset(&ending, 0, sizeof ending);
    while ((len = getline(&text, &size, f)) >= 0) {
        lineno++;
        if (len > 0 && text[len - 1] == '\n') len--;
        if (len == 0) continue; /* blank lines are harmless */
        trace_record_t r;
        const char *why = record_of(t, text, (size_t)len, &r, &ending);
        if (why) {
            if (!t->quiet && rejected < TRACE_SHOWN_REJECTS)
                fprintf(stderr, "%s: %s:%u: %s; line skipped\n", prog, path, lineno, why);
            rejected++;
            continue;
        }
        r.seq = lineno;
        r.file = (uint16_t)t->files;
        if (t->count == t->capacity) {
            size_t cap = t->capacity ? t->capacity * 2 : 4096;
            t->records = trace_xrealloc(t->records, cap * sizeof *t->records);
            t->capacity = cap;
        }
        t->records[t->count++] = r;
    }
    int unreadable = ferror(f);
    free(text);
    unreadable |= close_log(f, gzip);
    if (!t->quiet && rejected > TRACE_SHOWN_REJECTS)
        fprintf(stderr, "%s: %s: %zu more malformed lines skipped (%zu in all)\n", prog, path,
                rejected - TRACE_SHOWN_REJECTS, rejected);
    t->rejected += rejected;
    t->files++;
    if (unreadable) {
        fprintf(stderr, "%s: error reading %s\n", prog, path);
        return -1;
    }
    /* A log cut short says so, or lacks the end line its start promised. */
    if (ending.incomplete) {
        if (!t->quiet)
            fprintf(stderr, "%s: %s: the log is incomplete: %llu lines could not be written (%s)\n", prog, path,
                    (unsigned long long)ending.lost, ending.error[0] ? ending.error : "unknown error");
        t->incomplete++;
    } else if (ending.promised && !ending.ends) {
        if (!t->quiet)
            fprintf(stderr, "%s: %s: the log may be incomplete: it has no end line (its process still runs, was "
                            "killed, or could not write it)\n", prog, path);
        t->incomplete++;
    }
    return 0;
}

static int by_time(const void *a, const void *b)
{
    const trace_record_t *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void trace_sort(trace_t *t)
{
    /* qsort wants an array even for no records. */
    if (t->count > 1) qsort(t->records, t->count, sizeof *t->records, by_time);
}

void trace_free(trace_t *t)
{
    for (size_t i = 0; i < t->name_count; i++) free(t->names[i]);
    free(t->names);
    free(t->records);
    memset(t, 0, sizeof *t);
}
