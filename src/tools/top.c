/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool-top: what every process of the user under cupool is doing now, from
 * the live statistics pages they publish (src/engine/live.h, read by livepage.c).
 * `cupool top` is a terminal view refreshed every second (plain ANSI
 * escapes; q quits), or with --once a table printed once, with --json JSON
 * lines; `cupool stat PID` prints one process's full statistics; and
 * --prometheus PORT serves them to Prometheus (prom.c).  Reading a page
 * removes it when its process is gone (killed before it could).
 */
#include "config.h" /* _GNU_SOURCE */
#include "cli.h"
#include "livepage.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void usage(FILE *out)
{
    fputs("Usage: cupool top [OPTIONS]          (or cupool-top [OPTIONS])\n"
          "       cupool stat [--json] PID     (or cupool-top --stat PID)\n"
          "\n"
          "Shows, while they run, the processes of this user under cupool: per process\n"
          "and device the bytes in use and reserved in cupool's pools, their peaks,\n"
          "allocations and frees per second, the free mode of the device's contexts and\n"
          "the allocations retried after out of memory.  Each process publishes these\n"
          "about four times a second in CUPOOL_LIVE_DIR/cupool.UID.PID.START.RANDOM\n"
          "(/dev/shm by default) unless it runs with CUPOOL_LIVE=0.\n"
          "\n"
          "The terminal view, refreshed every second, has one row per process and\n"
          "device, sorted by reserved bytes, totals per device and a line each for\n"
          "pinned host and managed memory (kept bytes, allocations, reuses); q quits.\n"
          "\n"
          "  -1, --once             print one table (or one round of --json) and exit\n"
          "  -j, --json             JSON lines: one object per process per refresh\n"
          "  -d, --delay SECONDS    between refreshes (default 1; 0.25 is the finest useful)\n"
          "  -s, --stat PID         one process's full statistics (cupool stat PID), as\n"
          "                         CUPOOL_STATS=1 prints them at exit; with --json as\n"
          "                         one JSON object.  Exit status 1 when PID has no\n"
          "                         readable page of this user\n"
          "  -p, --prometheus PORT  serve the counters in Prometheus's text format at\n"
          "                         http://127.0.0.1:PORT/metrics (0: any free port, printed)\n"
          "                         until interrupted, to this user's processes only; a PATH\n"
          "                         (with a /) instead serves on a Unix socket of mode 0600\n"
          "      --command-lines    label Prometheus's counters with whole command lines\n"
          "                         (default: the executable's name; arguments may hold secrets)\n"
          "      --dir DIR          read the pages in DIR (default $CUPOOL_LIVE_DIR, else /dev/shm)\n"
          "  -h, --help             print this help\n"
          "  -V, --version          print the version\n"
          "\n"
          "Only pages of this user, readable by nobody else, are read; pages of\n"
          "processes that are gone are removed.  Rates are over the last second.\n"
          "A program named top or stat runs under cupool as: cupool -- top\n",
          out);
}

/* ---- one row per process and device --------------------------------------- */

typedef struct row {
    const cupool_live_page_t *page;
    const cupool_live_device_t *device; /* NULL: the process has no device yet */
} row_t;

static int by_reserved(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    uint64_t rx = x->device ? x->device->reserved : 0, ry = y->device ? y->device->reserved : 0;
    if (rx != ry) return rx < ry ? 1 : -1;
    uint64_t ux = x->device ? x->device->in_use : 0, uy = y->device ? y->device->in_use : 0;
    if (ux != uy) return ux < uy ? 1 : -1;
    return x->page->pid - y->page->pid;
}

