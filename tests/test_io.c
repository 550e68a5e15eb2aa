/* test_io.c - atomic writes, safetensors (round trip, NumPy interop, corrupt files),
 * checkpoints (bit-exact save/load, all-or-nothing) and inference models. */
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "testhelp.h"

#include "graph/graph_internal.h"
#include "io/io_internal.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static char *tmpdir(void)
{
    static char buf[64];
    th_mktemp(buf, sizeof buf, "fleet_io_");
    return buf;
}

/* Number of entries of dir whose name contains sub. */
static int count_entries(const char *dir, const char *sub)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) n += strstr(de->d_name, sub) != NULL;
    if (d) closedir(d);
    return n;
}

static char *join(const char *dir, const char *name)
{
    static char buf[4][512];
    static int k;
    char *b = buf[k++ % 4];
    int r = snprintf(b, 512, "%s/%s", dir, name);
    CHECK(r > 0 && r < 512);
    return b;
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    char *p = NULL;
    CHECK_OK(fl__read_file(path, (size_t)1 << 30, &p, n));
    return (unsigned char *)p;
}

static int tensors_equal(const fl_tensor *a, const fl_tensor *b)
{
    if (fl_tensor_dtype(a) != fl_tensor_dtype(b) || fl_tensor_ndim(a) != fl_tensor_ndim(b)) return 0;
    for (int i = 0; i < fl_tensor_ndim(a); i++)
        if (fl_tensor_shape(a)[i] != fl_tensor_shape(b)[i]) return 0;
    return fl_tensor_nbytes(a) == fl_tensor_nbytes(b) &&
           memcmp(fl_tensor_cdata(a), fl_tensor_cdata(b), fl_tensor_nbytes(a)) == 0;
}

/* ---- atomic writes ------------------------------------------------------------------------- */

TEST(atomic_write_creates_dirs_and_replaces)
{
    char *d = tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/a/b//c/file.bin", d);
    CHECK_OK(fl__write_file_atomic(path, "hello", 5));
    CHECK_OK(fl__write_file_atomic(path, "bye", 3));
    size_t n;
    unsigned char *b = read_bytes(path, &n);
    CHECK(n == 3 && !memcmp(b, "bye", 3));
    free(b);
    CHECK_EQ_INT(count_entries(join(d, "a/b/c"), ".tmp."), 0);
    th_rmtree(d);
}

TEST(atomic_write_failures_leave_nothing_behind)
{
    char *d = tmpdir();
    /* the target is a directory: the rename fails, the temporary file is removed */
    char target[512];
    snprintf(target, sizeof target, "%s/dir", d);
    CHECK(mkdir(target, 0777) == 0);
    CHECK(mkdir(join(target, "x"), 0777) == 0); /* non-empty: rename() cannot replace it */
    CHECK_FAILS(fl__write_file_atomic(target, "x", 1), FL_EIO, target);
    CHECK_STR_HAS(fl_last_error(), "Is a directory");
    CHECK_EQ_INT(count_entries(d, ".tmp."), 0);
    /* a parent that is a file */
    th_write_bytes(join(d, "plain"), "x", 1);
    char under[512];
    snprintf(under, sizeof under, "%s/plain/sub/f", d);
    CHECK_FAILS(fl__write_file_atomic(under, "x", 1), FL_EIO, "plain");
    /* an unwritable directory (skipped as root, who may write anywhere) */
    if (geteuid() != 0) {
        CHECK(chmod(target, 0555) == 0);
        CHECK_FAILS(fl__write_file_atomic(join(target, "f"), "x", 1), FL_EIO, "Permission denied");
        chmod(target, 0777);
    }
    fl_tensor *t = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){2});
    const char *names[] = {"t"};
    CHECK_FAILS(fl_io_write_safetensors(target, names, (const fl_tensor *const *)&t, 1), FL_EIO, target);
    CHECK_EQ_INT(count_entries(d, ".tmp."), 0);
    fl_tensor_free(t);
    th_rmtree(d);
}

/* ---- safetensors --------------------------------------------------------------------------- */

typedef struct {
    const char *names[9];
    fl_tensor *t[9];
    int n;
} tset;

static tset sample_tensors(void)
{
    tset s;
    memset(&s, 0, sizeof s);
    float f[6] = {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 65504.0f};
    int64_t l[3] = {INT64_MIN, 0, 1234567890123LL};
    double dd[2] = {0.1, -2.5e300};
    int32_t i32[4] = {-1, 2, INT32_MAX, INT32_MIN};
    uint16_t h[3] = {0x3c00, 0xc000, 0x7bff};
    uint16_t bf[2] = {0x3f80, 0xbf80};
    float sc = 42.0f;
    s.names[0] = "fc_0.w_0";
    s.t[0] = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){2, 3}, f);
    s.names[1] = "ids@GRAD";
    s.t[1] = fl_tensor_from_data(FL_INT64, 1, (const int64_t[]){3}, l);
    s.names[2] = "d\"q\\uote\n";
    s.t[2] = fl_tensor_from_data(FL_FLOAT64, 2, (const int64_t[]){1, 2}, dd);
    s.names[3] = "i32 with spaces";
    s.t[3] = fl_tensor_from_data(FL_INT32, 2, (const int64_t[]){2, 2}, i32);
    s.names[4] = "half";
    s.t[4] = fl_tensor_from_data(FL_FLOAT16, 1, (const int64_t[]){3}, h);
    s.names[5] = "bf16.\xc3\xa9t\xc3\xa9";
    s.t[5] = fl_tensor_from_data(FL_BFLOAT16, 1, (const int64_t[]){2}, bf);
    s.names[6] = "scalar";
    s.t[6] = fl_tensor_from_data(FL_FLOAT32, 0, NULL, &sc);
    s.names[7] = "empty";
    s.t[7] = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){0, 4});
    s.names[8] = "mask";
    s.t[8] = fl_tensor_from_data(FL_UINT8, 1, (const int64_t[]){5}, (const uint8_t[]){1, 0, 255, 1, 0});
    s.n = 9;
    for (int i = 0; i < s.n; i++) CHECK(s.t[i] != NULL);
    return s;
}

