/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPOOL_* environment options: one table (options.h's CUPOOL_OPTIONS),
 * each value read and validated once, on first use.  A bad value keeps the
 * default and says why in one message; CUPOOL_VERBOSE=1 prints every
 * effective value and where it came from.  No getenv anywhere else.  And
 * the messages themselves (cupool_message), which read CUPOOL_VERBOSE and
 * which the options use to warn: both here, as in mimalloc's options.c.
 */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum option_kind { KIND_ENUM, KIND_SIZE, KIND_HELD, KIND_BOOL, KIND_STRING };

typedef struct option_row {
    const char *env;          /* environment variable */
    enum option_kind kind;
    const char *fallback;     /* default, as text, parsed like a user value */
    const char *choices;      /* ENUM: "a|b|c", value = index */
    const char *help;
} option_row_t;

static const option_row_t rows[CUPOOL_OPT_COUNT] = {
#define CUPOOL_OPTION_ROW(id, env, kind, fallback, choices, help) {env, KIND_##kind, fallback, choices, help},
    CUPOOL_OPTIONS(CUPOOL_OPTION_ROW)
#undef CUPOOL_OPTION_ROW
};

uint64_t cupool_option_values[CUPOOL_OPT_COUNT];
static const char *strings[CUPOOL_OPT_COUNT];
static int from_env[CUPOOL_OPT_COUNT];
static int tool_attached;
static pthread_once_t parse_once = PTHREAD_ONCE_INIT;
atomic_int cupool_options_parsed; /* fast path: pthread_once costs a call on every use */

int cupool_parse_size(const char *text, uint64_t *out)
{
    if (!text || !*text) return -1;
    if (strcasecmp(text, "unlimited") == 0 || strcasecmp(text, "max") == 0) {
        *out = CUPOOL_SIZE_UNLIMITED;
        return 0;
    }
    /* Decimal digits with at most one point: strtod alone would also take
     * a sign, leading blanks, hex ("0x10") and exponents ("1e3"). */
    size_t digits = strspn(text, "0123456789."), point = strcspn(text, ".");
    if (digits == 0 || (point < digits && memchr(text + point + 1, '.', digits - point - 1))) return -1;
    errno = 0;
    char *end;
    double number = strtod(text, &end);
    if (errno || end != text + digits || !isfinite(number)) return -1;
    uint64_t unit = 1;
    switch (*end) {
    case 'k': case 'K': unit = 1ull << 10; end++; break;
    case 'm': case 'M': unit = 1ull << 20; end++; break;
    case 'g': case 'G': unit = 1ull << 30; end++; break;
    case 't': case 'T': unit = 1ull << 40; end++; break;
    default: break;
    }
    /* Accept K, KB and KiB alike: all mean 1024. */
    if (unit > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'b' || end[1] == 'B')) end += 2;
    else if (unit > 1 && (end[0] == 'b' || end[0] == 'B')) end++;
    else if (unit == 1 && (end[0] == 'b' || end[0] == 'B')) end++;
    if (*end) return -1;
    double bytes = number * (double)unit;
    if (bytes >= 18446744073709551616.0) return -1; /* 2^64: does not fit */
    if (bytes != floor(bytes)) return -1;           /* fractional bytes */
    *out = (uint64_t)bytes;
    return 0;
}

int cupool_parse_held(const char *text, uint64_t *out)
{
    size_t len = text ? strlen(text) : 0;
    if (len < 2 || text[len - 1] != '%') {
        /* A byte count may not reach the flag bit (2^63 bytes is 8 EiB). */
        uint64_t bytes;
        if (cupool_parse_size(text, &bytes) != 0) return -1;
        if (bytes != CUPOOL_SIZE_UNLIMITED && (bytes & CUPOOL_SHARE_FLAG)) return -1;
        *out = bytes;
        return 0;
    }
    /* The number before '%' as a size has no suffix: bare decimal digits. */
    char number[32];
    if (len - 1 >= sizeof number) return -1;
    memcpy(number, text, len - 1);
    number[len - 1] = '\0';
    if (strspn(number, "0123456789.") != len - 1) return -1;
    errno = 0;
    char *end;
    double percent = strtod(number, &end);
    if (errno || *end || !isfinite(percent)) return -1;
    /* 0% would mean nothing may be held: say 0 for that; a share finer
     * than a hundredth of a percent is not kept (12.345% is refused, not
     * rounded). */
    double bp = nearbyint(percent * 100);
    if (bp < 1 || bp > (double)CUPOOL_SHARE_MAX_BP || fabs(percent * 100 - bp) > 1e-6) return -1;
    *out = CUPOOL_SHARE_FLAG | (uint64_t)bp;
    return 0;
}

