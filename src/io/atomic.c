/*
 * atomic.c - crash-safe file writes (temporary file, fsync, rename, fsync of the
 * directory), the removal of temporary files left by dead processes, mkdir -p and
 * whole-file reads.  Every failure is reported with the path and strerror(errno).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "io_internal.h"

char *fl__path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p) {
        fl__err(FL_ENOMEM, "out of memory joining '%s' and '%s'", dir, name);
        return NULL;
    }
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + (size_t)slash, name, b + 1);
    return p;
}

int fl__mkdir_p(const char *dir)
{
    if (!dir) return fl__err(FL_EINVAL, "mkdir: directory is NULL");
    size_t n = strlen(dir);
    if (n == 0) return FL_OK;
    char *p = fl__strdup(dir);
    if (!p) return fl__err(FL_ENOMEM, "mkdir '%s': out of memory", dir);
    int st = FL_OK;
    /* create every prefix ending before a '/', then the whole path */
    for (size_t i = 1; i <= n && st == FL_OK; i++) {
        if (i < n && p[i] != '/') continue;
        if (i < n && p[i - 1] == '/') continue; /* "a//b" */
        char save = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = fl__err(FL_EIO, "cannot create directory '%s': %s", p, strerror(errno));
        } else {
            struct stat sb;
            if (stat(p, &sb) != 0) st = fl__err(FL_EIO, "cannot create directory '%s': %s", p, strerror(errno));
            else if (!S_ISDIR(sb.st_mode))
                st = fl__err(FL_EIO, "cannot create directory '%s': a file of that name exists", p);
        }
        p[i] = save;
    }
    free(p);
    return st;
}

/* Directory part of path ("." when there is none). */
static char *dir_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    if (!sl) return fl__strdup(".");
    if (sl == path) return fl__strdup("/");
    size_t n = (size_t)(sl - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = 0;
    }
    return d;
}

/* This host's name as it goes into temporary names: [A-Za-z0-9_-] only ('.' and others become
 * '-'), at most 63 characters, "host" if unknown. */
static void host_tag(char *out, size_t n)
{
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "host");
    size_t k = 0;
    for (const char *c = h; *c && k + 1 < n && k < 63; c++)
        out[k++] = isalnum((unsigned char)*c) || *c == '_' || *c == '-' ? *c : '-';
    out[k] = 0;
}

/* Whether process pid will never write again: there is no such process (kill(pid, 0) fails
 * with ESRCH), or it is a zombie (state Z or X in /proc/PID/stat): a killed process whose
 * parent was killed too stays one where nothing reaps orphans (a container whose first
 * process does not), and kill(pid, 0) still succeeds on it. */
static int process_gone(long pid)
{
    if (kill((pid_t)pid, 0) == -1) return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold ')' */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Whether name is a temporary file of fl__afile ("<file>.tmp.<pid>" or "<file>.tmp.<pid>.<host>")
 * that a process of this host (host_tag, or no host: the older name) left behind and that
 * can be removed: the process is gone (process_gone). */
static int stale_tmp(const char *name, const char *host)
{
    const char *t = NULL;
    for (const char *s = name; (s = strstr(s, ".tmp.")); s++) t = s; /* the last one */
    if (!t || t == name) return 0;
    t += 5;
    char *end;
    errno = 0;
    long pid = isdigit((unsigned char)*t) ? strtol(t, &end, 10) : 0;
    if (pid <= 0 || errno || pid > (long)INT32_MAX) return 0;
    if (*end && (*end != '.' || strcmp(end + 1, host) != 0)) return 0; /* another host's, or not ours */
    return process_gone(pid);
}

int fl__tmp_sweep(const char *dir)
{
    char host[64];
    host_tag(host, sizeof host);
    DIR *d = opendir(dir && *dir ? dir : ".");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!stale_tmp(e->d_name, host)) continue;
        char *p = fl__path_join(dir && *dir ? dir : ".", e->d_name);
        struct stat st;
        if (p && lstat(p, &st) == 0 && S_ISREG(st.st_mode) && unlink(p) == 0) {
            FL_INFO(FL_SUB_IO, "removed '%s' (%lld bytes), the temporary file of a save by a process that is gone", p,
                    (long long)st.st_size);
            n++;
        }
        free(p);
    }
    closedir(d);
    return n;
}