static void tset_free(tset *s)
{
    for (int i = 0; i < s->n; i++) fl_tensor_free(s->t[i]);
}

/* A dead process's pid: a child that exited and was reaped. */
static pid_t dead_pid(void)
{
    pid_t c = fork();
    if (c == 0) _exit(0);
    CHECK(c > 0 && waitpid(c, NULL, 0) == c);
    return c;
}

/* Files a save killed mid-write would leave, plus some that must stay: returns the number of
 * stale ones made (a child's real temporary file and the older name without a host). */
static int plant_temporaries(const char *d, char *kept_live, char *kept_other, char *kept_plain)
{
    pid_t c = fork(); /* a save "killed" after its bytes were written: it never commits */
    if (c == 0) {
        fl__afile f;
        static char big[1 << 16];
        if (fl__afile_open(&f, join(d, "model.safetensors")) != FL_OK || fl__afile_write(&f, big, sizeof big) != FL_OK)
            _exit(1);
        _exit(0);
    }
    int ws;
    CHECK(c > 0 && waitpid(c, &ws, 0) == c && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    char name[128];
    snprintf(name, sizeof name, "tables.bin.tmp.%d", (int)dead_pid());
    th_write_bytes(join(d, name), "old", 3);
    snprintf(kept_live, 128, "live.bin.tmp.%d", (int)getpid()); /* a save in progress */
    th_write_bytes(join(d, kept_live), "x", 1);
    snprintf(kept_other, 128, "x.bin.tmp.%d.some-other-host", (int)dead_pid()); /* a shared file system */
    th_write_bytes(join(d, kept_other), "x", 1);
    snprintf(kept_plain, 128, "notes.tmp.txt");
    th_write_bytes(join(d, kept_plain), "x", 1);
    return 2;
}

/* The next save or load in a directory removes the temporaries of dead processes of this host
 * (only names of our pattern), and nothing else. */
TEST(stale_temporaries_removed_by_next_save_or_load)
{
    char *d = tmpdir(), live[128], other[128], plain[128];
    for (int load = 0; load < 2; load++) {
        CHECK_EQ_INT(plant_temporaries(d, live, other, plain), 2);
        CHECK_EQ_INT(count_entries(d, ".tmp."), 5);
        if (load) {
            char **names;
            fl_tensor **ts;
            int n;
            CHECK_OK(fl_io_read_safetensors(join(d, "w.safetensors"), &names, &ts, &n));
            for (int i = 0; i < n; i++) free(names[i]), fl_tensor_free(ts[i]);
            free(names), free(ts);
        } else {
            const char *names[] = {"w"};
            fl_tensor *t = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){2});
            CHECK_OK(fl_io_write_safetensors(join(d, "w.safetensors"), names, (const fl_tensor *const *)&t, 1));
            fl_tensor_free(t);
        }
        CHECK_EQ_INT(count_entries(d, ".tmp."), 3);
        CHECK_EQ_INT(count_entries(d, "model.safetensors.tmp."), 0);
        CHECK_EQ_INT(count_entries(d, "tables.bin.tmp."), 0);
        CHECK_EQ_INT(count_entries(d, live), 1);
        CHECK_EQ_INT(count_entries(d, other), 1);
        CHECK_EQ_INT(count_entries(d, plain), 1);
        unlink(join(d, live)), unlink(join(d, other)), unlink(join(d, plain));
    }
    CHECK_EQ_INT(fl__tmp_sweep(d), 0);
    th_rmtree(d);
}

/* A save's process killed together with its parent stays a zombie where nothing reaps
 * orphans (a container): kill(pid, 0) succeeds on it, but it will never finish, so its
 * temporary file is stale too.  A live process's is not. */
TEST(temporary_of_a_zombie_is_stale)
{
    char *d = tmpdir(), name[128], cmd[128];
    pid_t z = fork();
    if (z == 0) _exit(0);
    CHECK(z > 0);
    char state = 0;
    for (int i = 0; i < 500 && state != 'Z'; i++) { /* until it has exited (not reaped) */
        snprintf(cmd, sizeof cmd, "/proc/%d/stat", (int)z);
        FILE *f = fopen(cmd, "r");
        char buf[512] = "";
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
        }
        const char *rp = strrchr(buf, ')');
        state = rp ? rp[2] : 0;
        if (state != 'Z') usleep(10000);
    }
    CHECK(state == 'Z');
    CHECK(kill(z, 0) == 0); /* what the sweep used to go by */
    snprintf(name, sizeof name, "part-00000.safetensors.tmp.%d", (int)z);
    th_write_bytes(join(d, name), "half", 4);
    snprintf(name, sizeof name, "live.safetensors.tmp.%d", (int)getpid());
    th_write_bytes(join(d, name), "x", 1);
    CHECK_EQ_INT(fl__tmp_sweep(d), 1);
    CHECK_EQ_INT(count_entries(d, "part-00000.safetensors.tmp."), 0);
    CHECK_EQ_INT(count_entries(d, "live.safetensors.tmp."), 1);
    CHECK(waitpid(z, NULL, 0) == z);
    th_rmtree(d);
}

