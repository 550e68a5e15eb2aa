/* exec_internal.h - scope structure shared inside exec/. */
#ifndef FL_EXEC_INTERNAL_H
#define FL_EXEC_INTERNAL_H

#include "fleet/exec.h"
#include "../graph/graph_internal.h"

#define FL_SCOPE_MAGIC 0x53434f50u
#define FL_EXE_MAGIC 0x45584543u

struct fl_scope {
    uint32_t magic;
    fl_scope *parent;
    fl_strmap map; /* name -> index into tensors/names */
    fl_tensor **tensors;
    char **names;
    int n, cap;
};

/* Root-most ancestor of s. */
fl_scope *fl__scope_root(fl_scope *s);

#endif