static row_t *make_rows(const cupool_live_page_t *pages, size_t n, size_t *nrows)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += pages[i].ndevices ? pages[i].ndevices : 1;
    row_t *rows = calloc(total ? total : 1, sizeof *rows);
    *nrows = 0;
    if (!rows) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!pages[i].ndevices) rows[(*nrows)++] = (row_t){&pages[i], NULL};
        for (uint32_t k = 0; k < pages[i].ndevices; k++) rows[(*nrows)++] = (row_t){&pages[i], &pages[i].device[k]};
    }
    qsort(rows, *nrows, sizeof *rows, by_reserved);
    return rows;
}

typedef struct total {
    int ordinal, processes;
    uint64_t in_use, reserved, idle, peak_in_use, alloc_rate, free_rate, oom_retries;
} total_t;

/* Whether an earlier row is of the same process and device: a process is
 * counted once per device, however many rows a page gives it there. */
static int counted(const row_t *rows, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (rows[j].page == rows[i].page && rows[j].device && rows[j].device->ordinal == rows[i].device->ordinal)
            return 1;
    return 0;
}

static size_t make_totals(const row_t *rows, size_t nrows, total_t *totals, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < nrows; i++) {
        const cupool_live_device_t *d = rows[i].device;
        if (!d) continue;
        size_t t = 0;
        while (t < n && totals[t].ordinal != d->ordinal) t++;
        if (t == n) {
            if (n == max) continue;
            memset(&totals[n], 0, sizeof totals[n]);
            totals[n++].ordinal = d->ordinal;
        }
        if (!counted(rows, i)) totals[t].processes++;
        totals[t].in_use += d->in_use;
        totals[t].reserved += d->reserved;
        totals[t].idle += live_idle(d);
        totals[t].peak_in_use += d->peak_in_use;
        totals[t].alloc_rate += d->alloc_rate;
        totals[t].free_rate += d->free_rate;
        totals[t].oom_retries += d->oom_retries;
    }
    return n;
}

/* ---- the table (terminal view and --once) ---------------------------------- */

/* Writes line to out cut at width columns (0: no limit). */
static void put_line(FILE *out, const char *line, int width, const char *eol)
{
    int len = (int)strlen(line);
    if (width > 0 && len > width) len = width;
    fprintf(out, "%.*s%s", len, line, eol);
}

/* Pinned host and managed memory over all processes, per kind. */
typedef struct kept_total {
    uint64_t kept, allocs, reused;
    int processes;
} kept_total_t;

/* Sums the kept kinds of the pages into kinds; returns how many kinds some
 * process allocated. */
static int make_kept_totals(const cupool_live_page_t *pages, size_t n, kept_total_t kinds[CUPOOL_LIVE_KEPT_KINDS])
{
    int nkinds = 0;
    for (int k = 0; k < CUPOOL_LIVE_KEPT_KINDS; k++) {
        memset(&kinds[k], 0, sizeof kinds[k]);
        for (size_t i = 0; i < n; i++) {
            const cupool_live_kept_t *m = &pages[i].kept[k];
            if (!m->allocs) continue;
            kinds[k].processes++;
            kinds[k].kept += m->kept;
            kinds[k].allocs += m->allocs;
            kinds[k].reused += m->reused;
        }
        nkinds += kinds[k].processes > 0;
    }
    return nkinds;
}

/* A process's line for one device (or dashes, for a process with none). */
static void print_row(FILE *out, const row_t *row, int width, const char *eol)
{
    const cupool_live_page_t *p = row->page;
    const cupool_live_device_t *d = row->device;
    char line[1024], b1[32], b2[32], b3[32], b4[32], modes[32];
    /* 20 characters, padded by hand: %-20s counts bytes. */
    char command[128];
    live_printable(p->command, command, sizeof command - 20, 20);
    for (size_t c = live_columns(command); c < 20; c++) strcat(command, " ");
    if (d)
        snprintf(line, sizeof line, "%7d %s %3d %10s %10s %10s %10s %9llu %9llu %-15s %5llu", (int)p->pid, command,
                 (int)d->ordinal, live_human((double)d->in_use, b1, sizeof b1),
                 live_human((double)d->reserved, b2, sizeof b2), live_human((double)live_idle(d), b4, sizeof b4),
                 live_human((double)d->peak_in_use, b3, sizeof b3), (unsigned long long)d->alloc_rate,
                 (unsigned long long)d->free_rate, live_modes(d, modes, sizeof modes),
                 (unsigned long long)d->oom_retries);
    else snprintf(line, sizeof line, "%7d %s %3s %10s %10s %10s %10s %9s %9s %-15s %5s", (int)p->pid, command, "-",
                  "-", "-", "-", "-", "-", "-", "-", "-");
    put_line(out, line, width, eol);
}

