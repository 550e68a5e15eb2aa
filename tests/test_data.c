/* test_data.c - the line parsers (MultiSlot, Criteo, libsvm), every malformed case with its
 * exact message, the number scanners against strtof/strtod, and a short fuzz run. */
#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <sys/stat.h>

#include "testhelp.h"
#include "data/data_internal.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static fl__slot slot(const char *name, fl_dtype dt, int dense, int width)
{
    fl__slot s = {(char *)name, dt, dense, width, dt == FL_INT64 ? 8 : 4};
    return s;
}

static fl__slot ms_slots[4];
static fl__parser ms_parser(void)
{
    ms_slots[0] = slot("ids", FL_INT64, 0, 1);
    ms_slots[1] = slot("w", FL_FLOAT32, 0, 1);
    ms_slots[2] = slot("dense", FL_FLOAT32, 1, 3);
    ms_slots[3] = slot("label", FL_INT64, 1, 1);
    fl__parser p = {ms_slots, 4, FL__FMT_MULTISLOT, 0, "f.txt"};
    return p;
}

static char crit_names[28][16];
static fl__slot crit_slots[28];
static fl__parser criteo_parser(uint64_t dim)
{
    crit_slots[0] = slot("dense_input", FL_FLOAT32, 1, 13);
    for (int i = 1; i <= 26; i++) {
        snprintf(crit_names[i], sizeof crit_names[i], "C%d", i);
        crit_slots[i] = slot(crit_names[i], FL_INT64, 0, 1);
    }
    crit_slots[27] = slot("label", FL_INT64, 1, 1);
    fl__parser p = {crit_slots, 28, FL__FMT_CRITEO, dim, "f.txt"};
    return p;
}

static fl__slot svm_slots[3];
static fl__parser libsvm_parser(fl_dtype label)
{
    svm_slots[0] = slot("ids", FL_INT64, 0, 1);
    svm_slots[1] = slot("vals", FL_FLOAT32, 0, 1);
    svm_slots[2] = slot("label", label, 1, 1);
    fl__parser p = {svm_slots, 3, FL__FMT_LIBSVM, 0, "f.txt"};
    return p;
}

/* The line must fail with FL_ECORRUPT and exactly this message, leaving the arena as it was. */
static void expect_bad(const fl__parser *ps, const char *line, size_t len, const char *msg, int srcline)
{
    fl__arena a = {0};
    CHECK_OK(fl__arena_reserve(&a, 8));
    a.len = 3; /* something already there */
    int st = fl__parse_line(ps, line, len, 7, &a);
    if (st != FL_ECORRUPT) TFAIL("line %d: parse returned %s, expected FL_ECORRUPT", srcline, fl_strerror(st));
    if (strcmp(fl_last_error(), msg) != 0)
        TFAIL("line %d: message\n     got \"%s\"\n    want \"%s\"", srcline, fl_last_error(), msg);
    CHECK_EQ_INT(a.len, 3);
    fl__arena_free(&a);
}
#define BAD(ps, line, msg) expect_bad(&(ps), (line), strlen(line), (msg), __LINE__)

/* Parses a good line into a fresh arena. */
static fl__arena parse_ok(const fl__parser *ps, const char *line, size_t len)
{
    fl__arena a = {0};
    int st = fl__parse_line(ps, line, len, 1, &a);
    if (st != FL_OK) TFAIL("parse of \"%s\" failed: %s", line, fl_last_error());
    CHECK_EQ_INT(fl__record_size(ps->slots, ps->nslots, a.p, a.len), a.len);
    return a;
}

