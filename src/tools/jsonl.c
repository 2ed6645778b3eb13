/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The call-log line reader declared in jsonl.h: a recursive-descent check of
 * one JSON value (RFC 8259 grammar, nesting limited to 64 levels) that keeps
 * the top-level fields of an object as slices of the input line.
 */
#include "jsonl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
    const char *p, *end;
    const char *error;
} parser_t;

static int fail(parser_t *ps, const char *why)
{
    if (!ps->error) ps->error = why;
    return -1;
}

static void skip_space(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || *ps->p == '\n')) ps->p++;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string at ps->p (the opening quote); *start and *len get its raw contents. */
static int parse_string(parser_t *ps, const char **start, size_t *len)
{
    if (ps->p >= ps->end) return fail(ps, "line ends inside the object");
    if (*ps->p != '"') return fail(ps, "expected a string");
    const char *s = ++ps->p;
    while (ps->p < ps->end) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            *start = s;
            *len = (size_t)(ps->p - s);
            ps->p++;
            return 0;
        }
        if (c < 0x20) return fail(ps, "control character in a string");
        if (c == '\\') {
            if (++ps->p >= ps->end) break;
            switch (*ps->p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': ps->p++; break;
            case 'u':
                if (ps->end - ps->p < 5 || !is_hex(ps->p[1]) || !is_hex(ps->p[2]) || !is_hex(ps->p[3]) ||
                    !is_hex(ps->p[4]))
                    return fail(ps, "bad \\u escape in a string");
                ps->p += 5;
                break;
            default: return fail(ps, "bad escape in a string");
            }
            continue;
        }
        ps->p++;
    }
    return fail(ps, "unterminated string");
}

static int parse_number(parser_t *ps)
{
    const char *p = ps->p;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, "bad number");
    if (*p == '0') p++;
    else while (p < ps->end && *p >= '0' && *p <= '9') p++;
    if (p < ps->end && *p == '.') {
        p++;
        if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    ps->p = p;
    return 0;
}

static int parse_literal(parser_t *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return fail(ps, "unexpected character");
    ps->p += n;
    return 0;
}

static int parse_value(parser_t *ps, int depth, int *type, const char **start, size_t *len);

/* An object or array at ps->p; top-level object fields go to `out`. */
static int parse_container(parser_t *ps, int depth, jsonl_line_t *out)
{
    if (depth > MAX_DEPTH) return fail(ps, "nested too deeply");
    char close = *ps->p == '{' ? '}' : ']';
    ps->p++;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        skip_space(ps);
        if (close == '}') {
            if (parse_string(ps, &key, &key_len) != 0) return fail(ps, "expected a field name");
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':' after a field name");
            ps->p++;
            skip_space(ps);
        }
        int type;
        const char *value;
        size_t value_len;
        if (parse_value(ps, depth + 1, &type, &value, &value_len) != 0) return -1;
        if (out && out->count < JSONL_MAX_FIELDS)
            out->fields[out->count++] = (jsonl_field_t){key, key_len, type, value, value_len};
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(parser_t *ps, int depth, int *type, const char **start, size_t *len)
{
    skip_space(ps);
    if (ps->p >= ps->end) return fail(ps, "missing value");
    const char *s = ps->p;
    int r;
    switch (*ps->p) {
    case '"':
        *type = JSONL_STRING;
        return parse_string(ps, start, len);
    case '{': *type = JSONL_OBJECT; r = parse_container(ps, depth, NULL); break;
    case '[': *type = JSONL_ARRAY; r = parse_container(ps, depth, NULL); break;
    case 't': *type = JSONL_TRUE; r = parse_literal(ps, "true"); break;
    case 'f': *type = JSONL_FALSE; r = parse_literal(ps, "false"); break;
    case 'n': *type = JSONL_NULL; r = parse_literal(ps, "null"); break;
    default: *type = JSONL_NUMBER; r = parse_number(ps); break;
    }
    *start = s;
    *len = (size_t)(ps->p - s);
    return r;
}

int jsonl_parse(const char *text, size_t len, jsonl_line_t *out, const char **error)
{
    parser_t ps = {text, text + len, NULL};
    out->count = 0;
    skip_space(&ps);
    if (ps.p >= ps.end) return *error = "empty line", -1;
    if (*ps.p != '{') return *error = "not a JSON object", -1;
    if (parse_container(&ps, 1, out) != 0) return *error = ps.error, -1;
    skip_space(&ps);
    if (ps.p != ps.end) return *error = "text after the object", -1;
    return 0;
}

const jsonl_field_t *jsonl_get(const jsonl_line_t *line, const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; i < line->count; i++)
        if (line->fields[i].key_len == n && memcmp(line->fields[i].key, key, n) == 0) return &line->fields[i];
    return NULL;
}

