/* scope.c - name -> tensor maps with parent lookup. */
#include <string.h>

#include "exec_internal.h"

fl_scope *fl_scope_create(fl_scope *parent)
{
    fl_scope *s = calloc(1, sizeof *s);
    if (!s) {
        fl__err(FL_ENOMEM, "fl_scope_create: out of memory");
        return NULL;
    }
    s->magic = FL_SCOPE_MAGIC;
    s->parent = parent;
    return s;
}

void fl_scope_free(fl_scope *s)
{
    if (!s || s->magic != FL_SCOPE_MAGIC) return;
    for (int i = 0; i < s->n; i++) {
        fl_tensor_free(s->tensors[i]);
        free(s->names[i]);
    }
    free(s->tensors);
    free(s->names);
    fl__strmap_free(&s->map);
    s->magic = 0;
    free(s);
}

fl_tensor *fl_scope_find(const fl_scope *s, const char *name)
{
    if (!s || s->magic != FL_SCOPE_MAGIC || !name) {
        fl__err_handle(s, "fl_scope_find: %s",
                       s && s->magic == FL_SCOPE_MAGIC ? "name is NULL" : "scope is NULL or invalid");
        return NULL;
    }
    for (; s; s = s->parent) {
        int64_t i;
        if (fl__strmap_get(&s->map, name, &i)) return s->tensors[i];
    }
    return NULL;
}

fl_tensor *fl_scope_var(fl_scope *s, const char *name)
{
    if (!s || !name) {
        fl__err(FL_EINVAL, "fl_scope_var: scope or name is NULL");
        return NULL;
    }
    int64_t i;
    if (fl__strmap_get(&s->map, name, &i)) return s->tensors[i];
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 32;
        fl_tensor **nt = realloc(s->tensors, (size_t)nc * sizeof *nt);
        if (!nt) goto oom;
        s->tensors = nt;
        char **nn = realloc(s->names, (size_t)nc * sizeof *nn);
        if (!nn) goto oom;
        s->names = nn;
        s->cap = nc;
    }
    int64_t zero = 0;
    fl_tensor *t = fl_tensor_create(FL_FLOAT32, 1, &zero);
    char *nm = fl__strdup(name);
    if (!t || !nm || fl__strmap_put(&s->map, name, s->n) != FL_OK) {
        fl_tensor_free(t);
        free(nm);
        goto oom;
    }
    s->tensors[s->n] = t;
    s->names[s->n] = nm;
    s->n++;
    return t;
oom:
    fl__err(FL_ENOMEM, "fl_scope_var: out of memory");
    return NULL;
}

int fl_scope_num_vars(const fl_scope *s)
{
    if (!s || s->magic != FL_SCOPE_MAGIC) return fl__err_handle(s, "fl_scope_num_vars: scope is NULL or invalid");
    return s->n;
}
const char *fl_scope_name_at(const fl_scope *s, int i)
{
    if (!s || s->magic != FL_SCOPE_MAGIC) {
        fl__err_handle(s, "fl_scope_name_at: scope is NULL or invalid");
        return NULL;
    }
    return (i >= 0 && i < s->n) ? s->names[i] : NULL;
}

fl_scope *fl__scope_root(fl_scope *s)
{
    while (s && s->parent) s = s->parent;
    return s;
}

int fl_scope_zero(fl_scope *s, const char *name)
{
    if (!s || !name) return fl__err(FL_EINVAL, "fl_scope_zero: scope or name is NULL");
    fl_tensor *t = fl_scope_find(s, name);
    if (!t) return fl__err(FL_ENOTFOUND, "fl_scope_zero: no variable '%s' in the scope or its parents", name);
    if (t->numel) memset(t->data, 0, fl_tensor_nbytes(t));
    fl__tensor_bump(t);
    return FL_OK;
}
