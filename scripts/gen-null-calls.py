#!/usr/bin/env python3
"""gen-null-calls.py - write tests/null_calls.h: one row per FL_API function of
the headers in include/fleet/, calling it with every argument zero (NULL pointers, 0 scalars, zeroed
structs), or with a zeroed block for the handles that carry a magic number.  tests/test_null_args.c runs each row in its own process and checks the
expectation; it also checks that every FL_API declaration has a row, so a new public
function fails the test until this script is run again.

  scripts/gen-null-calls.py            # rewrite tests/null_calls.h
  scripts/gen-null-calls.py --check    # exit 1 if tests/null_calls.h is out of date

The expectation of a row follows from the return type:
  int            ERR    a negative status (FL_EINVAL ...), or 0 from a predicate or a
                        count, with fl_last_error() naming the function
  pointer        NULL   NULL, with fl_last_error() naming the function
  other scalar   VAL    any value, with fl_last_error() naming the function
  void           SAFE   no crash (free functions and setters accept NULL)
A function whose arguments hold no pointer at all is not called (SKIP: there is no handle
to check).  The layer calls of graph.h are STICKY: given a NULL input they return NULL (or
the program's status) and keep the earlier error instead of naming themselves.  Functions
documented NULL-safe with another answer are listed in SAFE below with the reason; the
ones still to fix are listed in PENDING (MESSAGE: the answer is right but the message does
not name the function; CRASH: not called).
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "null_calls.h")

# Functions whose NULL call is defined as something else than an error (see their headers).
SAFE = {
    "fleet_init": "role NULL: from the environment; strategy NULL: the defaults (fleet.h)",
    "fleet_init_collective": "role NULL: from the environment; strategy NULL: the defaults (fleet.h)",
    "fl_scope_create": "parent may be NULL (exec.h)",
    "fl_exe_create": "scope NULL creates a private scope (exec.h)",
    "fl_tensor_create": "ndim 0 is a scalar: shape is not read (tensor.h)",
    "fl_tensor_from_data": "ndim 0 is a scalar; data NULL leaves it zero-filled, as fl_tensor_create (tensor.c)",
    "fl_metrics_close": "NULL is ignored, as in the free functions (metrics.h)",
    "fl_app_option": "help may be NULL (app.h)",
    "fl_data_criteo_id": "a hash of the len bytes of field: len 0 reads nothing (empty fields hash too, data.h)",
    "fl_prog_error": "answers \"program is NULL\" for NULL, a message to print",
    "fl_net_listener_endpoint": "answers \"\" for NULL, to go into a message",
    "fl_net_acceptor_last_refusal": "answers \"\" for NULL, to go into a message",
    "fl_net_conn_addr": "answers \"\" for NULL, to go into a message",
    "fl_net_conn_label": "answers \"\" for NULL, to go into a message",
    "fl_ps_server_endpoint": "answers \"\" for NULL, to go into a message",
}

# Not yet right (MESSAGE: the answer is right but the message does not name the function;
# CRASH: not called): none at present.
PENDING = {}

# The handles whose structs carry a magic number: foreign_handle_is_refused passes a zeroed
# block (what a freed handle looks like once its magic is cleared) for each of these.
MAGIC_HANDLES = ("fleet_t", "fleet_role", "fl_prog", "fl_opt", "fl_coll", "fl_dataset", "fl_data_batch", "fl_exe",
                 "fl_scope", "fl_metrics", "fl_net_listener", "fl_net_acceptor", "fl_ps_server", "fl_ps_client",
                 "fl_data_image_reader")

STICKY_PREFIXES = ("fl_layer_", "fl_append_backward", "fl_opt_minimize")


def declarations():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "include", "fleet", "*.h"))):
        text = open(path).read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        for m in re.finditer(r"^FL_API\b(.*?);", text, flags=re.S | re.M):
            decl = " ".join(m.group(1).split())
            fm = re.match(r"(.*?)\b([A-Za-z_]\w*)\s*\((.*)\)$", decl)
            if not fm:
                sys.exit("cannot parse: FL_API %s" % decl)
            ret, name, params = fm.group(1).strip(), fm.group(2), fm.group(3).strip()
            out.append((os.path.basename(path), ret, name, params))
    return out


def param_type(p):
    """The type of one parameter declaration: the name removed, arrays made pointers."""
    p = p.strip()
    p = re.sub(r"\[[^\]]*\]$", "*", p) if p.endswith("]") else p
    m = re.match(r"(.*?[\s*])([A-Za-z_]\w*)(\*?)$", p)
    if m and m.group(1).strip() and m.group(2) not in ("int", "float", "double", "char", "long", "unsigned",
                                                        "short", "size_t"):
        return (m.group(1) + m.group(3)).strip()
    return p


def main():
    fnptrs = set()
    for path in glob.glob(os.path.join(ROOT, "include", "fleet", "*.h")):
        fnptrs |= set(re.findall(r"typedef[^;]*\(\s*\*\s*(\w+)\s*\)", open(path).read()))
    rows, lines = [], []
    for hdr, ret, name, params in declarations():
        types = [] if params in ("", "void") else [param_type(p) for p in params.split(",")]
        has_ptr = any("*" in t or t in fnptrs for t in types)
        def is_handle(t):
            m = re.match(r"(const\s+)?(\w+)\s*\*$", t)
            return bool(m) and m.group(2) in MAGIC_HANDLES
        args = ", ".join("(%s)h" % t if is_handle(t) else "(%s){0}" % t for t in types)
        handle = int(any(is_handle(t) for t in types))
        call = "%s(%s)" % (name, args)
        if not has_ptr or PENDING.get(name) == "CRASH":
            kind = "SKIP"
        elif name in SAFE or ret == "void":
            kind = "SAFE"
        elif name.startswith(STICKY_PREFIXES):
            kind = "STICKY"
        elif ret.endswith("*"):
            kind = "NULL"
        elif ret == "int":
            kind = "ERR"
        else:
            kind = "VAL"
        if PENDING.get(name) == "MESSAGE":
            kind += "_QUIET"
        if kind == "SKIP":
            body = "(void)h; return 0;"
        elif ret == "void":
            body = "%s; return 0;" % call
        elif ret.endswith("*"):
            body = "return %s != NULL;" % call
        else:
            body = "return (long long)%s;" % call
        if kind != "SKIP" and not handle:
            body = "(void)h; " + body
        lines.append("static long long nc_%s(void *h) { %s }" % (name, body))
        rows.append('    {"%s", "%s", NC_%s, %d, nc_%s},' % (name, hdr, kind, handle and kind != "SKIP", name))
    for name in list(SAFE) + list(PENDING):
        if name not in [d[2] for d in declarations()]:
            sys.exit("%s is listed but not declared FL_API" % name)
    text = ("/* Generated by scripts/gen-null-calls.py from the headers in include/fleet/: do not edit. */\n"
            "/* clang-format off */\n" + "\n".join(lines) + "\n\nstatic const nc_row nc_rows[] = {\n" +
            "\n".join(rows) + "\n};\n/* clang-format on */\n")
    if sys.argv[1:] == ["--check"]:
        old = open(OUT).read() if os.path.exists(OUT) else ""
        if old != text:
            sys.exit("tests/null_calls.h is out of date: run scripts/gen-null-calls.py")
        return
    open(OUT, "w").write(text)
    print("%s: %d functions" % (os.path.relpath(OUT, ROOT), len(rows)))


if __name__ == "__main__":
    main()