/* The TOTAL line of each device, then a line per kept kind. */
static void print_totals(FILE *out, const total_t *totals, size_t ndev, const kept_total_t *kinds, int width,
                         const char *eol)
{
    char line[1024], b1[32], b2[32], b3[32], b4[32];
    for (size_t t = 0; t < ndev; t++) {
        char count[32];
        snprintf(count, sizeof count, "%d process%s", totals[t].processes, totals[t].processes == 1 ? "" : "es");
        snprintf(line, sizeof line, "%7s %-20s %3d %10s %10s %10s %10s %9llu %9llu %-15s %5llu", "TOTAL", count,
                 totals[t].ordinal, live_human((double)totals[t].in_use, b1, sizeof b1),
                 live_human((double)totals[t].reserved, b2, sizeof b2),
                 live_human((double)totals[t].idle, b4, sizeof b4),
                 live_human((double)totals[t].peak_in_use, b3, sizeof b3), (unsigned long long)totals[t].alloc_rate,
                 (unsigned long long)totals[t].free_rate, "", (unsigned long long)totals[t].oom_retries);
        put_line(out, line, width, eol);
    }
    for (int k = 0; k < CUPOOL_LIVE_KEPT_KINDS; k++) {
        if (!kinds[k].processes) continue;
        snprintf(line, sizeof line, "%s memory: %d process%s keep%s %s; allocations %llu, served by kept blocks %llu",
                 live_kept_kinds[k].text, kinds[k].processes, kinds[k].processes == 1 ? "" : "es",
                 kinds[k].processes == 1 ? "s" : "", live_human((double)kinds[k].kept, b1, sizeof b1),
                 (unsigned long long)kinds[k].allocs, (unsigned long long)kinds[k].reused);
        put_line(out, line, width, eol);
    }
}

/* What the processes asked of each other and handed back (CUPOOL_SHARE,
 * CUPOOL_IDLE_KEEP), summed; 1 when there is anything to show: some
 * process answers the others, bounds its idle memory, or has asked. */
static int make_share_total(const cupool_live_page_t *pages, size_t n, cupool_live_share_t *sum)
{
    memset(sum, 0, sizeof *sum);
    for (size_t i = 0; i < n; i++) {
        const cupool_live_share_t *h = &pages[i].share;
        sum->answers_peers += h->answers_peers;
        sum->idle_keep += h->idle_keep;
        sum->asked += h->asked;
        sum->received_bytes += h->received_bytes;
        sum->given += h->given;
        sum->idle_returns += h->idle_returns;
        sum->idle_bytes += h->idle_bytes;
    }
    return sum->answers_peers || sum->idle_keep || sum->asked || sum->idle_returns;
}

/* The sharing line under the totals. */
static void print_sharing(FILE *out, const cupool_live_share_t *sum, int width, const char *eol)
{
    char line[1024], b1[32], b2[32];
    snprintf(line, sizeof line,
             "sharing: %u process%s answer%s the others; out of memory, asked them %llu time%s and got %s back "
             "(%llu answer%s given); idle memory handed back %s",
             sum->answers_peers, sum->answers_peers == 1 ? "" : "es", sum->answers_peers == 1 ? "s" : "",
             (unsigned long long)sum->asked, sum->asked == 1 ? "" : "s",
             live_human((double)sum->received_bytes, b1, sizeof b1), (unsigned long long)sum->given,
             sum->given == 1 ? "" : "s", live_human((double)sum->idle_bytes, b2, sizeof b2));
    put_line(out, line, width, eol);
}

