/*
 * cupool's one voice: "cupool: " lines on stderr, errors and warnings always,
 * information when CUPOOL_VERBOSE=1; each also goes into the call log when
 * one is open.  Never exits and never allocates on the device.
 */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void cupool_message(int level, const char *fmt, ...)
{
    char text[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    if (level == CUPOOL_MSG_INFO && !cupool_option(CUPOOL_OPT_VERBOSE)) return;
    static const char *const prefix[] = {"error: ", "warning: ", ""};
    char line[600];
    int n = snprintf(line, sizeof line, "cupool: %s%s\n", prefix[level], text);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    /* One write call so lines from several threads do not interleave. */
    ssize_t unused = write(STDERR_FILENO, line, (size_t)n);
    (void)unused;
    cupool_log_message(level, text);
}