int fl__tmp_sweep_near(const char *path)
{
    char *dir = path && *path ? dir_of(path) : NULL;
    int n = dir ? fl__tmp_sweep(dir) : 0;
    free(dir);
    return n;
}

void fl__afile_abort(fl__afile *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    f->tmp = NULL;
    f->path = NULL;
}

int fl__afile_open(fl__afile *f, const char *path)
{
    f->fd = -1;
    f->path = NULL;
    f->tmp = NULL;
    if (!path || !*path) return fl__err(FL_EINVAL, "atomic write: path is empty");
    char *dir = dir_of(path);
    if (!dir) return fl__err(FL_ENOMEM, "atomic write '%s': out of memory", path);
    int st = fl__mkdir_p(dir);
    if (st == FL_OK) fl__tmp_sweep(dir);
    free(dir);
    if (st != FL_OK) return st;
    char host[64];
    host_tag(host, sizeof host);
    size_t n = strlen(path) + 32 + strlen(host);
    f->path = fl__strdup(path);
    f->tmp = malloc(n);
    if (!f->path || !f->tmp) {
        fl__afile_abort(f);
        return fl__err(FL_ENOMEM, "atomic write '%s': out of memory", path);
    }
    snprintf(f->tmp, n, "%s.tmp.%ld.%s", path, (long)getpid(), host);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f->fd < 0) {
        st = fl__err(FL_EIO, "cannot create '%s': %s", f->tmp, strerror(errno));
        free(f->tmp); /* nothing was created: do not unlink a file that may be someone else's */
        f->tmp = NULL;
        fl__afile_abort(f);
        return st;
    }
    return FL_OK;
}

int fl__afile_write(fl__afile *f, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n > (size_t)1 << 30 ? (size_t)1 << 30 : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            int st = fl__err(FL_EIO, "cannot write '%s': %s", f->tmp, strerror(e));
            fl__afile_abort(f);
            return st;
        }
        p += w;
        n -= (size_t)w;
    }
    return FL_OK;
}

int fl__afile_commit(fl__afile *f)
{
    int st;
    if (fsync(f->fd) != 0) {
        st = fl__err(FL_EIO, "cannot fsync '%s': %s", f->tmp, strerror(errno));
        fl__afile_abort(f);
        return st;
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) {
        st = fl__err(FL_EIO, "cannot close '%s': %s", f->tmp, strerror(errno));
        fl__afile_abort(f);
        return st;
    }
    if (rename(f->tmp, f->path) != 0) {
        st = fl__err(FL_EIO, "cannot rename '%s' to '%s': %s", f->tmp, f->path, strerror(errno));
        fl__afile_abort(f);
        return st;
    }
    free(f->tmp); /* renamed: nothing to remove any more */
    f->tmp = NULL;
    st = FL_OK;
    char *dir = dir_of(f->path);
    if (!dir) {
        st = fl__err(FL_ENOMEM, "atomic write '%s': out of memory", f->path);
    } else {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
            st = fl__err(FL_EIO, "cannot open directory '%s' of '%s': %s", dir, f->path, strerror(errno));
        } else {
            /* some file systems cannot fsync a directory (EINVAL): the rename is as durable
             * as they make it */
            if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS)
                st = fl__err(FL_EIO, "cannot fsync directory '%s' of '%s': %s", dir, f->path, strerror(errno));
            close(dfd);
        }
        free(dir);
    }
    fl__afile_abort(f);
    return st;
}

int fl__write_file_atomic(const char *path, const void *data, size_t n)
{
    fl__afile f;
    FL_CHECK(fl__afile_open(&f, path));
    FL_CHECK(fl__afile_write(&f, data, n));
    return fl__afile_commit(&f);
}

int fl__read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fl__err(e == ENOENT ? FL_ENOTFOUND : FL_EIO, "cannot open '%s': %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fl__err(FL_EIO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return fl__err(FL_EIO, "'%s' is not a regular file", path);
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)max_bytes) {
        close(fd);
        return fl__err(FL_ECORRUPT, "'%s' is %lld bytes, more than the limit of %zu", path, (long long)sb.st_size,
                       max_bytes);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return fl__err(FL_ENOMEM, "cannot allocate %zu bytes to read '%s'", n + 1, path);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return fl__err(FL_EIO, "cannot read '%s': %s", path, strerror(e));
        }
        if (r == 0) break; /* shrank while reading */
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *out = buf;
    *len = got;
    return FL_OK;
}