/* The whole view: a header, a line per process and device (as many as
 * height leaves room for, the device totals and kept kinds kept), the
 * totals. */
static void print_table(FILE *out, const cupool_live_page_t *pages, size_t n, int width, int height, const char *eol)
{
    size_t nrows;
    row_t *rows = make_rows(pages, n, &nrows);
    if (!rows) return;
    char line[1024];
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
    snprintf(line, sizeof line, "cupool top - %s - %zu process%s", when, n, n == 1 ? "" : "es");
    put_line(out, line, width, eol);
    put_line(out, "", width, eol);
    snprintf(line, sizeof line, "%7s %-20s %3s %10s %10s %10s %10s %9s %9s %-15s %5s", "PID", "COMMAND", "DEV",
             "IN USE", "RESERVED", "IDLE", "PEAK", "ALLOCS/S", "FREES/S", "FREE MODE", "OOM");
    put_line(out, line, width, eol);
    total_t totals[CUPOOL_LIVE_DEVICES * 4];
    size_t ndev = make_totals(rows, nrows, totals, sizeof totals / sizeof totals[0]);
    kept_total_t kinds[CUPOOL_LIVE_KEPT_KINDS];
    int nkinds = make_kept_totals(pages, n, kinds);
    /* Lines left for processes: the header's three and the totals' are taken. */
    cupool_live_share_t shared;
    int sharing = make_share_total(pages, n, &shared);
    int room = (height > 0 ? height - 4 : 1 << 30) - (int)ndev - 1 - nkinds - sharing;
    for (size_t i = 0; i < nrows; i++) {
        if ((int)i >= room && i + 1 < nrows) {
            snprintf(line, sizeof line, "... %zu more", nrows - i);
            put_line(out, line, width, eol);
            break;
        }
        print_row(out, &rows[i], width, eol);
    }
    put_line(out, "", width, eol);
    print_totals(out, totals, ndev, kinds, width, eol);
    if (sharing) print_sharing(out, &shared, width, eol);
    if (!n) put_line(out, "no process of this user publishes cupool statistics", width, eol);
    free(rows);
}

/* ---- JSON ----------------------------------------------------------------- */

/* A JSON string, valid UTF-8 whatever the page holds: control
 * characters escaped, a byte that is not UTF-8 as \ufffd. */
static void put_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    uint32_t cp;
    for (int n; (n = live_utf8_next(&s, &cp)) > 0;) {
        if (cp == '"' || cp == '\\') fprintf(out, "\\%c", (char)cp);
        else if (live_is_control(cp) || cp == LIVE_INVALID) fprintf(out, "\\u%04x", (unsigned)cp);
        else fwrite(s - n, 1, (size_t)n, out);
    }
    fputc('"', out);
}