static uint32_t rd_u32(const char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}
static uint64_t rd_u64(const char **p)
{
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}
static float rd_f32(const char **p)
{
    float v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

/* ---- MultiSlot ---------------------------------------------------------------------------- */

TEST(multislot_good_lines)
{
    fl__parser ps = ms_parser();
    const char *lines[] = {
        "2 11 18446744073709551615 1 0.5 3 1 -2.5 3e2 1 7",
        "2 11\t18446744073709551615  1 .5   3 1. -2.5 300 1 7 \r",
        "  2 011 18446744073709551615 1 5e-1 3 +1 -25e-1 0.3e3 1 07\t \r",
    };
    for (int i = 0; i < 3; i++) {
        fl__arena a = parse_ok(&ps, lines[i], strlen(lines[i]));
        const char *p = a.p;
        CHECK_EQ_INT(rd_u32(&p), 2);
        CHECK_EQ_INT(rd_u64(&p), 11);
        CHECK(rd_u64(&p) == UINT64_MAX);
        CHECK_EQ_INT(rd_u32(&p), 1);
        CHECK(rd_f32(&p) == 0.5f);
        CHECK(rd_f32(&p) == 1.0f); /* dense: no count */
        CHECK(rd_f32(&p) == -2.5f);
        CHECK(rd_f32(&p) == 300.0f);
        CHECK_EQ_INT(rd_u64(&p), 7);
        CHECK_EQ_INT(p - a.p, (long long)a.len);
        fl__arena_free(&a);
    }
    /* records append; a bad line in between leaves the earlier one intact */
    fl__arena a = {0};
    CHECK_OK(fl__parse_line(&ps, lines[0], strlen(lines[0]), 1, &a));
    size_t one = a.len;
    CHECK(fl__parse_line(&ps, "2 1", 3, 2, &a) == FL_ECORRUPT);
    CHECK_EQ_INT(a.len, one);
    CHECK_OK(fl__parse_line(&ps, lines[1], strlen(lines[1]), 3, &a));
    CHECK_EQ_INT(a.len, 2 * one);
    CHECK(memcmp(a.p, a.p + one, one) == 0);
    fl__arena_free(&a);
}

TEST(multislot_malformed_messages)
{
    fl__parser ps = ms_parser();
    const char *tail = " 1 0.5 3 1 2 3 1 1";
    char line[256];
    BAD(ps, "", "f.txt:7: slot 'ids' (#1): missing: the line is empty");
    BAD(ps, " \t \r", "f.txt:7: slot 'ids' (#1): missing: the line is empty");
    BAD(ps, "2 11 12 1 0.5", "f.txt:7: slot 'dense' (#3): missing: the line ends after 2 of 4 slots");
    BAD(ps, "2 11 12 1 0.5 3 1 2 3", "f.txt:7: slot 'label' (#4): missing: the line ends after 3 of 4 slots");
    snprintf(line, sizeof line, "0%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): the number of ids can not be zero, you need padding it");
    BAD(ps, "2 11 12 0 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): the number of ids can not be zero, you need padding it");
    BAD(ps, "-2 11 12 1 0.5 3 1 2 3 1 1", "f.txt:7: slot 'ids' (#1): the number of values is negative: '-2'");
    BAD(ps, "abc 11", "f.txt:7: slot 'ids' (#1): expected the number of values, got 'abc'");
    BAD(ps, "2x 11 12", "f.txt:7: slot 'ids' (#1): expected the number of values, got '2x'");
    BAD(ps, "+2 11 12", "f.txt:7: slot 'ids' (#1): expected the number of values, got '+2'");
    BAD(ps, "- 11 12", "f.txt:7: slot 'ids' (#1): expected the number of values, got '-'");
    BAD(ps, "3000000000 1",
        "f.txt:7: slot 'ids' (#1): the number of values is out of range (at most 2147483647): "
        "'3000000000'");
    BAD(ps, "2147483648 1",
        "f.txt:7: slot 'ids' (#1): the number of values is out of range (at most 2147483647): "
        "'2147483648'");
    BAD(ps, "99999999999999999999999 1",
        "f.txt:7: slot 'ids' (#1): the number of values is out of range (at most "
        "2147483647): '99999999999999999999999'");
    BAD(ps, "2147483647 1 2", "f.txt:7: slot 'ids' (#1): expected 2147483647 values, the line ends after 2");
    BAD(ps, "2 11", "f.txt:7: slot 'ids' (#1): expected 2 values, the line ends after 1");
    BAD(ps, "2 11 12 3 0.5", "f.txt:7: slot 'w' (#2): expected 3 values, the line ends after 1");
    BAD(ps, "2 11 abc 1 0.5 3 1 2 3 1 1", "f.txt:7: slot 'ids' (#1): value 2 of 2 is not an unsigned integer: 'abc'");
    snprintf(line, sizeof line, "1 -5%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '-5'");
    snprintf(line, sizeof line, "1 +5%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '+5'");
    snprintf(line, sizeof line, "1 1.5%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '1.5'");
    snprintf(line, sizeof line, "1 0x10%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '0x10'");
    snprintf(line, sizeof line, "1 18446744073709551616%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): value 1 of 1: value out of range for uint64: '18446744073709551616'");
    snprintf(line, sizeof line, "1 123456789012345678901234567890%s", tail);
    BAD(ps, line,
        "f.txt:7: slot 'ids' (#1): value 1 of 1: value out of range for uint64: "
        "'123456789012345678901234567890'");
    BAD(ps, "1 11 1 abc 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1 is not a number: 'abc'");
    BAD(ps, "1 11 1 1.5x 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1 is not a number: '1.5x'");
    BAD(ps, "1 11 1 1e 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1 is not a number: '1e'");
    BAD(ps, "1 11 1 . 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1 is not a number: '.'");
    BAD(ps, "1 11 1 1,5 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1 is not a number: '1,5'");
    BAD(ps, "1 11 1 1e39 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1: value out of range for float32: '1e39'");
    BAD(ps, "1 11 1 -1e39 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1: value out of range for float32: '-1e39'");
    BAD(ps, "1 11 1 inf 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1: value out of range for float32: 'inf'");
    BAD(ps, "1 11 1 -Infinity 3 1 2 3 1 1",
        "f.txt:7: slot 'w' (#2): value 1 of 1: value out of range for float32: '-Infinity'");
    BAD(ps, "1 11 1 nan 3 1 2 3 1 1", "f.txt:7: slot 'w' (#2): value 1 of 1: value out of range for float32: 'nan'");
    BAD(ps, "1 11 1 0.5 3 1 2 1e999 1 1",
        "f.txt:7: slot 'dense' (#3): value 3 of 3: value out of range for float32: '1e999'");
    BAD(ps, "1 11 1 0.5 2 1 2 1 1", "f.txt:7: slot 'dense' (#3): dense slot of width 3 has 2 values");
    BAD(ps, "1 11 1 0.5 4 1 2 3 4 1 1", "f.txt:7: slot 'dense' (#3): dense slot of width 3 has 4 values");
    BAD(ps, "1 11 1 0.5 3 1 2 3 2 1 1", "f.txt:7: slot 'label' (#4): dense slot of width 1 has 2 values");
    BAD(ps, "1 11 1 0.5 3 1 2 3 1 1 extra", "f.txt:7: slot 'label' (#4): unexpected text after the last slot: 'extra'");
    BAD(ps, "1 11 1 0.5 3 1 2 3 1 1 1 5", "f.txt:7: slot 'label' (#4): unexpected text after the last slot: '1 5'");
    /* unprintable bytes are escaped, long tokens cut */
    snprintf(line, sizeof line, "1 1\001%s", tail);
    BAD(ps, line, "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '1\\x01'");
    BAD(ps, "1 11\r 1 0.5 3 1 2 3 1 1", "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '11\\x0d'");
    snprintf(line, sizeof line, "1 %s%s", "1234567890abcdefghij1234567890abcdefghijKLMNOP", tail);
    BAD(ps, line,
        "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: "
        "'1234567890abcdefghij1234567890abcdefghij...'");
    /* an embedded NUL is just a bad byte */
    static const char nul[] = "1 1\0 1 0.5 3 1 2 3 1 1";
    expect_bad(&ps, nul, sizeof nul - 1, "f.txt:7: slot 'ids' (#1): value 1 of 1 is not an unsigned integer: '1\\x00'",
               __LINE__);
}

/* ---- Criteo ------------------------------------------------------------------------------- */

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h;
}