TEST(safetensors_round_trip_all_dtypes)
{
    char *d = tmpdir();
    tset s = sample_tensors();
    const char *path = join(d, "t.safetensors");
    CHECK_OK(fl_io_write_safetensors(path, s.names, (const fl_tensor *const *)s.t, s.n));
    char **names;
    fl_tensor **ts;
    int n;
    CHECK_OK(fl_io_read_safetensors(path, &names, &ts, &n));
    CHECK_EQ_INT(n, s.n);
    for (int i = 0; i < n; i++) {
        CHECK(strcmp(names[i], s.names[i]) == 0);
        CHECK(tensors_equal(ts[i], s.t[i]));
    }
    fl_io_free_tensors(names, ts, n);
    /* layout: u64 LE header size, a multiple of 8, JSON starting with the metadata */
    size_t len;
    unsigned char *b = read_bytes(path, &len);
    uint64_t h = 0;
    for (int k = 7; k >= 0; k--) h = h << 8 | b[k];
    CHECK_EQ_INT(h % 8, 0);
    CHECK(8 + h <= len);
    CHECK(!memcmp(
        b + 8,
        "{\"__metadata__\":{\"format\":\"fleet\"},\"fc_0.w_0\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}",
        95));
    float w0;
    memcpy(&w0, b + 8 + h, 4);
    CHECK(w0 == 0.5f);
    free(b);
    /* zero tensors is a valid file too */
    CHECK_OK(fl_io_write_safetensors(path, NULL, NULL, 0));
    CHECK_OK(fl_io_read_safetensors(path, &names, &ts, &n));
    CHECK_EQ_INT(n, 0);
    fl_io_free_tensors(names, ts, n);
    tset_free(&s);
    th_rmtree(d);
}

TEST(safetensors_write_rejects_bad_input)
{
    char *d = tmpdir();
    tset s = sample_tensors();
    const char *path = join(d, "bad.safetensors");
    const char *dup[] = {"a", "a"};
    CHECK_FAILS(fl_io_write_safetensors(path, dup, (const fl_tensor *const *)s.t, 2), FL_EINVAL,
                "duplicate tensor name 'a'");
    const char *reserved[] = {"__metadata__"};
    CHECK_FAILS(fl_io_write_safetensors(path, reserved, (const fl_tensor *const *)s.t, 1), FL_EINVAL, "reserved");
    const char *badutf[] = {"\xff\xfe"};
    CHECK_FAILS(fl_io_write_safetensors(path, badutf, (const fl_tensor *const *)s.t, 1), FL_EINVAL, "UTF-8");
    fl_tensor *rows = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){1, 2});
    CHECK_OK(fl_tensor_set_rows(rows, (const int64_t[]){3}, 1, 10));
    const char *rn[] = {"rows"};
    CHECK_FAILS(fl_io_write_safetensors(path, rn, (const fl_tensor *const *)&rows, 1), FL_EUNSUPPORTED, "SelectedRows");
    CHECK_EQ_INT(count_entries(d, "bad"), 0);
    fl_tensor_free(rows);
    tset_free(&s);
    th_rmtree(d);
}

/* The tests' Python into py (4200 bytes): BUILD/pyenv/bin/python, the virtual environment
 * that tests/python/run.sh --venv-only makes once per build directory with NumPy and the
 * safetensors package from PyPI.  Fails the case when it cannot be made (no python3-venv,
 * PyPI out of reach): the check must run, not be skipped. */
static void tests_python(char *py)
{
    char build[4096], root[4096], cmd[9000];
    th_build_dirs(build, root);
    snprintf(cmd, sizeof cmd, "'%s/tests/python/run.sh' '%s' --venv-only", root, build);
    fflush(stdout);
    int rc = system(cmd);
    if (rc != 0) TFAIL("tests/python/run.sh %s --venv-only failed (status %d; its output is above)", build, rc);
    snprintf(py, 4200, "%s/pyenv/bin/python", build);
}

/* Our files read by NumPy and by the safetensors package itself (safe_open), and files
 * that they write read by us. */