static void print_json(FILE *out, const cupool_live_page_t *p)
{
    char modes[32];
    fprintf(out, "{\"pid\":%d,\"command\":", (int)p->pid);
    put_json_string(out, p->command);
    fprintf(out, ",\"version\":");
    put_json_string(out, p->version_text);
    fprintf(out, ",\"policy\":");
    put_json_string(out, p->policy);
    fprintf(out, ",\"free\":");
    put_json_string(out, p->free_option);
    fprintf(out, ",\"start_time\":%llu,\"updated_ns\":%llu,\"updates\":%llu,\"interval_ms\":%u,\"devices_left_out\":%u,"
                 "\"devices\":[",
            (unsigned long long)p->start_time, (unsigned long long)p->updated_ns, (unsigned long long)p->updates,
            p->interval_ms, p->devices_left_out);
    for (uint32_t k = 0; k < p->ndevices; k++) {
        const cupool_live_device_t *d = &p->device[k];
        fprintf(out,
                "%s{\"device\":%d,\"free_mode\":\"%s\",\"contexts\":%u,\"pooled\":%s,\"pooled_allocs\":%llu,"
                "\"pooled_frees\":%llu,\"native_allocs\":%llu,\"in_use\":%llu,\"peak_in_use\":%llu,\"reserved\":%llu,"
                "\"peak_reserved\":%llu,\"allocs_per_s\":%llu,\"frees_per_s\":%llu,\"trims\":%llu,\"oom_retries\":%llu,"
                "\"rewritten_memsets\":%llu,\"ready_reuses\":%llu,\"deferred_waits\":%llu,\"idle\":%llu}",
                k ? "," : "", (int)d->ordinal, live_modes(d, modes, sizeof modes), d->contexts,
                d->pooled ? "true" : "false", (unsigned long long)d->pooled_allocs,
                (unsigned long long)d->pooled_frees, (unsigned long long)d->native_allocs,
                (unsigned long long)d->in_use, (unsigned long long)d->peak_in_use, (unsigned long long)d->reserved,
                (unsigned long long)d->peak_reserved, (unsigned long long)d->alloc_rate,
                (unsigned long long)d->free_rate, (unsigned long long)d->trims, (unsigned long long)d->oom_retries,
                (unsigned long long)d->rewritten_memsets, (unsigned long long)d->ready_reuses,
                (unsigned long long)d->deferred_waits, (unsigned long long)live_idle(d));
    }
    fputs("]", out);
    const cupool_live_share_t *h = &p->share;
    fprintf(out,
            ",\"share\":{\"answers_peers\":%s,\"idle_keep\":%s,\"asked\":%llu,\"answers\":%llu,"
            "\"received_bytes\":%llu,\"given\":%llu,\"given_bytes\":%llu,\"idle_returns\":%llu,\"idle_bytes\":%llu}",
            h->answers_peers ? "true" : "false", h->idle_keep ? "true" : "false", (unsigned long long)h->asked,
            (unsigned long long)h->answers, (unsigned long long)h->received_bytes, (unsigned long long)h->given,
            (unsigned long long)h->given_bytes, (unsigned long long)h->idle_returns, (unsigned long long)h->idle_bytes);
    for (int k = 0; k < CUPOOL_LIVE_KEPT_KINDS; k++) {
        const cupool_live_kept_t *m = &p->kept[k];
        fprintf(out,
                ",\"%s\":{\"allocs\":%llu,\"reused\":%llu,\"frees\":%llu,\"kept_frees\":%llu,\"kept\":%llu,"
                "\"peak_kept\":%llu,\"limit_frees\":%llu,\"oom_frees\":%llu,\"advice_frees\":%llu}",
                live_kept_kinds[k].key, (unsigned long long)m->allocs,
                (unsigned long long)m->reused, (unsigned long long)m->frees, (unsigned long long)m->kept_frees,
                (unsigned long long)m->kept, (unsigned long long)m->peak_kept, (unsigned long long)m->limit_frees,
                (unsigned long long)m->oom_frees, (unsigned long long)m->advice_frees);
    }
    fputs("}\n", out);
}

/* ---- cupool stat PID -------------------------------------------------------- */

#define U(x) ((unsigned long long)(x))

