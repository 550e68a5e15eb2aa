#!/usr/bin/env python3
"""check-layers.py BUILD_DIR [--order a,b,...] - checks the layering of src/.

1. Folder order: an object file of src/<folder> may use symbols defined only in its own
   folder or in folders below it in ORDER (read from `nm` of BUILD_DIR/src/**/*.o).
2. No include cycle: the quoted #includes between the files of src/ (resolved relative to
   the including file) form no cycle.
Prints each violation and exits 1 if there is any; 0 and a summary line otherwise.
"""
import collections
import glob
import os
import re
import subprocess
import sys

# bottom-up: a folder may call the ones before it (see DESIGN.md's layer table)
ORDER = ["base", "tensor", "graph", "data", "exec", "io", "models", "net", "ps", "coll", "fleet", "app"]


def folder_deps(build):
    defs, undef = {}, collections.defaultdict(set)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    objs = glob.glob(os.path.join(build, "src", "**", "*.o"), recursive=True)
    # an object whose source is gone (a file moved to another folder since that build) is
    # left over, not part of the library: judging it would report a dependency nothing has
    objs = [o for o in objs if os.path.exists(os.path.join(root, os.path.relpath(o, build))[:-2] + ".c")]
    if not objs:
        sys.exit(f"check-layers: no objects under {build}/src (build first)")
    for o in objs:
        top = os.path.relpath(o, os.path.join(build, "src")).split(os.sep)[0]
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDBRVWi":
                defs[f[2]] = top
            elif len(f) == 2 and f[0] == "U":
                undef[(top, o)].add(f[1])
    uses = collections.defaultdict(set)
    for (top, o), syms in undef.items():
        for s in syms:
            if s in defs and defs[s] != top:
                uses[(top, defs[s])].add((os.path.relpath(o, build), s))
    return uses


def include_cycles(root):
    graph = {}
    for f in glob.glob(os.path.join(root, "src", "**", "*.[ch]"), recursive=True):
        f = os.path.normpath(f)
        graph[f] = []
        with open(f, encoding="utf-8") as fh:
            for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', fh.read(), re.M):
                p = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
                if os.path.exists(p):
                    graph[f].append(p)
    cycles, state = [], {}

    def visit(v, path):
        state[v] = 1
        path.append(v)
        for w in graph.get(v, []):
            if state.get(w) == 1:
                cycles.append(path[path.index(w):] + [w])
            elif w not in state:
                visit(w, path)
        path.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v, [])
    return cycles


def main():
    args = sys.argv[1:]
    order = ORDER
    if "--order" in args:
        i = args.index("--order")
        order = args[i + 1].split(",")
        del args[i:i + 2]
    build = args[0] if args else "build"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = 0
    for (a, b), where in sorted(folder_deps(build).items()):
        if a not in order or b not in order:
            print(f"src/{a} uses src/{b}: a folder missing from the layer order {','.join(order)}")
            bad += 1
        elif order.index(b) > order.index(a):
            o, s = sorted(where)[0]
            print(f"upward dependency: src/{a} uses src/{b} ({o} calls {s}, and {len(where) - 1} more)")
            bad += 1
    for c in include_cycles(root):
        print("include cycle: " + " -> ".join(os.path.relpath(x, root) for x in c))
        bad += 1
    if bad:
        print(f"check-layers: {bad} violation(s)")
        return 1
    print(f"check-layers: {len(order)} layers ({' < '.join(order)}), no upward dependency, no include cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
