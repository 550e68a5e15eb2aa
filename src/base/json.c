/*
 * json.c - the one JSON module: a thin layer over cJSON (Debian's libcjson) that every
 * reader and writer of JSON in the library uses (strategies, checkpoint manifests,
 * safetensors headers, the feed/fetch lines of inference models).
 *
 * What it adds to cJSON:
 *   - errors that name the input (fl_json.src), the key and what is wrong, with the status
 *     the caller chose for malformed input;
 *   - limits checked before cJSON allocates anything: the text's size and the number of
 *     values in it (cJSON builds a node of about 64 bytes per value);
 *   - the checks cJSON leaves out: the text must be UTF-8, raw control bytes are refused
 *     (cJSON copies them into strings, and a NUL would cut a string short) and so is the
 *     escape \u0000 (cJSON decodes it as the end of the string);
 *   - exact integers when writing (cJSON prints numbers as doubles, so integers above
 *     2^53 or 10^15 would lose digits or turn into exponents): fl__json_int_node;
 *   - the error position from cJSON_ParseWithLengthOpts' return_parse_end rather than
 *     cJSON_GetErrorPtr, which reads a process-wide variable that another thread's parse
 *     may be overwriting.
 * It does not change cJSON's global hooks (the application may use cJSON too).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base_internal.h"

/* 2^53 - 1: every integer up to it is a double exactly, and any larger integer text parses
 * to at least 2^53, so a value within the limit is exactly what the text says. */
#define JSON_INT_LIMIT 9007199254740991.0

size_t fl__utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
        else return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((u[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (u[i + k] & 0x3f);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return i;
        i += len;
    }
    return n;
}

int fl__json_fail(const fl_json *j, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fl__err(j->bad, "%s: %s", j->src, msg);
}

/* Up to 24 bytes of text from `at`, printable ASCII kept and the rest as \xNN. */
static void snippet(const char *t, size_t len, size_t at, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = at; i < len && i < at + 24 && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c >= 0x20 && c < 0x7f && c != '\'') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = 0;
}

static int line_of(const char *t, size_t at)
{
    int line = 1;
    for (size_t i = 0; i < at; i++) line += t[i] == '\n';
    return line;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* What cJSON would accept silently (see the top of the file) in t[from, len), and an upper
 * bound of the number of values: each value but the first of a container follows a ',',
 * the first one its '[' or '{' (commas inside strings only make the bound looser).  On a
 * defect returns FL_ECORRUPT with its offset in *at and a short reason in why. */
static int prescan(const char *t, size_t from, size_t len, size_t max_values, size_t *at, char *why, size_t cap)
{
    size_t bad = from + fl__utf8_check(t + from, len - from);
    *at = bad;
    if (bad < len) return snprintf(why, cap, "invalid UTF-8"), FL_ECORRUPT;
    size_t values = 1;
    for (size_t i = from; i < len; i++) {
        unsigned char c = (unsigned char)t[i];
        *at = i;
        if (c < 0x20 && !is_ws((char)c)) return snprintf(why, cap, "control character 0x%02x", c), FL_ECORRUPT;
        values += c == ',' || c == '[' || c == '{';
        if (c != '\\') continue;
        size_t run = 1;
        while (i + run < len && t[i + run] == '\\') run++;
        if (run % 2 == 1 && len - (i + run) >= 5 && !memcmp(t + i + run, "u0000", 5)) {
            *at = i + run - 1;
            return snprintf(why, cap, "escape \\u0000 (NUL)"), FL_ECORRUPT;
        }
        i += run - 1;
    }
    if (values > max_values) {
        *at = SIZE_MAX;
        return snprintf(why, cap, "too many values (up to %zu; the limit is %zu)", values, max_values), FL_ECORRUPT;
    }
    return FL_OK;
}

int fl__json_parse(fl_json *j, const char *text, size_t len, size_t max_len, size_t max_values)
{
    j->root = NULL;
    if (len > max_len) return fl__json_fail(j, "%zu bytes of JSON, more than the limit of %zu", len, max_len);
    size_t pos;
    char why[128], near[128];
    if (prescan(text, 0, len, max_values, &pos, why, sizeof why) != FL_OK) {
        if (pos == SIZE_MAX) return fl__json_fail(j, "%s", why);
        return fl__json_fail(j, "%s at byte %zu (line %d)", why, pos, line_of(text, pos));
    }
    for (pos = 0; pos < len && is_ws(text[pos]);) pos++;
    if (pos == len) return fl__json_fail(j, "no JSON value (the text is empty)");
    const char *end = NULL;
    j->root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j->root) {
        pos = end && end >= text ? (size_t)(end - text) : 0;
        if (pos + 1 >= len)
            return fl__json_fail(j, "invalid JSON: it ends early or is malformed at its last byte (byte %zu, line %d)",
                                 len - 1, line_of(text, len - 1));
        snippet(text, len, pos, near, sizeof near);
        return fl__json_fail(j, "invalid JSON at byte %zu (line %d): '%s'%s", pos, line_of(text, pos), near,
                             len - pos <= 24 ? " (then the text ends)" : "");
    }
    for (pos = (size_t)(end - text); pos < len && is_ws(text[pos]);) pos++;
    if (pos < len) {
        snippet(text, len, pos, near, sizeof near);
        fl__json_free(j);
        return fl__json_fail(j, "unexpected data after the JSON value at byte %zu (line %d): '%s'", pos, line_of(text, pos),
                             near);
    }
    return FL_OK;
}