static void print_stat(FILE *out, const cupool_live_page_t *p)
{
    char b1[32], b2[32], b3[32], b4[32], modes[32];
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t now = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    /* Nothing of the page reaches the terminal raw (escape sequences). */
    char policy[64], free_option[64], command[4 * CUPOOL_LIVE_COMMAND], version[64];
    live_printable(p->policy, policy, sizeof policy, sizeof p->policy);
    live_printable(p->free_option, free_option, sizeof free_option, sizeof p->free_option);
    live_printable(p->command, command, sizeof command, CUPOOL_LIVE_COMMAND);
    live_printable(p->version_text, version, sizeof version, sizeof p->version_text);
    fprintf(out, "cupool: statistics for pid %d (policy %s, free mode %s)\n", (int)p->pid, policy, free_option);
    fprintf(out, "cupool:   command: %s\n", command);
    fprintf(out, "cupool:   cupool %s; updated %.1f s ago (update %llu, every %u ms)\n", version,
            now > p->updated_ns ? (double)(now - p->updated_ns) / 1e9 : 0.0, U(p->updates), p->interval_ms);
    for (uint32_t k = 0; k < p->ndevices; k++) {
        const cupool_live_device_t *d = &p->device[k];
        fprintf(out, "cupool:   device %d: (free mode %s, %u context%s%s)\n", (int)d->ordinal,
                live_modes(d, modes, sizeof modes), d->contexts, d->contexts == 1 ? "" : "s",
                d->pooled ? "" : ", no pools");
        fprintf(out, "cupool:     pooled allocations  %llu, frees %llu\n", U(d->pooled_allocs), U(d->pooled_frees));
        fprintf(out, "cupool:     native allocations  %llu\n", U(d->native_allocs));
        fprintf(out, "cupool:     in use %s, reserved %s, idle %s\n", live_human((double)d->in_use, b1, sizeof b1),
                live_human((double)d->reserved, b2, sizeof b2), live_human((double)live_idle(d), b3, sizeof b3));
        fprintf(out, "cupool:     peak in use %s, peak reserved %s\n", live_human((double)d->peak_in_use, b3, sizeof b3),
                live_human((double)d->peak_reserved, b4, sizeof b4));
        fprintf(out, "cupool:     allocations per second %llu, frees per second %llu\n", U(d->alloc_rate),
                U(d->free_rate));
        fprintf(out, "cupool:     trims %llu, OOM retries %llu, rewritten memsets %llu\n", U(d->trims), U(d->oom_retries),
                U(d->rewritten_memsets));
        if (d->ready_reuses)
            fprintf(out, "cupool:     allocations served by a ready block %llu (events recorded for them %llu)\n",
                    U(d->ready_reuses), U(d->ordered_fences));
        if (d->misses_given_back)
            fprintf(out, "cupool:     large allocations the store made room for %llu (stored blocks handed back %s)\n",
                    U(d->misses_given_back), live_human((double)d->given_back_bytes, b1, sizeof b1));
        if (d->oversize_kept)
            fprintf(out, "cupool:     freed blocks the store kept though larger than itself %llu\n", U(d->oversize_kept));
        if (d->deferred_waits)
            fprintf(out, "cupool:     frees that waited for the GPU (over 1 GiB freed and waiting) %llu\n",
                    U(d->deferred_waits));
        if (d->queued_calls)
            fprintf(out, "cupool:     pool calls made for waiting threads by the one in front of the driver queue %llu\n",
                    U(d->queued_calls));
    }
    for (int k = 0; k < CUPOOL_LIVE_KEPT_KINDS; k++) {
        const cupool_live_kept_t *m = &p->kept[k];
        if (!m->allocs && !m->frees) continue;
        fprintf(out, "cupool:   %s memory:\n", live_kept_kinds[k].text);
        fprintf(out, "cupool:     allocations %llu (served by kept blocks %llu), frees %llu (kept %llu)\n", U(m->allocs),
                U(m->reused), U(m->frees), U(m->kept_frees));
        fprintf(out, "cupool:     kept now %s, at most %s; handed back: for the limit %llu, out of memory %llu",
                live_human((double)m->kept, b1, sizeof b1), live_human((double)m->peak_kept, b2, sizeof b2),
                U(m->limit_frees), U(m->oom_frees));
        if (k == CUPOOL_LIVE_KEPT_MANAGED) fprintf(out, ", advice in their mapping %llu", U(m->advice_frees));
        fputc('\n', out);
    }
    const cupool_live_share_t *h = &p->share;
    fprintf(out, "cupool:   sharing: %s other processes' requests (CUPOOL_SHARE); idle memory %s (CUPOOL_IDLE_KEEP)\n",
            h->answers_peers ? "answers" : "does not answer", h->idle_keep ? "bounded" : "not bounded");
    if (h->asked || h->given || h->idle_returns) {
        fprintf(out, "cupool:     out of memory, asked the others %llu time%s: %llu answer%s handed back %s\n", U(h->asked),
                h->asked == 1 ? "" : "s", U(h->answers), h->answers == 1 ? "" : "s",
                live_human((double)h->received_bytes, b1, sizeof b1));
        fprintf(out, "cupool:     handed back on request %llu time%s, %s; by itself (idle) %llu time%s, %s\n", U(h->given),
                h->given == 1 ? "" : "s", live_human((double)h->given_bytes, b2, sizeof b2), U(h->idle_returns),
                h->idle_returns == 1 ? "" : "s", live_human((double)h->idle_bytes, b3, sizeof b3));
    }
    if (!p->ndevices) fprintf(out, "cupool:   no device used yet\n");
    if (p->devices_left_out) fprintf(out, "cupool:   %u more devices not carried by the page\n", p->devices_left_out);
}