static int parse_enum(const char *choices, const char *text, uint64_t *out)
{
    size_t len = strlen(text);
    uint64_t index = 0;
    for (const char *p = choices; *p; index++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncasecmp(p, text, n) == 0) {
            *out = index;
            return 0;
        }
        p += n + (bar != NULL);
    }
    return -1;
}

static int parse_bool(const char *text, uint64_t *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"}, *const no[] = {"0", "no", "false", "off"};
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(text, yes[i]) == 0) return *out = 1, 0;
        if (strcasecmp(text, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

static int parse_value(const option_row_t *row, const char *text, uint64_t *value)
{
    switch (row->kind) {
    case KIND_ENUM: return parse_enum(row->choices, text, value);
    case KIND_SIZE: return cupool_parse_size(text, value);
    case KIND_HELD: return cupool_parse_held(text, value);
    case KIND_BOOL: return parse_bool(text, value);
    case KIND_STRING: *value = *text != '\0'; return 0;
    }
    return -1;
}

static const char *expected(const option_row_t *row)
{
    switch (row->kind) {
    case KIND_ENUM: return row->choices;
    case KIND_SIZE: return "a byte count with an optional K/M/G/T suffix, or unlimited";
    case KIND_HELD: return "a byte count with an optional K/M/G/T suffix, unlimited, or a share of the bytes in use such as 25%";
    case KIND_BOOL: return "0 or 1";
    default: return "text";
    }
}

/* The launcher's check (cupool_options_refuse): the rows whose bad value
 * is refused rather than warned about, and how many were refused. */
static unsigned char refuse[CUPOOL_OPT_COUNT];
static int refused;

static void parse_all(void)
{
    /* Nsight tools name their library in CUDA_INJECTION64_PATH;
     * compute-sanitizer (13.0) sets NV_SANITIZER_INJECTION_* instead. */
    static const char *const tool_variables[] = {"CUDA_INJECTION64_PATH", "NV_SANITIZER_INJECTION_PORT_BASE"};
    tool_attached = 0;
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(tool_variables); i++) {
        const char *tool = getenv(tool_variables[i]);
        if (tool && *tool) tool_attached = 1;
    }
    for (int i = 0; i < CUPOOL_OPT_COUNT; i++) {
        const option_row_t *row = &rows[i];
        const char *text = getenv(row->env);
        from_env[i] = 0;
        parse_value(row, row->fallback, &cupool_option_values[i]);
        strings[i] = row->fallback;
        if (!text) continue;
        uint64_t value;
        if (parse_value(row, text, &value) != 0) {
            /* Never rate-limited: each option warns once, however many
             * of them are bad. */
            if (refuse[i]) {
                refused++;
                cupool_message_always(CUPOOL_MSG_ERROR, "%s=\"%s\": expected %s", row->env, text, expected(row));
            } else
                cupool_message_always(CUPOOL_MSG_WARN, "ignoring %s=\"%s\": expected %s; using the default %s",
                                      row->env, text, expected(row), row->fallback);
            continue;
        }
        cupool_option_values[i] = value;
        strings[i] = text;
        from_env[i] = 1;
    }
    /* A pool that may hold more than the largest size it serves is fine; a
     * minimum above the maximum pools nothing, which is surely a mistake. */
    if (cupool_option_values[CUPOOL_OPT_MIN_SIZE] > cupool_option_values[CUPOOL_OPT_MAX_SIZE]) {
        if (refuse[CUPOOL_OPT_MIN_SIZE] || refuse[CUPOOL_OPT_MAX_SIZE]) {
            refused++;
            cupool_message(CUPOOL_MSG_ERROR, "CUPOOL_MIN_SIZE is above CUPOOL_MAX_SIZE");
            return;
        }
        cupool_message(CUPOOL_MSG_WARN, "CUPOOL_MIN_SIZE is above CUPOOL_MAX_SIZE; using the defaults of both");
        for (int id = CUPOOL_OPT_MIN_SIZE; id <= CUPOOL_OPT_MAX_SIZE; id++)
            parse_value(&rows[id], rows[id].fallback, &cupool_option_values[id]);
        strings[CUPOOL_OPT_MIN_SIZE] = rows[CUPOOL_OPT_MIN_SIZE].fallback;
        strings[CUPOOL_OPT_MAX_SIZE] = rows[CUPOOL_OPT_MAX_SIZE].fallback;
        from_env[CUPOOL_OPT_MIN_SIZE] = from_env[CUPOOL_OPT_MAX_SIZE] = 0;
    }
}

static void parse_once_and_publish(void)
{
    parse_all();
    atomic_store_explicit(&cupool_options_parsed, 1, memory_order_release);
}

void cupool_options_parse(void)
{
    pthread_once(&parse_once, parse_once_and_publish);
}

int cupool_cuda_tool_attached(void)
{
    pthread_once(&parse_once, parse_once_and_publish);
    return tool_attached;
}

const char *cupool_option_string(enum cupool_option id)
{
    pthread_once(&parse_once, parse_once_and_publish);
    return strings[id];
}

int cupool_options_refuse(const char *env)
{
    for (int i = 0; i < CUPOOL_OPT_COUNT; i++)
        if (strcmp(rows[i].env, env) == 0) return refuse[i] = 1, 0;
    return -1;
}

int cupool_options_refused(void)
{
    pthread_once(&parse_once, parse_once_and_publish);
    return refused;
}

void cupool_options_print(void)
{
    pthread_once(&parse_once, parse_once_and_publish);
    for (int i = 0; i < CUPOOL_OPT_COUNT; i++)
        cupool_message(CUPOOL_MSG_INFO, "%-25s = %-10s (%s) %s", rows[i].env, *strings[i] ? strings[i] : "\"\"",
                       from_env[i] ? "environment" : "default", rows[i].help);
}

/* ---- messages ------------------------------------------------------------
 * cupool's one voice: "cupool: " lines on stderr, errors and warnings always,
 * information when CUPOOL_VERBOSE=1; each also goes into the call log when
 * one is open.  A message that keeps coming (a failing call in a loop) is
 * printed MESSAGE_REPEATS times, then once more to say the rest are dropped.
 * Never exits and never allocates on the device. */

#define MESSAGE_REPEATS 16 /* of one call site; the options' warnings are not counted (cupool_message_always) */
#define MESSAGE_SITES 64

static _Atomic(cupool_message_sink_fn *) message_sink;

void cupool_message_sink(cupool_message_sink_fn *fn)
{
    atomic_store_explicit(&message_sink, fn, memory_order_release);
}

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

static void message_v(int level, int verdict, const char *fmt, va_list args)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, args);
    static const char *const prefix[] = {"error: ", "warning: ", ""};
    char line[680];
    int n = snprintf(line, sizeof line, "cupool: %s%s%s\n", prefix[level], text,
                     verdict < 0 ? " (further messages like this one are not shown)" : "");
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    /* One write call so lines from several threads do not interleave. */
    ssize_t unused = write(STDERR_FILENO, line, (size_t)n);
    (void)unused;
    cupool_message_sink_fn *sink = atomic_load_explicit(&message_sink, memory_order_acquire);
    if (sink) sink(level, text);
}

void cupool_message(int level, const char *fmt, ...)
{
    if (level == CUPOOL_MSG_INFO && !cupool_option(CUPOOL_OPT_VERBOSE)) return;
    int verdict = level == CUPOOL_MSG_INFO ? 1 : rate(fmt);
    if (!verdict) return;
    va_list args;
    va_start(args, fmt);
    message_v(level, verdict, fmt, args);
    va_end(args);
}

void cupool_message_always(int level, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    message_v(level, 1, fmt, args);
    va_end(args);
}