TEST(safetensors_reads_in_numpy)
{
    alarm(600); /* the first run in a build directory makes the environment (PyPI) */
    static char py[4200];
    tests_python(py);
    char *d = tmpdir();
    tset s = sample_tensors();
    const char *path = join(d, "np.safetensors");
    CHECK_OK(fl_io_write_safetensors(path, s.names, (const fl_tensor *const *)s.t, s.n));
    const char *script = join(d, "check.py");
    const char *src =
        "import json, struct, sys\n"
        "import numpy as np\n"
        "raw = open(sys.argv[1], 'rb').read()\n"
        "(n,) = struct.unpack('<Q', raw[:8])\n"
        "hdr = json.loads(raw[8:8 + n].decode('utf-8'))\n"
        "buf = raw[8 + n:]\n"
        "dt = {'F32': '<f4', 'I64': '<i8', 'F64': '<f8', 'I32': '<i4', 'F16': '<f2', 'BF16': '<u2', 'U8': 'u1'}\n"
        "def get(name):\n"
        "    e = hdr[name]\n"
        "    b, t = e['data_offsets']\n"
        "    return np.frombuffer(buf[b:t], dtype=dt[e['dtype']]).reshape(e['shape'])\n"
        "assert hdr['__metadata__']['format'] == 'fleet'\n"
        "w = get('fc_0.w_0')\n"
        "assert w.shape == (2, 3) and w[0, 1] == -1.25 and w[1, 2] == 65504.0, w\n"
        "assert get('ids@GRAD')[2] == 1234567890123 and get('ids@GRAD')[0] == -2**63\n"
        "assert get('d\"q\\\\uote\\n')[0, 0] == 0.1\n"
        "assert get('i32 with spaces')[1, 0] == 2**31 - 1\n"
        "assert get('half')[1] == -2.0 and get('half')[2] == 65504.0\n"
        "assert get('bf16.\\u00e9t\\u00e9')[0] == 0x3f80\n"
        "assert get('scalar').shape == () and get('scalar') == 42.0\n"
        "assert get('empty').shape == (0, 4)\n"
        "assert list(get('mask')) == [1, 0, 255, 1, 0]\n"
        "import safetensors, safetensors.numpy\n"
        "from safetensors import safe_open\n"
        "with safe_open(sys.argv[1], framework='np') as f:\n"
        "    assert sorted(f.keys()) == sorted(k for k in hdr if k != '__metadata__')\n"
        "    assert f.metadata() == {'format': 'fleet'}\n"
        "    t = {k: f.get_tensor(k) for k in f.keys() if hdr[k]['dtype'] != 'BF16'}\n"
        "assert t['fc_0.w_0'][0, 1] == -1.25 and t['scalar'] == 42.0 and t['half'][1] == -2.0\n"
        "assert t['ids@GRAD'][2] == 1234567890123 and t['empty'].shape == (0, 4) and t['mask'][2] == 255\n"
        "print('  checked with safetensors', safetensors.__version__, 'too')\n"
        "# files written by Python for the C reader: plain json + numpy, and safetensors itself\n"
        "a = np.arange(6, dtype='<f4').reshape(2, 3) / 4\n"
        "b = np.array([[7], [-8]], dtype='<i8')\n"
        "meta = json.dumps({'b.w@GRAD': {'dtype': 'I64', 'shape': [2, 1], 'data_offsets': [0, 16]},\n"
        "                   '__metadata__': {'who': 'numpy'},\n"
        "                   'a': {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [16, 40]}}, indent=1).encode()\n"
        "open(sys.argv[2], 'wb').write(struct.pack('<Q', len(meta)) + meta + b.tobytes() + a.tobytes())\n"
        "from safetensors.numpy import save_file\n"
        "save_file({'a': a, 'b.w@GRAD': b}, sys.argv[3], metadata={'who': 'safetensors'})\n"
        "print('  numpy OK')\n";
    th_write_bytes(script, src, strlen(src));
    char cmd[8192];
    char py1[512], py2[512];
    snprintf(py1, sizeof py1, "%s", join(d, "py_plain.safetensors"));
    snprintf(py2, sizeof py2, "%s", join(d, "py_lib.safetensors"));
    snprintf(cmd, sizeof cmd, "%s %s %s %s %s", py, script, path, py1, py2);
    fflush(stdout);
    int rc = system(cmd);
    CHECK_EQ_INT(rc, 0);
    for (int k = 0; k < 2; k++) {
        const char *f = k ? py2 : py1;
        char **names;
        fl_tensor **ts;
        int n;
        CHECK_OK(fl_io_read_safetensors(f, &names, &ts, &n));
        CHECK_EQ_INT(n, 2);
        for (int i = 0; i < n; i++) {
            if (!strcmp(names[i], "a")) {
                CHECK(fl_tensor_dtype(ts[i]) == FL_FLOAT32 && fl_tensor_dim(ts[i], 1) == 3);
                CHECK(fl_tensor_f32(ts[i])[5] == 1.25f);
            } else {
                CHECK(!strcmp(names[i], "b.w@GRAD") && fl_tensor_dtype(ts[i]) == FL_INT64);
                CHECK(fl_tensor_i64(ts[i])[1] == -8);
            }
        }
        fl_io_free_tensors(names, ts, n);
    }
    tset_free(&s);
    th_rmtree(d);
}

TEST(safetensors_every_truncation_is_corrupt)
{
    char *d = tmpdir();
    tset s = sample_tensors();
    const char *path = join(d, "full.safetensors"), *cut = join(d, "cut.safetensors");
    CHECK_OK(fl_io_write_safetensors(path, s.names, (const fl_tensor *const *)s.t, 3));
    size_t len;
    unsigned char *b = read_bytes(path, &len);
    for (size_t k = 0; k < len; k++) {
        th_write_bytes(cut, b, k);
        char **names = (char **)1;
        fl_tensor **ts = (fl_tensor **)1;
        int n = -1;
        int st = fl_io_read_safetensors(cut, &names, &ts, &n);
        if (st != FL_ECORRUPT) TFAIL("prefix of %zu/%zu bytes: %s (%s)", k, len, fl_strerror(st), fl_last_error());
        CHECK_STR_HAS(fl_last_error(), cut);
        CHECK(names == NULL && ts == NULL && n == 0);
    }
    /* and one byte too many */
    unsigned char *longer = malloc(len + 1);
    memcpy(longer, b, len);
    longer[len] = 0;
    th_write_bytes(cut, longer, len + 1);
    char **names;
    fl_tensor **ts;
    int n;
    CHECK_FAILS(fl_io_read_safetensors(cut, &names, &ts, &n), FL_ECORRUPT, "but it has");
    free(longer);
    free(b);
    tset_free(&s);
    th_rmtree(d);
}

