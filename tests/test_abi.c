/*
 * test_abi.c - what libfleet.so exports: the public API and nothing else.  The library is
 * built with -fvisibility=hidden and a version script (src/libfleet.map); public functions
 * carry FL_API in include/fleet/.  Reads the dynamic symbol table with nm -D.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testhelp.h"

#define MAX_SYMS 4096

typedef struct {
    char *names[MAX_SYMS];
    int n;
} symset;

static char root[4096]; /* the source tree */

static void find_root(void) { th_build_dirs(NULL, root); }

/* The defined dynamic symbols of BUILD/libfleet.so (version suffixes removed). */
static void exported(symset *out)
{
    char dir[4096], cmd[4200], line[512];
    th_tests_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s/../libfleet.so' 2>&1", dir);
    FILE *p = popen(cmd, "r");
    if (!p) TFAIL("cannot run nm");
    out->n = 0;
    while (fgets(line, sizeof line, p)) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) TFAIL("unexpected nm output: %s", line);
        char *at = strchr(name, '@');
        if (at) *at = 0;
        if (out->n == MAX_SYMS) TFAIL("more than %d exported symbols", MAX_SYMS);
        out->names[out->n++] = strdup(name);
    }
    if (pclose(p) != 0) TFAIL("nm -D failed on %s/../libfleet.so", dir);
}

/* Every public header's text, concatenated. */
static char *headers(void)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cat '%s'/include/fleet/*.h '%s'/include/fleet.h", root, root);
    FILE *p = popen(cmd, "r");
    if (!p) TFAIL("cannot read the headers");
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    pclose(p);
    if (!buf || n < 1000) TFAIL("the public headers under %s/include are missing", root);
    buf[n] = 0;
    return buf;
}

static int has(const symset *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return 1;
    return 0;
}

TEST(only_public_names_are_exported)
{
    symset s;
    exported(&s);
    if (s.n < 200) TFAIL("only %d symbols exported: is libfleet.so complete?", s.n);
    for (int i = 0; i < s.n; i++) {
        const char *n = s.names[i];
        int pub = (!strncmp(n, "fl_", 3) && n[3] != '_') || !strncmp(n, "fleet_", 6);
        if (!pub) TFAIL("libfleet.so exports '%s', which is not a public name (fl_* or fleet_*)", n);
    }
    CHECK(has(&s, "fleet_init"));
    CHECK(has(&s, "fl_prog_create"));
    CHECK(!has(&s, "fl__err"));
}

/* Each export is declared in a public header, and each FL_API declaration is exported. */
TEST(exports_match_the_public_headers)
{
    find_root();
    symset s;
    exported(&s);
    char *h = headers();
    for (int i = 0; i < s.n; i++) {
        char pat[420];
        snprintf(pat, sizeof pat, " %s(", s.names[i]);
        char pat2[420];
        snprintf(pat2, sizeof pat2, "*%s(", s.names[i]);
        if (!strstr(h, pat) && !strstr(h, pat2))
            TFAIL("libfleet.so exports '%s', declared in no public header", s.names[i]);
    }
    int declared = 0;
    for (const char *p = h; (p = strstr(p, "\nFL_API ")) != NULL; p += 8) {
        const char *paren = strchr(p, '(');
        if (!paren) break;
        const char *e = paren;
        while (e > p && (e[-1] == '_' || (e[-1] >= 'a' && e[-1] <= 'z') || (e[-1] >= 'A' && e[-1] <= 'Z') ||
                         (e[-1] >= '0' && e[-1] <= '9')))
            e--;
        char name[400];
        snprintf(name, sizeof name, "%.*s", (int)(paren - e), e);
        declared++;
        if (!has(&s, name)) TFAIL("'%s' is declared FL_API but libfleet.so does not export it", name);
    }
    if (declared < 200) TFAIL("only %d FL_API declarations found", declared);
    free(h);
    for (int i = 0; i < s.n; i++) free(s.names[i]);
}

TEST_MAIN(T(only_public_names_are_exported), T(exports_match_the_public_headers))