/* Copies a number field into buf so strto* see a terminated string. */
static int number_text(const jsonl_line_t *line, const char *key, char *buf, size_t len)
{
    const jsonl_field_t *f = jsonl_get(line, key);
    if (!f || f->type != JSONL_NUMBER || f->value_len >= len) return -1;
    memcpy(buf, f->value, f->value_len);
    buf[f->value_len] = '\0';
    return 0;
}

int jsonl_get_u64(const jsonl_line_t *line, const char *key, uint64_t *out)
{
    char buf[64], *end;
    if (number_text(line, key, buf, sizeof buf) != 0 || buf[0] == '-') return -1;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || *end) return -1; /* fractions and exponents are not byte counts */
    *out = v;
    return 0;
}

int jsonl_get_i64(const jsonl_line_t *line, const char *key, int64_t *out)
{
    char buf[64], *end;
    if (number_text(line, key, buf, sizeof buf) != 0) return -1;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

int jsonl_get_str(const jsonl_line_t *line, const char *key, char *buf, size_t len)
{
    const jsonl_field_t *f = jsonl_get(line, key);
    if (!f || f->type != JSONL_STRING || len == 0) return -1;
    size_t o = 0;
    for (size_t i = 0; i < f->value_len; i++) {
        char tmp[4];
        size_t n = 1;
        char c = f->value[i];
        if (c == '\\') { /* the parser has checked every escape */
            c = f->value[++i];
            switch (c) {
            case 'b': tmp[0] = '\b'; break;
            case 'f': tmp[0] = '\f'; break;
            case 'n': tmp[0] = '\n'; break;
            case 'r': tmp[0] = '\r'; break;
            case 't': tmp[0] = '\t'; break;
            case 'u': {
                char hex[5] = {f->value[i + 1], f->value[i + 2], f->value[i + 3], f->value[i + 4], 0};
                unsigned cp = (unsigned)strtoul(hex, NULL, 16);
                i += 4;
                /* A surrogate pair spells one code point. */
                if (cp >= 0xd800 && cp < 0xdc00 && i + 6 < f->value_len && f->value[i + 1] == '\\' &&
                    f->value[i + 2] == 'u') {
                    char lo_hex[5] = {f->value[i + 3], f->value[i + 4], f->value[i + 5], f->value[i + 6], 0};
                    unsigned lo = (unsigned)strtoul(lo_hex, NULL, 16);
                    if (lo >= 0xdc00 && lo < 0xe000) {
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        i += 6;
                    }
                }
                n = put_utf8(tmp, cp);
                break;
            }
            default: tmp[0] = c; break;
            }
        } else {
            tmp[0] = c;
        }
        if (o + n >= len) return -1;
        memcpy(buf + o, tmp, n);
        o += n;
    }
    buf[o] = '\0';
    return 0;
}

int jsonl_get_ptr(const jsonl_line_t *line, const char *key, uint64_t *out)
{
    char buf[64], *end;
    if (jsonl_get_str(line, key, buf, sizeof buf) != 0) return -1;
    if (strcmp(buf, "(nil)") == 0 || strcmp(buf, "0") == 0) return *out = 0, 0;
    if (buf[0] != '0' || (buf[1] != 'x' && buf[1] != 'X') || !is_hex(buf[2])) return -1;
    errno = 0;
    unsigned long long v = strtoull(buf + 2, &end, 16);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}