static int stat_pid(const char *dir, const char *text, int json)
{
    char *end;
    long pid = strtol(text, &end, 10);
    if (!*text || *end || pid <= 0 || pid > 0x7fffffff) {
        fprintf(stderr, "cupool stat: not a process id: %s\n", text);
        return 2;
    }
    cupool_live_page_t page;
    int r = live_read_pid(dir, (int)pid, &page, 1);
    static const char *const why[] = {
        [LIVE_MISSING] = "no live statistics page of this user (not under cupool, CUPOOL_LIVE=0, or another user's)",
        [LIVE_REFUSED] = "its page is not a private file of this user: refused",
        [LIVE_BAD] = "its page is not one this cupool-top reads",
        [LIVE_STALE] = "the process is gone (its page was removed)",
        [LIVE_BUSY] = "its page is being written and never settled",
    };
    if (r != LIVE_OK) {
        fprintf(stderr, "cupool stat: pid %ld: %s\n", pid, why[r]);
        return 1;
    }
    if (json) print_json(stdout, &page);
    else print_stat(stdout, &page);
    return 0;
}

/* ---- the terminal view ------------------------------------------------------ */

static struct termios saved;
static int raw_on;

static void leave_raw(void)
{
    if (!raw_on) return;
    raw_on = 0;
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
}

static int enter_raw(void)
{
    if (tcgetattr(STDIN_FILENO, &saved) != 0) return -1;
    struct termios raw = saved;
    /* Keys come one by one, unechoed; ^C still sends SIGINT (ISIG kept). */
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0) return -1;
    raw_on = 1;
    atexit(leave_raw);
    /* The alternate screen, cursor hidden: the shell's screen comes back. */
    fputs("\033[?1049h\033[?25l", stdout);
    return 0;
}

static void terminal_size(int *width, int *height)
{
    struct winsize ws;
    *width = 80;
    *height = 24;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
        *width = ws.ws_col;
        *height = ws.ws_row;
    }
}

/* Waits up to delay_ms for a key; 1 when it was q (or Q). */
static int wait_for_quit(int delay_ms)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left = delay_ms - ((now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left <= 0 || stop) return 0;
        struct pollfd fd = {STDIN_FILENO, POLLIN, 0};
        int r = poll(&fd, 1, (int)left);
        if (r < 0 && errno != EINTR) return 0;
        if (r <= 0) continue;
        char key;
        ssize_t n = read(STDIN_FILENO, &key, 1);
        if (n == 1 && (key == 'q' || key == 'Q')) return 1;
        if (n == 0) return 1; /* the terminal went away */
    }
}

