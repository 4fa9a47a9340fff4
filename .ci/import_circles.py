#!/usr/bin/env python3
"""Fails when the modules of a crate under crates/ import each other in a circle.

Usage: import_circles.py [CRATE_DIR...]   (default: every crates/*)

A module is a file under src/ (`a.rs` and `a/b.rs` are `a` and `a::b`; `mod.rs` is its folder's
module). A file depends on the modules it names through `crate::` paths, in `use` items or inline,
outside comments, and including test modules: a circle through a test still ties the two files
together. A path into a parent module (`crate::gather::wake`) depends on the deepest module that
exists (`gather`); a module depends on its own children without that making a circle, since a
parent declares them. Prints every circle (one strongly connected component a line) and exits 1
if there is any.
"""

import os
import re
import sys

PATH = re.compile(r"\bcrate((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
BRACED = re.compile(r"\bcrate::\{([^;]*?)\};", re.S)
LINE_COMMENT = re.compile(r"//.*")


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            mods["::".join(rel)] = os.path.join(root, f)
    return mods


def reexports(root_text):
    """Names the crate root re-exports (`pub use crate::m::{A, B}` / `pub use m::A`), by module."""
    names = {}
    for m in re.finditer(r"pub use (?:crate::)?(\w+)::\{([^}]*)\}", root_text):
        for n in re.split(r"[,\s]+", m.group(2)):
            if n:
                names[n] = m.group(1)
    for m in re.finditer(r"pub use (?:crate::)?(\w+)::(\w+);", root_text):
        names[m.group(2)] = m.group(1)
    return names


def deps(text, mods, exported):
    text = LINE_COMMENT.sub("", text)
    names = []
    for m in BRACED.finditer(text):
        for part in re.split(r"[,{}\s]+", m.group(1)):
            if part and part not in ("self", "super"):
                names.append(part.split("::")[0])
    names += [m.group(1)[2:].split("::") for m in PATH.finditer(text)]
    found = set()
    for n in names:
        parts = n if isinstance(n, list) else [n]
        best = None
        for k in range(len(parts), 0, -1):
            cand = "::".join(parts[:k])
            if cand in mods:
                best = cand
                break
        if best is None:
            # A root re-export (`crate::Source`, `crate::backend::ReadEngine`): its module.
            best = next((exported[p] for p in reversed(parts) if p in exported and exported[p] in mods), None)
        if best is not None:
            found.add(best)
    return found


def circles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    crates = sys.argv[1:] or sorted(
        os.path.join("crates", c) for c in os.listdir("crates") if os.path.isdir(os.path.join("crates", c, "src"))
    )
    bad = 0
    for crate in crates:
        mods = modules(os.path.join(crate, "src"))
        names = reexports(open(mods[""]).read()) if "" in mods else {}
        graph = {}
        for name, path in mods.items():
            own = {d for d in deps(open(path).read(), mods, names) if d != name}
            # A parent names its children (mod items, re-exports): that is not a dependency back.
            graph[name] = {d for d in own if not d.startswith(name + "::") or name == ""}
            if name == "":
                graph[name] = set()  # the crate root declares and re-exports everything
        for comp in circles(graph):
            bad += 1
            print(f"{crate}: import circle: " + " <-> ".join(m or "(root)" for m in comp))
    if bad:
        sys.exit(1)
    print(f"no import circle in {len(crates)} crates")


if __name__ == "__main__":
    main()
