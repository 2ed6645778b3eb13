/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small reader for cupool's call log: one flat JSON object per line.  The
 * tools (cupool-report, cupool-replay) and the log tests need only the
 * top-level fields of each line, so a line is checked against the JSON
 * grammar in full (nested values are validated and skipped) and its
 * top-level fields are returned as slices of the line: field order does not
 * matter and unknown fields are ignored.  No allocation, no dependency
 * beyond libc.
 */
#ifndef CUPOOL_JSONL_H
#define CUPOOL_JSONL_H

#include <stddef.h>
#include <stdint.h>

#define JSONL_MAX_FIELDS 32

enum { JSONL_STRING, JSONL_NUMBER, JSONL_TRUE, JSONL_FALSE, JSONL_NULL, JSONL_OBJECT, JSONL_ARRAY };

typedef struct jsonl_field {
    const char *key;   /* raw key, between the quotes (escapes not decoded) */
    size_t key_len;
    int type;          /* JSONL_* */
    const char *value; /* raw value: for strings, between the quotes */
    size_t value_len;
} jsonl_field_t;

typedef struct jsonl_line {
    int count;
    jsonl_field_t fields[JSONL_MAX_FIELDS];
} jsonl_line_t;

/* Parses one line (without its newline) of `len` bytes.  Returns 0, or -1
 * with *error set to a static description of what is wrong.  Fields beyond
 * JSONL_MAX_FIELDS are validated but not kept. */
int jsonl_parse(const char *text, size_t len, jsonl_line_t *out, const char **error);

/* The top-level field named `key`, or NULL. */
const jsonl_field_t *jsonl_get(const jsonl_line_t *line, const char *key);

/* Typed access; each returns 0 when the field exists with that type and a
 * value that fits, -1 otherwise (and leaves *out alone). */
int jsonl_get_u64(const jsonl_line_t *line, const char *key, uint64_t *out);
int jsonl_get_i64(const jsonl_line_t *line, const char *key, int64_t *out);
/* A string field decoded into buf (NUL-terminated; escapes decoded, \u to
 * UTF-8); -1 when missing, not a string, or longer than len - 1 bytes. */
int jsonl_get_str(const jsonl_line_t *line, const char *key, char *buf, size_t len);
/* A string field holding a hexadecimal pointer ("0x7f..."; "(nil)" is 0). */
int jsonl_get_ptr(const jsonl_line_t *line, const char *key, uint64_t *out);

#endif