/* Writes an 8-byte size (hlen_override if nonzero), the header text and `data` bytes. */
static void write_raw(const char *path, const char *hdr, uint64_t hlen_override, size_t data)
{
    size_t h = strlen(hdr);
    uint64_t hl = hlen_override ? hlen_override : h;
    unsigned char *b = calloc(1, 8 + h + data + 1);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(hl >> (8 * k));
    memcpy(b + 8, hdr, h);
    th_write_bytes(path, b, 8 + h + data);
    free(b);
}

static void corrupt_case(const char *path, const char *hdr, uint64_t hl, size_t data, const char *why)
{
    write_raw(path, hdr, hl, data);
    char **names;
    fl_tensor **ts;
    int n;
    int st = fl_io_read_safetensors(path, &names, &ts, &n);
    if (st != FL_ECORRUPT) TFAIL("header %s: got %s (%s), expected FL_ECORRUPT", hdr, fl_strerror(st), fl_last_error());
    CHECK_STR_HAS(fl_last_error(), path);
    CHECK_STR_HAS(fl_last_error(), why);
}

#define T1(dt, shape, off) "{\"a\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}}"

TEST(safetensors_corrupt_files)
{
    char *d = tmpdir();
    const char *p = join(d, "c.safetensors");
    /* the well-formed reference case loads */
    write_raw(p, T1("F32", "[2]", "[0,8]"), 0, 8);
    char **names;
    fl_tensor **ts;
    int n;
    CHECK_OK(fl_io_read_safetensors(p, &names, &ts, &n));
    CHECK(n == 1 && fl_tensor_numel(ts[0]) == 2);
    fl_io_free_tensors(names, ts, n);
    /* header size */
    corrupt_case(p, T1("F32", "[2]", "[0,8]"), (uint64_t)1 << 40, 8, "larger than the limit");
    corrupt_case(p, T1("F32", "[2]", "[0,8]"), 1000, 8, "runs past the end of the file");
    /* JSON */
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 0, 8, "bad safetensors header");
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 0, 8,
                 "invalid JSON: it ends early or is malformed at its last byte (byte 54, line 1)");
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\n\"shape\":[2] \"data_offsets\":[0,8]}}", 0, 8,
                 "invalid JSON at byte 33 (line 2): '\"data_offsets\":[0,8]}}'");
    corrupt_case(p, "{'a':{}}", 0, 0, "invalid JSON at byte 2 (line 1)");
    corrupt_case(p, "[]", 0, 0, "bad safetensors header: the header must be a JSON object");
    corrupt_case(p, "{\"a\":[1]}", 0, 0, "key 'a' must be an object");
    corrupt_case(p, T1("F32", "[2]", "[0,8]") "x", 0, 8, "unexpected data after the JSON value at byte 54 (line 1): 'x'");
    corrupt_case(p, T1("F32", "[2.5]", "[0,8]"), 0, 8, "key 'a.shape[0]' must be an integer, not 2.5");
    corrupt_case(p, T1("F32", "[-2]", "[0,8]"), 0, 8, "key 'a.shape[0]' must be a non-negative integer, not -2");
    corrupt_case(p, T1("F32", "[2]", "[0,\"8\"]"), 0, 8, "key 'a.data_offsets[1]' must be an integer");
    corrupt_case(p, T1("F32", "[2]", "[0.5,8]"), 0, 8, "key 'a.data_offsets[0]' must be an integer, not 0.5");
    corrupt_case(p, T1("F32", "[2]", "[0,8,16]"), 0, 8, "key 'a.data_offsets' has more than 2 entries");
    corrupt_case(p, T1("F32", "[2]", "[0]"), 0, 8, "data_offsets must have 2 entries, has 1");
    corrupt_case(p, T1("F32", "[99999999999999999999]", "[0,8]"), 0, 8, "key 'a.shape[0]' is too large");
    corrupt_case(p, T1("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 0, 4, "key 'a.shape' has more than 8 entries");
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, 8, "missing field 'data_offsets'");
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
                 "duplicate field");
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 0, 8,
                 "unexpected field 'x'");
    corrupt_case(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{}}", 0, 8,
                 "duplicate tensor name 'a'");
    corrupt_case(p, "{\"__metadata__\":{\"k\":1}}", 0, 0, "key '__metadata__.k' must be a string");
    corrupt_case(p, "{\"__metadata__\":[]}", 0, 0, "key '__metadata__' must be an object");
    corrupt_case(p, "{\"a\\u0000b\":{}}", 0, 0, "escape \\u0000 (NUL) at byte 3 (line 1)");
    corrupt_case(p, "{\"a\xff\":{}}", 0, 0, "invalid UTF-8 at byte 3 (line 1)");
    corrupt_case(p, "{\"a\x01\":{}}", 0, 0, "control character 0x01 at byte 3 (line 1)");
    corrupt_case(p, "{\"a\\ud800\":{}}", 0, 0, "invalid JSON at byte 3 (line 1): '\\ud800");
    corrupt_case(p, "{\"a\\q\":{}}", 0, 0, "invalid JSON at byte 3 (line 1): '\\q");
    corrupt_case(p, "        ", 0, 0, "no JSON value");
    {
        char nul[] = "{\"a\":1}";
        nul[3] = 0; /* a NUL byte inside the header */
        unsigned char b[8 + 7] = {7};
        memcpy(b + 8, nul, 7);
        th_write_bytes(p, b, sizeof b);
        CHECK_FAILS(fl_io_read_safetensors(p, &names, &ts, &n), FL_ECORRUPT, p);
    }
    /* dtype, offsets, sizes */
    corrupt_case(p, T1("F8_E4M3", "[2]", "[0,2]"), 0, 2, "unknown or unsupported dtype 'F8_E4M3'");
    corrupt_case(p, T1("F32", "[2]", "[0,16]"), 0, 8, "beyond the end of the data buffer");
    corrupt_case(p, T1("F32", "[2]", "[8,0]"), 0, 8, "reversed");
    corrupt_case(p, T1("F32", "[3]", "[0,8]"), 0, 8, "needs 12 bytes");
    corrupt_case(p, T1("F32", "[4294967296,4294967296]", "[0,8]"), 0, 8, "shape overflows 64 bits");
    corrupt_case(p, T1("F32", "[4611686018427387904,4]", "[0,8]"), 0, 8, "key 'a.shape[0]' is too large");
    corrupt_case(p, T1("F32", "[2]", "[0,8]"), 0, 12, "but it has 12 bytes");
    corrupt_case(p, T1("F32", "[2]", "[0,8]"), 0, 4, "beyond the end");
    corrupt_case(p,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                 0, 12, "overlap");
    corrupt_case(p,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                 0, 12, "belong to no tensor");
    /* not there at all */
    CHECK_FAILS(fl_io_read_safetensors(join(d, "missing"), &names, &ts, &n), FL_ENOTFOUND, "missing");
    th_rmtree(d);
}