/* label, I1..I13, C1..C26 joined with tabs; cols[0] is the label. */
static void criteo_line(char *buf, size_t cap, const char *const cols[40])
{
    size_t o = 0;
    for (int i = 0; i < 40; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? "\t" : "", cols[i]);
}

static const char *good_cols[40] = {
    "1",        "5",        "-2",       "",         "0",        "1382",     "4",        "15",       "2",        "181",
    "1",        "2",        "",         "2",        "68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf",
    "de7995b8", "1f89b562", "a73ee510", "a8cd5504", "b2cb9c98", "37c9c164", "2824a5f6", "1adce6ef", "8ba8b39a", "891b62e7",
    "e5ba7672", "f54016b9", "21ddcdc9", "b1252a9d", "07b5194c", "",         "3a171ecb", "c5c50484", "e8b83407", ""};

TEST(criteo_good_line)
{
    fl__parser ps = criteo_parser(1000001);
    char line[1024];
    criteo_line(line, sizeof line, good_cols);
    strcat(line, "  \r"); /* trailing spaces and CR are dropped */
    fl__arena a = parse_ok(&ps, line, strlen(line));
    const char *p = a.p;
    for (int i = 0; i < 13; i++) {
        float want = good_cols[1 + i][0]
                         ? (float)((strtod(good_cols[1 + i], NULL) - fl__criteo_min[i]) / fl__criteo_diff[i])
                         : 0.0f;
        float got = rd_f32(&p);
        if (got != want) TFAIL("I%d: %g != %g", i + 1, got, want);
    }
    CHECK_NEAR(fl__criteo_min[1], -3, 0);
    CHECK_NEAR(fl__criteo_diff[4], 64000, 0);
    for (int k = 1; k <= 26; k++) {
        CHECK_EQ_INT(rd_u32(&p), 1);
        char key[64];
        int n = snprintf(key, sizeof key, "C%d:%s", k, good_cols[13 + k]);
        uint64_t id = rd_u64(&p);
        CHECK(id == fnv(key, (size_t)n) % 1000001);
        CHECK(id == fl_data_criteo_id(k, good_cols[13 + k], strlen(good_cols[13 + k]), 1000001));
    }
    CHECK_EQ_INT(rd_u64(&p), 1);
    CHECK_EQ_INT(p - a.p, (long long)a.len);
    fl__arena_free(&a);
    /* pinned values (Python: FNV-1a 64 of b"C1:68fd1e64" and b"C26:") */
    CHECK(fl_data_criteo_id(1, "68fd1e64", 8, 1000001) == 320813);
    CHECK(fl_data_criteo_id(26, "", 0, 1000001) == 89723);
    CHECK(fl_data_criteo_id(26, "", 0, 0) == 7272707145416962440ULL);
    CHECK(fl_data_criteo_id(1, "68fd1e64", 8, UINT64_MAX) == 7024109625882922593ULL);
}