void fl__json_free(fl_json *j)
{
    cJSON_Delete(j->root);
    j->root = NULL;
}

/* ---- typed access ------------------------------------------------------------------------ */

const cJSON *fl__json_find(const cJSON *obj, const char *key)
{
    return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static int want(const fl_json *j, const cJSON *v, const char *name, const char *type)
{
    if (!v) return fl__json_fail(j, "key '%s' is missing", name);
    return fl__json_fail(j, "key '%s' must be %s", name, type);
}

int fl__json_obj(const fl_json *j, const cJSON *v, const char *name)
{
    return cJSON_IsObject(v) ? FL_OK : want(j, v, name, "an object");
}

int fl__json_arr(const fl_json *j, const cJSON *v, const char *name, int max_items, int *n)
{
    if (!cJSON_IsArray(v)) return want(j, v, name, "an array");
    int c = 0;
    for (const cJSON *e = v->child; e; e = e->next)
        if (++c > max_items) return fl__json_fail(j, "key '%s' has more than %d entries", name, max_items);
    *n = c;
    return FL_OK;
}

int fl__json_str(const fl_json *j, const cJSON *v, const char *name, const char **out)
{
    if (!cJSON_IsString(v) || !v->valuestring) return want(j, v, name, "a string");
    *out = v->valuestring;
    return FL_OK;
}

int fl__json_bool(const fl_json *j, const cJSON *v, const char *name, int *out)
{
    if (!cJSON_IsBool(v)) return want(j, v, name, "true or false");
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return FL_OK;
}

int fl__json_num(const fl_json *j, const cJSON *v, const char *name, double *out)
{
    if (!cJSON_IsNumber(v)) return want(j, v, name, "a number");
    if (!isfinite(v->valuedouble)) return fl__json_fail(j, "key '%s' is too large for a double", name);
    *out = v->valuedouble;
    return FL_OK;
}

int fl__json_int(const fl_json *j, const cJSON *v, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v)) return want(j, v, name, "an integer");
    double d = v->valuedouble;
    if (isfinite(d) && d != floor(d)) return fl__json_fail(j, "key '%s' must be an integer, not %.17g", name, d);
    if (d < (double)lo || d < -JSON_INT_LIMIT) {
        if (lo == 0) return fl__json_fail(j, "key '%s' must be a non-negative integer, not %.17g", name, d);
        return fl__json_fail(j, "key '%s' must be at least %lld, not %.17g", name, (long long)lo, d);
    }
    if (d > (double)hi || d > JSON_INT_LIMIT)
        return fl__json_fail(j, "key '%s' is too large: %.17g (the limit is %.0f)", name, d,
                             (double)hi < JSON_INT_LIMIT ? (double)hi : JSON_INT_LIMIT);
    *out = (int64_t)d;
    return FL_OK;
}

/* ---- writing ----------------------------------------------------------------------------- */

cJSON *fl__json_int_node(int64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", (long long)v);
    return cJSON_CreateRaw(num);
}

int fl__json_quote(fl_buf *b, const char *s)
{
    size_t n = strlen(s), bad = fl__utf8_check(s, n);
    if (bad < n) return fl__err(FL_EINVAL, "name '%s' is not valid UTF-8 (byte %zu)", s, bad);
    cJSON *str = cJSON_CreateString(s);
    char *out = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!out) return fl__err(FL_ENOMEM, "out of memory quoting a JSON string");
    fl__buf_put(b, out, strlen(out));
    cJSON_free(out);
    return FL_OK;
}

int fl__json_unquote(const char *text, size_t len, size_t *pos, char **out, char *why, size_t why_cap)
{
    size_t i = *pos, at;
    *out = NULL;
    if (i >= len || text[i] != '"') {
        snprintf(why, why_cap, "expected a string at byte %zu", i);
        return FL_ECORRUPT;
    }
    char reason[128];
    if (prescan(text, i, len, SIZE_MAX, &at, reason, sizeof reason) != FL_OK) {
        snprintf(why, why_cap, "%s at byte %zu", reason, at);
        return FL_ECORRUPT;
    }
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text + i, len - i, &end, 0);
    if (!cJSON_IsString(v)) {
        cJSON_Delete(v);
        snprintf(why, why_cap, "invalid JSON string at byte %zu", end && end >= text + i ? (size_t)(end - text) : i);
        return FL_ECORRUPT;
    }
    *out = fl__strdup(v->valuestring);
    cJSON_Delete(v);
    if (!*out) {
        snprintf(why, why_cap, "out of memory");
        return FL_ENOMEM;
    }
    *pos = (size_t)(end - text);
    return FL_OK;
}