/* ---- checkpoints --------------------------------------------------------------------------- */

typedef struct {
    fl_prog *p;
    fl_var *pred, *cost;
} mlp_t;

/* The quick-start MLP at a small size: x[16] -> fc h tanh -> fc h tanh -> fc 2 softmax. */
static mlp_t build_mlp(int hid, float lr)
{
    mlp_t m;
    m.p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    cfg.input_dim = 16;
    cfg.hidden[0] = cfg.hidden[1] = hid;
    fl_model_mlp net;
    CHECK_OK(fl_model_mlp_build(m.p, &cfg, &net));
    m.pred = net.predict;
    m.cost = net.loss;
    fl_opt *o = fl_opt_sgd(lr);
    CHECK_OK(fl_opt_minimize(o, m.cost));
    fl_opt_free(o);
    return m;
}

typedef struct {
    fl_tensor *x, *y;
} batch;

static batch make_batch(int n, unsigned seed)
{
    batch b;
    float *xs = malloc((size_t)n * 16 * sizeof *xs);
    int64_t *ys = malloc((size_t)n * sizeof *ys);
    th_fill_uniform(xs, n * 16, -1, 1, seed);
    for (int i = 0; i < n; i++) {
        float a = 0;
        for (int j = 0; j < 16; j++) a += (j < 8 ? 1 : -1) * xs[i * 16 + j];
        ys[i] = a > 0;
    }
    b.x = th_f32(2, (const int64_t[]){n, 16}, xs);
    b.y = th_i64(2, (const int64_t[]){n, 1}, ys);
    free(xs);
    free(ys);
    return b;
}

static void batch_free(batch *b)
{
    fl_tensor_free(b->x);
    fl_tensor_free(b->y);
}

static float train_step(fl_exe *e, mlp_t *m, batch *b)
{
    fl_feed feed[] = {{"x", b->x}, {"y", b->y}};
    const char *fetch[] = {fl_var_name(m->cost)};
    fl_tensor *out;
    CHECK_OK(fl_exe_run(e, m->p, feed, 2, fetch, 1, &out));
    return fl_tensor_f32(out)[0];
}

/* Every persistable of p has identical bytes in the two executors' scopes. */
static void check_same_persistables(const fl_prog *p, fl_exe *a, fl_exe *b)
{
    int n = 0;
    for (int i = 0; i < fl_prog_num_vars(p); i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (!fl_var_persistable(v)) continue;
        const fl_tensor *ta = fl_scope_find(fl_exe_scope(a), fl_var_name(v));
        const fl_tensor *tb = fl_scope_find(fl_exe_scope(b), fl_var_name(v));
        CHECK(ta && tb);
        if (!tensors_equal(ta, tb)) TFAIL("persistable '%s' differs", fl_var_name(v));
        n++;
    }
    CHECK(n >= 7); /* 6 parameters and the learning rate */
}

TEST(checkpoint_round_trip_is_bit_exact)
{
    char *d = tmpdir();
    mlp_t m = build_mlp(12, 0.5f);
    fl_exe *e1 = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e1, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < 4; i++) {
        batch b = make_batch(8, (unsigned)i + 1);
        train_step(e1, &m, &b);
        batch_free(&b);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ckpt/step4", d);
    CHECK_OK(fl_io_save_persistables(e1, dir, m.p));
    CHECK_EQ_INT(count_entries(dir, "persistables.safetensors"), 1);
    CHECK_EQ_INT(count_entries(dir, ".tmp."), 0);
    /* a fresh executor with an empty scope: no startup run, everything comes from the file */
    fl_exe *e2 = fl_exe_create(NULL);
    CHECK_OK(fl_io_load_persistables(e2, dir, m.p));
    check_same_persistables(m.p, e1, e2);
    /* the next steps agree bit for bit */
    for (int i = 0; i < 2; i++) {
        batch b = make_batch(8, 100 + (unsigned)i);
        float c1 = train_step(e1, &m, &b), c2 = train_step(e2, &m, &b);
        CHECK(memcmp(&c1, &c2, sizeof c1) == 0);
        batch_free(&b);
    }
    check_same_persistables(m.p, e1, e2);
    /* loading over a scope that already holds the variables replaces them in place */
    fl_tensor *w_before = fl_scope_find(fl_exe_scope(e2), "fc_0.w_0");
    CHECK_OK(fl_io_load_persistables(e2, dir, m.p));
    CHECK(fl_scope_find(fl_exe_scope(e2), "fc_0.w_0") == w_before);
    fl_exe_free(e1);
    fl_exe_free(e2);
    fl_prog_free(m.p);
    th_rmtree(d);
}

