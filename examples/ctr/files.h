/*
 * files.h - the data files of a directory, shared by the CTR examples (train.c, infer.c):
 * the seed's "raw_data/part-N" listing.
 */
#ifndef CTR_FILES_H
#define CTR_FILES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* The regular files of dir, sorted ("raw_data/part-N" in the seed). */
static inline char **list_files(const char *dir, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp")) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        v[*n] = malloc(len);
        snprintf(v[*n], len, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(v, (size_t)*n, sizeof *v, cmp_str);
    return v;
}

static inline void free_files(char **files, int n)
{
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
}

#endif
