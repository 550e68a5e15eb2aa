/* strmap.c - small open-addressing hash map from strings to int64 values. */
#include <string.h>

#include "base_internal.h"

static size_t slot_of(const fl_strmap *m, const char *key)
{
    size_t mask = m->cap - 1, i = (size_t)fl__hash_bytes(key, strlen(key)) & mask;
    while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & mask;
    return i;
}

static int grow(fl_strmap *m)
{
    size_t nc = m->cap ? m->cap * 2 : 16;
    fl_strmap n = {calloc(nc, sizeof(char *)), calloc(nc, sizeof(int64_t)), nc, 0};
    if (!n.keys || !n.vals) {
        free(n.keys);
        free(n.vals);
        return FL_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = slot_of(&n, m->keys[i]);
            n.keys[j] = m->keys[i];
            n.vals[j] = m->vals[i];
            n.len++;
        }
    free(m->keys);
    free(m->vals);
    *m = n;
    return FL_OK;
}

int fl__strmap_put(fl_strmap *m, const char *key, int64_t val)
{
    if ((m->len + 1) * 2 > m->cap && grow(m) != FL_OK) return fl__err(FL_ENOMEM, "out of memory");
    size_t i = slot_of(m, key);
    if (!m->keys[i]) {
        m->keys[i] = fl__strdup(key);
        if (!m->keys[i]) return fl__err(FL_ENOMEM, "out of memory");
        m->len++;
    }
    m->vals[i] = val;
    return FL_OK;
}

int fl__strmap_get(const fl_strmap *m, const char *key, int64_t *val)
{
    if (!m->cap) return 0;
    size_t i = slot_of(m, key);
    if (!m->keys[i]) return 0;
    if (val) *val = m->vals[i];
    return 1;
}

int fl__strmap_del(fl_strmap *m, const char *key)
{
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = slot_of(m, key);
    if (!m->keys[i]) return 0;
    free(m->keys[i]);
    m->keys[i] = NULL;
    m->len--;
    /* re-insert the rest of the cluster */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        char *k = m->keys[j];
        int64_t v = m->vals[j];
        m->keys[j] = NULL;
        size_t t = slot_of(m, k);
        m->keys[t] = k;
        m->vals[t] = v;
    }
    return 1;
}

void fl__strmap_free(fl_strmap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