static int view(const char *dir, int delay_ms)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "cupool top: not a terminal; use --once or --json\n");
        return 2;
    }
    if (enter_raw() != 0) {
        fprintf(stderr, "cupool top: cannot set up the terminal: %s\n", strerror(errno));
        return 1;
    }
    while (!stop) {
        size_t n;
        cupool_live_page_t *pages = live_scan(dir, &n, 1, NULL);
        int width, height;
        terminal_size(&width, &height);
        fputs("\033[H\033[2J", stdout);
        print_table(stdout, pages, n, width, height - 1, "\033[K\r\n");
        put_line(stdout, "q: quit", width, "");
        fflush(stdout);
        free(pages);
        if (wait_for_quit(delay_ms)) break;
    }
    leave_raw();
    return 0;
}

/* ---- main --------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"once", no_argument, NULL, '1'},       {"json", no_argument, NULL, 'j'},
        {"delay", required_argument, NULL, 'd'}, {"stat", no_argument, NULL, 's'},
        {"prometheus", required_argument, NULL, 'p'}, {"dir", required_argument, NULL, 'D'},
        {"command-lines", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},       {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int once = 0, json = 0, delay_ms = 1000, port = -1;
    int stat = 0, command_lines = 0;
    const char *dir = NULL, *prom_path = NULL;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":1jd:sp:hV", longs, NULL)) != -1;) {
        char *end;
        switch (c) {
        case '1': once = 1; break;
        case 'j': json = 1; break;
        case 'd': {
            double seconds = strtod(optarg, &end);
            if (*end || end == optarg || !(seconds >= 0.05 && seconds <= 3600)) {
                fprintf(stderr, "cupool top: --delay takes seconds between 0.05 and 3600\n");
                return 2;
            }
            delay_ms = (int)(seconds * 1000);
            break;
        }
        case 's': stat = 1; break;
        case 'C': command_lines = 1; break;
        case 'p': {
            if (strchr(optarg, '/')) {
                prom_path = optarg;
                port = 0;
                break;
            }
            long value = strtol(optarg, &end, 10);
            if (*end || end == optarg || value < 0 || value > 65535) {
                fprintf(stderr, "cupool top: --prometheus takes a port, 0 to 65535, or a socket path with a /\n");
                return 2;
            }
            port = (int)value;
            break;
        }
        case 'D': dir = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("cupool-top %s\n", PACKAGE_VERSION); return 0;
        default: cli_refused("cupool top", c, argv, longs); usage(stderr); return 2;
        }
    }
    /* `cupool stat PID` runs `cupool-top --stat PID`. */
    if (stat && optind + 1 != argc) {
        fprintf(stderr, "cupool stat: one process id, please (cupool stat [--json] PID)\n");
        return 2;
    }
    if (!stat && optind < argc) {
        fprintf(stderr, "cupool top: unexpected argument %s\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    /* A folder that is not there would read as no process at all. */
    DIR *pages_dir = opendir(live_dir(dir));
    if (!pages_dir) {
        fprintf(stderr, "cupool top: %s: %s\n", live_dir(dir), strerror(errno));
        return 1;
    }
    closedir(pages_dir);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (stat) return stat_pid(dir, argv[optind], json);
    if (port >= 0) return prom_serve(dir, port, prom_path, command_lines, &stop);
    if (!json && !once) return view(dir, delay_ms);
    while (!stop) {
        size_t n;
        cupool_live_page_t *pages = live_scan(dir, &n, 1, NULL);
        if (json)
            for (size_t i = 0; i < n; i++) print_json(stdout, &pages[i]);
        else print_table(stdout, pages, n, 0, 0, "\n");
        free(pages);
        if (fflush(stdout) != 0 || once) break;
        struct timespec t = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000};
        nanosleep(&t, NULL);
    }
    return 0;
}