TEST(checkpoint_save_needs_initialised_state)
{
    char *d = tmpdir();
    mlp_t m = build_mlp(4, 0.1f);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_FAILS(fl_io_save_persistables(e, d, m.p), FL_ESTATE, "fc_0.w_0");
    CHECK_STR_HAS(fl_last_error(), "persistables.safetensors");
    CHECK_EQ_INT(count_entries(d, "persistables"), 0);
    CHECK_FAILS(fl_io_load_persistables(e, d, m.p), FL_ENOTFOUND, "persistables.safetensors");
    fl_exe_free(e);
    fl_prog_free(m.p);
    th_rmtree(d);
}

/* Snapshot of every tensor in a scope, to prove that a failed load changed nothing. */
typedef struct {
    int n;
    char *names[64];
    fl_tensor *t[64];
} snap;

static snap take_snap(fl_scope *s)
{
    snap z;
    z.n = fl_scope_num_vars(s);
    CHECK(z.n <= 64);
    for (int i = 0; i < z.n; i++) {
        z.names[i] = strdup(fl_scope_name_at(s, i));
        z.t[i] = fl_tensor_create(FL_FLOAT32, 0, NULL);
        CHECK_OK(fl_tensor_copy(z.t[i], fl_scope_find(s, z.names[i])));
    }
    return z;
}

static void check_snap(fl_scope *s, snap *z)
{
    CHECK_EQ_INT(fl_scope_num_vars(s), z->n);
    for (int i = 0; i < z->n; i++) {
        CHECK(tensors_equal(fl_scope_find(s, z->names[i]), z->t[i]));
        free(z->names[i]);
        fl_tensor_free(z->t[i]);
    }
}

TEST(checkpoint_mismatch_changes_nothing)
{
    char *d = tmpdir();
    mlp_t a = build_mlp(12, 0.1f), b = build_mlp(10, 0.1f), c = build_mlp(12, 0.1f);
    fl_exe *ea = fl_exe_create(NULL), *eb = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(ea, fl_prog_startup(a.p), NULL, 0, NULL, 0, NULL));
    CHECK_OK(fl_io_save_persistables(ea, d, a.p));
    CHECK_OK(fl_exe_run(eb, fl_prog_startup(b.p), NULL, 0, NULL, 0, NULL));
    snap z = take_snap(fl_exe_scope(eb));
    /* fc_0.b_0 matches ([12] vs [10] is fc_0.w_0's second dim first), fc_0.w_0 does not */
    CHECK_FAILS(fl_io_load_persistables(eb, d, b.p), FL_EINVAL, "variable 'fc_0.w_0'");
    CHECK_STR_HAS(fl_last_error(), "expects float32[16, 10]");
    CHECK_STR_HAS(fl_last_error(), "float32[16, 12]");
    check_snap(fl_exe_scope(eb), &z);
    /* a persistable the file does not have */
    int64_t one = 1;
    fl_var *extra = fl__persistable_create(c.p, "extra_state", FL_FLOAT32, 1, &one, 0.0f);
    CHECK(extra != NULL);
    fl_exe *ec = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(ec, fl_prog_startup(c.p), NULL, 0, NULL, 0, NULL));
    z = take_snap(fl_exe_scope(ec));
    CHECK_FAILS(fl_io_load_persistables(ec, d, c.p), FL_ENOTFOUND, "'extra_state' is not in the file");
    check_snap(fl_exe_scope(ec), &z);
    /* a corrupt checkpoint changes nothing either */
    const char *f = join(d, "persistables.safetensors");
    size_t len;
    unsigned char *bytes = read_bytes(f, &len);
    th_write_bytes(f, bytes, len - 1);
    free(bytes);
    z = take_snap(fl_exe_scope(eb));
    CHECK_FAILS(fl_io_load_persistables(eb, d, b.p), FL_ECORRUPT, f);
    check_snap(fl_exe_scope(eb), &z);
    fl_exe_free(ea);
    fl_exe_free(eb);
    fl_exe_free(ec);
    fl_prog_free(a.p);
    fl_prog_free(b.p);
    fl_prog_free(c.p);
    th_rmtree(d);
}

/* ---- inference models ---------------------------------------------------------------------- */

