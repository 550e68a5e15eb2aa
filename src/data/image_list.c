/*
 * image_list.c - the set of (path, label) an image reader reads: Paddle's ImageNet list file
 * (`relative/path.jpg label` per line) or a directory with one sub-directory per class.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "image_internal.h"

#define MAX_CLASSES (1 << 20)

void fl__image_set_free(fl__image_set *set)
{
    if (!set) return;
    for (int64_t i = 0; i < set->n; i++) free(set->paths[i]);
    free(set->paths);
    free(set->labels);
    memset(set, 0, sizeof *set);
}

static int set_add(fl__image_set *set, int64_t *cap, const char *dir, const char *name, size_t name_len, int64_t label)
{
    if (set->n == *cap) {
        const int64_t nc = *cap ? *cap * 2 : 256;
        char **np = realloc(set->paths, sizeof *np * (size_t)nc);
        if (!np) return fl__err(FL_ENOMEM, "image list: out of memory for %lld paths", (long long)nc);
        set->paths = np;
        int64_t *nl = realloc(set->labels, sizeof *nl * (size_t)nc);
        if (!nl) return fl__err(FL_ENOMEM, "image list: out of memory for %lld labels", (long long)nc);
        set->labels = nl;
        *cap = nc;
    }
    const size_t dl = dir && name[0] != '/' ? strlen(dir) : 0;
    char *p = malloc(dl + 1 + name_len + 1);
    if (!p) return fl__err(FL_ENOMEM, "image list: out of memory");
    size_t at = 0;
    if (dl) {
        memcpy(p, dir, dl);
        p[dl] = '/';
        at = dl + 1;
    }
    memcpy(p + at, name, name_len);
    p[at + name_len] = 0;
    set->paths[set->n] = p;
    set->labels[set->n] = label;
    set->n++;
    return FL_OK;
}

/* Paddle's list: each non-blank line is `PATH LABEL` (PATH may hold blanks: LABEL is the last
 * token), the path relative to the list's directory unless absolute. */
static int load_list(const char *list, fl__image_set *set)
{
    FILE *f = fopen(list, "re");
    if (!f)
        return fl__err(errno == ENOENT ? FL_ENOTFOUND : FL_EIO, "%s: cannot open image list: %s", list, strerror(errno));
    char *dir = fl__strdup(list);
    if (!dir) {
        fclose(f);
        return fl__err(FL_ENOMEM, "%s: out of memory", list);
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    char *line = NULL;
    size_t lcap = 0;
    int64_t lineno = 0, cap = 0, max_label = -1;
    ssize_t len;
    int status = FL_OK;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        char *s = line;
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) continue;
        char *e = s + strlen(s), *t = e;
        while (t > s && !isspace((unsigned char)t[-1])) t--;
        if (t == s) {
            status = fl__err(FL_ECORRUPT, "%s:%lld: expected 'PATH LABEL', got one field '%.80s'", list, (long long)lineno,
                             s);
            break;
        }
        char *end = NULL;
        errno = 0;
        long long label = strtoll(t, &end, 10);
        if (end != e || errno || label < 0 || label >= MAX_CLASSES || !isdigit((unsigned char)*t)) {
            status = fl__err(FL_ECORRUPT, "%s:%lld: label '%.40s' is not an integer in [0, %d)", list, (long long)lineno, t,
                             MAX_CLASSES);
            break;
        }
        char *pe = t;
        while (pe > s && isspace((unsigned char)pe[-1])) pe--;
        status = set_add(set, &cap, dir, s, (size_t)(pe - s), label);
        if (status) break;
        if (label > max_label) max_label = label;
    }
    if (!status && ferror(f)) status = fl__err(FL_EIO, "%s: read failed", list);
    if (!status && set->n == 0) status = fl__err(FL_ECORRUPT, "%s: the image list holds no image", list);
    free(line);
    free(dir);
    fclose(f);
    set->classes = (int)(max_label + 1);
    return status;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_image_name(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

/* The names in dir (sorted) that are directories (want_dir) or image files. */
static int list_dir(const char *dir, int want_dir, char ***out, int64_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return fl__err(FL_EIO, "%s: cannot read directory: %s", dir, strerror(errno));
    char **names = NULL;
    int64_t n = 0, cap = 0;
    int status = FL_OK;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        struct stat st;
        if (stat(path, &st)) continue;
        if (want_dir ? !S_ISDIR(st.st_mode) : (!S_ISREG(st.st_mode) || !is_image_name(de->d_name))) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, sizeof *nn * (size_t)cap);
            if (!nn) {
                status = fl__err(FL_ENOMEM, "%s: out of memory listing the directory", dir);
                break;
            }
            names = nn;
        }
        if (!(names[n] = fl__strdup(de->d_name))) {
            status = fl__err(FL_ENOMEM, "%s: out of memory listing the directory", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (status) {
        for (int64_t i = 0; i < n; i++) free(names[i]);
        free(names);
        return status;
    }
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    *n_out = n;
    return FL_OK;
}

static void free_names(char **names, int64_t n)
{
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int load_tree(const char *root, fl__image_set *set)
{
    char **classes = NULL;
    int64_t nclasses = 0, cap = 0;
    FL_CHECK(list_dir(root, 1, &classes, &nclasses));
    int status = FL_OK;
    if (nclasses == 0) status = fl__err(FL_ECORRUPT, "%s: no class directories (expected ROOT/<class>/*.jpg)", root);
    if (nclasses > MAX_CLASSES) status = fl__err(FL_ECORRUPT, "%s: more than %d class directories", root, MAX_CLASSES);
    char dir[4096];
    for (int64_t c = 0; c < nclasses && !status; c++) {
        if (snprintf(dir, sizeof dir, "%s/%s", root, classes[c]) >= (int)sizeof dir) {
            status = fl__err(FL_EINVAL, "%s: path of class '%s' is too long", root, classes[c]);
            break;
        }
        char **files = NULL;
        int64_t nf = 0;
        status = list_dir(dir, 0, &files, &nf);
        for (int64_t i = 0; i < nf && !status; i++) status = set_add(set, &cap, dir, files[i], strlen(files[i]), c);
        free_names(files, nf);
    }
    if (!status && set->n == 0)
        status = fl__err(FL_ECORRUPT, "%s: the class directories hold no .jpg/.jpeg/.png file", root);
    set->classes = (int)nclasses;
    free_names(classes, nclasses);
    return status;
}

int fl__image_set_load(const char *path, fl__image_set *set)
{
    memset(set, 0, sizeof *set);
    struct stat st;
    if (stat(path, &st)) return fl__err(errno == ENOENT ? FL_ENOTFOUND : FL_EIO, "%s: %s", path, strerror(errno));
    int status = S_ISDIR(st.st_mode) ? load_tree(path, set) : load_list(path, set);
    if (status) fl__image_set_free(set);
    return status;
}