TEST(criteo_malformed_messages)
{
    fl__parser ps = criteo_parser(1000001);
    char line[1024];
    const char *cols[40];
    memcpy(cols, good_cols, sizeof cols);
    criteo_line(line, sizeof line, cols);
    char *last = strrchr(line, '\t');
    *last = 0; /* 39 columns */
    BAD(ps, line, "f.txt:7: expected 40 tab-separated columns (label, I1..I13, C1..C26), got 39");
    *last = '\t';
    strcat(line, "\tx");
    BAD(ps, line, "f.txt:7: expected 40 tab-separated columns (label, I1..I13, C1..C26), got 41");
    BAD(ps, "", "f.txt:7: expected 40 tab-separated columns (label, I1..I13, C1..C26), got 0");
    BAD(ps, "1 2 3 4", "f.txt:7: expected 40 tab-separated columns (label, I1..I13, C1..C26), got 1");
    cols[0] = "2";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'label' (#28): column label: expected 0 or 1, got '2'");
    cols[0] = "";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'label' (#28): column label: expected 0 or 1, got ''");
    cols[0] = "1.0";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'label' (#28): column label: expected 0 or 1, got '1.0'");
    cols[0] = "0";
    cols[5] = "abc";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'dense_input' (#1): column I5: not a number: 'abc'");
    cols[5] = "12 ";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'dense_input' (#1): column I5: not a number: '12 '");
    cols[5] = "4";
    cols[2] = "1e999";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'dense_input' (#1): column I2: value out of range: '1e999'");
    cols[2] = "nan";
    criteo_line(line, sizeof line, cols);
    BAD(ps, line, "f.txt:7: slot 'dense_input' (#1): column I2: value out of range: 'nan'");
}

TEST(criteo_layout_checks)
{
    fl__parser ps = criteo_parser(10);
    CHECK_OK(fl__check_layout("fn", FL__FMT_CRITEO, ps.slots, 28));
    CHECK_FAILS(fl__check_layout("fn", FL__FMT_CRITEO, ps.slots, 27), FL_EINVAL, "(28 variables); got 27 variables");
    crit_slots[5].dtype = FL_FLOAT32;
    crit_slots[5].esize = 4;
    CHECK_FAILS(fl__check_layout("fn", FL__FMT_CRITEO, ps.slots, 28), FL_EINVAL,
                "fn: format 'criteo' needs use_var = [dense float32 of width 13, 26 int64 slots with lod_level 1, "
                "int64 label of width 1]; variable #6 'C5' is float32, lod_level 1");
    ps = criteo_parser(10);
    crit_slots[0].width = 12;
    CHECK_FAILS(fl__check_layout("fn", FL__FMT_CRITEO, ps.slots, 28), FL_EINVAL,
                "variable #1 'dense_input' is float32, lod_level 0, width 12");
    ps = criteo_parser(10);
    crit_slots[27].dense = 0;
    CHECK_FAILS(fl__check_layout("fn", FL__FMT_CRITEO, ps.slots, 28), FL_EINVAL,
                "variable #28 'label' is int64, lod_level 1");
    /* multislot takes any slots */
    CHECK_OK(fl__check_layout("fn", FL__FMT_MULTISLOT, ps.slots, 28));
}

/* ---- libsvm ------------------------------------------------------------------------------- */

TEST(libsvm_good_lines)
{
    fl__parser ps = libsvm_parser(FL_FLOAT32);
    fl__arena a = parse_ok(&ps, "0.5 3:0.25 10:-1.5\t18446744073709551615:2 \r", 42);
    const char *p = a.p;
    CHECK_EQ_INT(rd_u32(&p), 3);
    CHECK_EQ_INT(rd_u64(&p), 3);
    CHECK_EQ_INT(rd_u64(&p), 10);
    CHECK(rd_u64(&p) == UINT64_MAX);
    CHECK_EQ_INT(rd_u32(&p), 3);
    CHECK(rd_f32(&p) == 0.25f);
    CHECK(rd_f32(&p) == -1.5f);
    CHECK(rd_f32(&p) == 2.0f);
    CHECK(rd_f32(&p) == 0.5f);
    CHECK_EQ_INT(p - a.p, (long long)a.len);
    fl__arena_free(&a);
    ps = libsvm_parser(FL_INT64);
    a = parse_ok(&ps, "-1 7:1", 6);
    p = a.p + 4 + 8 + 4 + 4;
    CHECK_EQ_INT((int64_t)rd_u64(&p), -1);
    fl__arena_free(&a);
    a = parse_ok(&ps, "+1 7:1", 6);
    p = a.p + 4 + 8 + 4 + 4;
    CHECK_EQ_INT((int64_t)rd_u64(&p), 1);
    fl__arena_free(&a);
    CHECK_OK(fl__check_layout("fn", FL__FMT_LIBSVM, svm_slots, 3));
}

TEST(libsvm_malformed_messages)
{
    fl__parser ps = libsvm_parser(FL_FLOAT32);
    BAD(ps, "", "f.txt:7: slot 'label' (#3): missing: the line is empty");
    BAD(ps, "x 1:2", "f.txt:7: slot 'label' (#3): the label is not a number: 'x'");
    BAD(ps, "1e40 1:2", "f.txt:7: slot 'label' (#3): the label is out of range: '1e40'");
    BAD(ps, "1",
        "f.txt:7: slot 'ids' (#1): no idx:val pairs after the label; the number of ids can not be zero, you "
        "need padding it");
    BAD(ps, "1 3:0.5 abc", "f.txt:7: slot 'ids' (#1): feature 2: expected idx:val, got 'abc'");
    BAD(ps, "1 a:0.5", "f.txt:7: slot 'ids' (#1): feature 1: index is not an unsigned integer: 'a:0.5'");
    BAD(ps, "1 -3:0.5", "f.txt:7: slot 'ids' (#1): feature 1: index is not an unsigned integer: '-3:0.5'");
    BAD(ps, "1 :0.5", "f.txt:7: slot 'ids' (#1): feature 1: index is not an unsigned integer: ':0.5'");
    BAD(ps, "1 99999999999999999999:1",
        "f.txt:7: slot 'ids' (#1): feature 1: index out of range for uint64: '99999999999999999999:1'");
    BAD(ps, "1 3:x", "f.txt:7: slot 'vals' (#2): feature 1: value is not a number: '3:x'");
    BAD(ps, "1 3:", "f.txt:7: slot 'vals' (#2): feature 1: value is not a number: '3:'");
    BAD(ps, "1 3:1:2", "f.txt:7: slot 'vals' (#2): feature 1: value is not a number: '3:1:2'");
    BAD(ps, "1 3:1e40", "f.txt:7: slot 'vals' (#2): feature 1: value out of range for float32: '3:1e40'");
    ps = libsvm_parser(FL_INT64);
    BAD(ps, "1.0 1:2", "f.txt:7: slot 'label' (#3): the label is not an integer: '1.0'");
    BAD(ps, "99999999999999999999 1:2", "f.txt:7: slot 'label' (#3): the label is out of range: '99999999999999999999'");
    BAD(ps, "9223372036854775808 1:2", "f.txt:7: slot 'label' (#3): the label is out of range: '9223372036854775808'");
    fl__arena a = parse_ok(&ps, "-9223372036854775808 1:2", 24);
    fl__arena_free(&a);
    svm_slots[1].dtype = FL_INT64;
    CHECK_FAILS(fl__check_layout("fn", FL__FMT_LIBSVM, svm_slots, 3), FL_EINVAL,
                "variable #2 'vals' is int64, lod_level 1");
    CHECK_FAILS(fl__check_layout("fn", FL__FMT_LIBSVM, svm_slots, 2), FL_EINVAL, "got 2 variables");
}

/* ---- number scanners ---------------------------------------------------------------------- */

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 17;
}

/* Random decimal text of many shapes: digits, fractions, exponents, signs, long mantissas. */
static void random_number(char *buf, size_t cap, uint64_t *s)
{
    size_t o = 0;
    if (lcg(s) % 4 == 0) buf[o++] = lcg(s) % 2 ? '-' : '+';
    int ni = (int)(lcg(s) % 12), nf = (int)(lcg(s) % 14);
    if (lcg(s) % 8 == 0) ni = 20 + (int)(lcg(s) % 10);
    for (int i = 0; i < ni; i++) buf[o++] = (char)('0' + lcg(s) % 10);
    if (nf || !ni) {
        buf[o++] = '.';
        for (int i = 0; i < nf || (!ni && i < 1); i++) buf[o++] = (char)('0' + lcg(s) % 10);
    }
    if (lcg(s) % 3 == 0) o += (size_t)snprintf(buf + o, cap - o, "e%d", (int)(lcg(s) % 90) - 45);
    buf[o] = 0;
}

TEST(float_scanner_matches_strtof)
{
    uint64_t s = 12345;
    char buf[96];
    int n = 0;
    for (int it = 0; it < 400000; it++) {
        random_number(buf, sizeof buf, &s);
        size_t len = strlen(buf);
        char *end;
        errno = 0;
        float ref = strtof(buf, &end);
        int full = end == buf + len;
        float got = 0;
        int r = fl__scan_f32(buf, buf + len, &got);
        if (!full) {
            if (r == 0) TFAIL("'%s' accepted, strtof stops at offset %td", buf, end - buf);
            continue;
        }
        if (isinf(ref)) {
            CHECK_EQ_INT(r, 2);
            continue;
        }
        if (r != 0) TFAIL("'%s' rejected (%d), strtof gives %.9g", buf, r, ref);
        if (memcmp(&got, &ref, 4) != 0) TFAIL("'%s': %.9g (ours) != %.9g (strtof)", buf, got, ref);
        n++;
        double d, dref = strtod(buf, NULL);
        CHECK_EQ_INT(fl__scan_f64(buf, buf + len, &d), 0);
        if (memcmp(&d, &dref, 8) != 0) TFAIL("'%s': %.17g (ours) != %.17g (strtod)", buf, d, dref);
    }
    CHECK(n > 300000);
    /* float32 rounding midpoints and their neighbours (the fast path must defer to strtof) */
    const char *hard[] = {"16777217",
                          "16777219",
                          "1.00000005960464477539",
                          "3.4028235e38",
                          "3.4028236e38",
                          "1.17549435e-38",
                          "1.1754942e-38",
                          "1e-45",
                          "7.006492e-46",
                          "0.1",
                          "0.30000001192092896",
                          "33554434.999999",
                          "0x1p3",
                          "1E5",
                          "-0",
                          "-0.0e10",
                          "000000000000000000000000001.5"};
    for (size_t i = 0; i < sizeof hard / sizeof *hard; i++) {
        float got, ref = strtof(hard[i], NULL);
        int r = fl__scan_f32(hard[i], hard[i] + strlen(hard[i]), &got);
        if (isinf(ref)) {
            CHECK_EQ_INT(r, 2);
            continue;
        }
        CHECK_EQ_INT(r, 0);
        if (memcmp(&got, &ref, 4) != 0) TFAIL("'%s': %.9g (ours) != %.9g (strtof)", hard[i], got, ref);
    }
}

TEST(integer_scanners)
{
    uint64_t u;
    int64_t i;
    const char *t = "18446744073709551615";
    CHECK_EQ_INT(fl__scan_u64(t, t + 20, &u), 0);
    CHECK(u == UINT64_MAX);
    t = "18446744073709551616";
    CHECK_EQ_INT(fl__scan_u64(t, t + 20, &u), 2);
    t = "00000000000000000000000000042";
    CHECK_EQ_INT(fl__scan_u64(t, t + strlen(t), &u), 0); /* leading zeros are not an overflow */
    CHECK_EQ_INT(u, 42);
    t = "";
    CHECK_EQ_INT(fl__scan_u64(t, t, &u), 1);
    t = "12a";
    CHECK_EQ_INT(fl__scan_u64(t, t + 3, &u), 1);
    t = "99999999999999999999x";
    CHECK_EQ_INT(fl__scan_u64(t, t + strlen(t), &u), 1); /* not a number wins over out of range */
    t = "-9223372036854775808";
    CHECK_EQ_INT(fl__scan_i64(t, t + strlen(t), &i), 0);
    CHECK(i == INT64_MIN);
    t = "9223372036854775807";
    CHECK_EQ_INT(fl__scan_i64(t, t + strlen(t), &i), 0);
    CHECK(i == INT64_MAX);
    t = "-";
    CHECK_EQ_INT(fl__scan_i64(t, t + 1, &i), 1);
}

/* ---- fuzzing ------------------------------------------------------------------------------ */

TEST(fuzz_parsers_briefly)
{
    char dir[32], cmd[256];
    if (!th_fuzz_build(dir, "tests/fuzz_data_parse.c src/data/parse.c src/base/*.c -lcjson -lm -pthread")) return;
    /* seeds: one good line of each format, and a float for the scanner check */
    /* clang-format off */
    char crit[256] = "\001" "1\t5\t\t-2";
    for (int i = 4; i < 14; i++) strcat(crit, "\t");
    strcat(crit, "\t68fd1e64");
    for (int i = 15; i < 40; i++) strcat(crit, "\tab");
    strcat(crit, "\n");
    const char *seeds[] = {"\000" "2 11 12 1 0.5 3 1 2 3 1 1\n1 5 1 1e-3 3 .5 5. -0 1 1\n", crit,
                           "\002" "1 3:0.5 10:-1.5\n0 7:1\n", "\003" "1.25e-3"};
    /* clang-format on */
    snprintf(cmd, sizeof cmd, "%s/corpus", dir);
    CHECK(mkdir(cmd, 0700) == 0);
    for (int i = 0; i < 4; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/corpus/seed%d", dir, i);
        FILE *f = fopen(path, "wb");
        CHECK(f);
        size_t n = strlen(seeds[i] + 1) + 1;
        CHECK(fwrite(seeds[i], 1, n, f) == n);
        fclose(f);
    }
    th_fuzz_run(dir, 6);
}

TEST_MAIN(T(multislot_good_lines), T(multislot_malformed_messages), T(criteo_good_line), T(criteo_malformed_messages),
          T(criteo_layout_checks), T(libsvm_good_lines), T(libsvm_malformed_messages), T(float_scanner_matches_strtof),
          T(integer_scanners), T(fuzz_parsers_briefly))