TEST(inference_model_round_trip)
{
    char *d = tmpdir();
    mlp_t m = build_mlp(12, 0.5f);
    fl_exe *e1 = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e1, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < 3; i++) {
        batch b = make_batch(8, (unsigned)i + 7);
        train_step(e1, &m, &b);
        batch_free(&b);
    }
    const char *feeds[] = {"x"};
    CHECK_OK(fl_io_save_inference_model(e1, d, feeds, 1, &m.pred, 1, m.p));
    size_t len;
    char *model = (char *)read_bytes(join(d, "__model__"), &len);
    CHECK_STR_HAS(model, "\nfeed \"x\"\n");
    CHECK_STR_HAS(model, "\nfetch \"softmax.tmp_0\"\n");
    CHECK_STR_HAS(model, "fleet-program 1\n");
    CHECK(!strstr(model, "@GRAD") && !strstr(model, "sgd") && !strstr(model, "learning_rate"));
    free(model);
    /* a fresh executor: the program, its names and its parameters all come from the files */
    fl_exe *e2 = fl_exe_create(NULL);
    fl_prog *q = NULL;
    char **fd, **ft;
    int nfd, nft;
    CHECK_OK(fl_io_load_inference_model(e2, d, &q, &fd, &nfd, &ft, &nft));
    CHECK(nfd == 1 && !strcmp(fd[0], "x"));
    CHECK(nft == 1 && !strcmp(ft[0], fl_var_name(m.pred)));
    CHECK_EQ_INT(fl_prog_num_ops(q), 4);                  /* fc, fc, fc, softmax */
    CHECK_EQ_INT(fl_scope_num_vars(fl_exe_scope(e2)), 6); /* the six parameters only */
    fl_prog *test = fl_prog_clone(m.p, 1);
    batch b = make_batch(5, 99);
    fl_feed feed_full[] = {{"x", b.x}, {"y", b.y}};
    fl_feed feed_x[] = {{"x", b.x}};
    fl_tensor *o1, *o2;
    const char *fetch[] = {ft[0]};
    CHECK_OK(fl_exe_run(e1, test, feed_full, 2, fetch, 1, &o1));
    CHECK_OK(fl_exe_run(e2, q, feed_x, 1, fetch, 1, &o2));
    CHECK(tensors_equal(o1, o2));
    CHECK_EQ_INT(fl_tensor_dim(o2, 0), 5);
    batch_free(&b);
    fl_io_free_names(fd, nfd);
    fl_io_free_names(ft, nft);
    fl_prog_free(q);
    fl_prog_free(test);
    fl_exe_free(e1);
    fl_exe_free(e2);
    fl_prog_free(m.p);
    th_rmtree(d);
}

TEST(inference_model_errors)
{
    char *d = tmpdir();
    mlp_t m = build_mlp(4, 0.1f);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    const char *feeds[] = {"x"};
    CHECK_FAILS(fl_io_save_inference_model(e, d, feeds, 1, &m.cost, 1, m.p), FL_EINVAL, "data variable 'y'");
    CHECK_EQ_INT(count_entries(d, ""), 2); /* "." and ".." only: nothing written */
    fl_prog *q = NULL;
    char **fd, **ft;
    int nfd, nft;
    CHECK_FAILS(fl_io_load_inference_model(e, d, &q, &fd, &nfd, &ft, &nft), FL_ENOTFOUND, "__model__");
    CHECK_OK(fl_io_save_inference_model(e, d, feeds, 1, &m.pred, 1, m.p));
    /* a damaged program line is reported with the file and its line number */
    size_t len;
    char *model = (char *)read_bytes(join(d, "__model__"), &len);
    char *at = strstr(model, "op softmax");
    CHECK(at != NULL);
    memcpy(at, "op softmux", 10);
    int line = 1;
    for (char *c = model; c < at; c++) line += *c == '\n';
    th_write_bytes(join(d, "__model__"), model, len);
    char want[64];
    snprintf(want, sizeof want, "line %d: unknown operator type 'softmux'", line);
    fl_exe *e2 = fl_exe_create(NULL);
    CHECK_FAILS(fl_io_load_inference_model(e2, d, &q, &fd, &nfd, &ft, &nft), FL_ECORRUPT, want);
    CHECK_STR_HAS(fl_last_error(), "__model__");
    memcpy(at, "op softmax", 10);
    /* a fetch of an unknown variable */
    char *f2 = malloc(len + 64);
    snprintf(f2, len + 64, "fetch \"nope\"\n%s", model);
    th_write_bytes(join(d, "__model__"), f2, strlen(f2));
    CHECK_FAILS(fl_io_load_inference_model(e2, d, &q, &fd, &nfd, &ft, &nft), FL_ECORRUPT, "'nope'");
    snprintf(f2, len + 64, "fetch nope\n%s", model);
    th_write_bytes(join(d, "__model__"), f2, strlen(f2));
    CHECK_FAILS(fl_io_load_inference_model(e2, d, &q, &fd, &nfd, &ft, &nft), FL_ECORRUPT, "line 1: bad fetch line");
    /* params that do not fit the program */
    th_write_bytes(join(d, "__model__"), model, len);
    unlink(join(d, "params.safetensors"));
    CHECK_FAILS(fl_io_load_inference_model(e2, d, &q, &fd, &nfd, &ft, &nft), FL_ENOTFOUND, "params.safetensors");
    CHECK(q == NULL);
    CHECK_EQ_INT(fl_scope_num_vars(fl_exe_scope(e2)), 0);
    free(f2);
    free(model);
    fl_exe_free(e);
    fl_exe_free(e2);
    fl_prog_free(m.p);
    th_rmtree(d);
}

TEST_MAIN(T(atomic_write_creates_dirs_and_replaces), T(atomic_write_failures_leave_nothing_behind),
          T(stale_temporaries_removed_by_next_save_or_load), T(temporary_of_a_zombie_is_stale),
          T(safetensors_round_trip_all_dtypes), T(safetensors_write_rejects_bad_input), T(safetensors_reads_in_numpy),
          T(safetensors_every_truncation_is_corrupt), T(safetensors_corrupt_files), T(checkpoint_round_trip_is_bit_exact),
          T(checkpoint_save_needs_initialised_state), T(checkpoint_mismatch_changes_nothing), T(inference_model_round_trip),
          T(inference_model_errors))
