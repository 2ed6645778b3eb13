/*
 * cupool's one voice: "cupool: " lines on stderr, errors and warnings always,
 * information when CUPOOL_VERBOSE=1; each also goes into the call log when
 * one is open.  A message that keeps coming (a failing call in a loop) is
 * printed MESSAGE_REPEATS times, then once more to say the rest are dropped.
 * Never exits and never allocates on the device.
 */
#include "base.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define MESSAGE_REPEATS 16 /* more than there are options, each of which may warn once */
#define MESSAGE_SITES 64

/* How often each format string (one per call site) has been printed. */
static struct {
    _Atomic(const char *) fmt;
    atomic_int count;
} sites[MESSAGE_SITES];

/* 1: print, 0: drop, -1: print and say further ones are dropped. */
static int rate(const char *fmt)
{
    size_t h = ((uintptr_t)fmt >> 3) % MESSAGE_SITES;
    for (size_t i = 0; i < MESSAGE_SITES; i++) {
        size_t k = (h + i) % MESSAGE_SITES;
        const char *expected = NULL;
        if (atomic_load(&sites[k].fmt) != fmt && !atomic_compare_exchange_strong(&sites[k].fmt, &expected, fmt) &&
            expected != fmt)
            continue;
        int n = atomic_fetch_add(&sites[k].count, 1);
        return n < MESSAGE_REPEATS ? 1 : n == MESSAGE_REPEATS ? -1 : 0;
    }
    return 1; /* more call sites than slots: never drop */
}

void cupool_message(int level, const char *fmt, ...)
{
    if (level == CUPOOL_MSG_INFO && !cupool_option(CUPOOL_OPT_VERBOSE)) return;
    int verdict = level == CUPOOL_MSG_INFO ? 1 : rate(fmt);
    if (!verdict) return;
    char text[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    static const char *const prefix[] = {"error: ", "warning: ", ""};
    char line[680];
    int n = snprintf(line, sizeof line, "cupool: %s%s%s\n", prefix[level], text,
                     verdict < 0 ? " (further messages like this one are not shown)" : "");
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    /* One write call so lines from several threads do not interleave. */
    ssize_t unused = write(STDERR_FILENO, line, (size_t)n);
    (void)unused;
    cupool_log_message(level, text);
}
