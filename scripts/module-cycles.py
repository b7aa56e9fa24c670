#!/usr/bin/env python3
"""Module circles inside each crate: prints every group of sibling modules that import each
other in a loop (a uses b, b uses c, c uses a), and exits 1 if there is one.

Reads `crate::`, `super::` and `self::` paths in each file's code (its test modules left out),
resolves a name the crate root re-exports (`pub use module::Name`) to its module, and judges
siblings only: a module's own children and its parent are its inside, not a circle."""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")


def module_files(src):
    """(module path as a tuple, text) for each file of a crate's library or binary."""
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src)[:-3].split(os.sep)
            if rel[0] == "bin":
                continue
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            with open(os.path.join(dirpath, name)) as f:
                text = f.read()
            cut = text.find("#[cfg(test)]")
            yield tuple(rel), text if cut < 0 else text[:cut]


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z_0-9]*)+|::\{)")


def paths_in(text):
    """Every path starting at crate/super/self, with `{a, b::c}` groups expanded one level."""
    for m in PATH.finditer(text):
        head, rest = m.group(1), m.group(2)
        if rest == "::{":
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            for item in re.split(r",", text[m.end() : i - 1]):
                names = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", item.split("{")[0])
                if names:
                    yield [head] + names
        else:
            segs = rest.split("::")[1:]
            if segs and segs[-1] == "" :
                segs = segs[:-1]
            yield [head] + segs


def main():
    circles = []
    for crate in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, crate, "src")
        if not os.path.isdir(src):
            continue
        files = {path: strip_comments(text) for path, text in module_files(src)}
        modules = set(files)
        # names the root re-exports: `pub use module::{A, B}` / `pub use module::A`
        reexported = {}
        for m in re.finditer(r"pub use ([a-z_0-9]+)::(\{[^}]*\}|[A-Za-z_0-9]+)", files.get((), "")):
            for name in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", m.group(2)):
                reexported[name] = (m.group(1),)
        edges = {}
        for path, text in files.items():
            for segs in paths_in(text):
                head, rest = segs[0], segs[1:]
                base = {"crate": (), "self": path, "super": path[:-1]}[head]
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
                target = base
                for seg in rest:
                    if target + (seg,) in modules:
                        target = target + (seg,)
                    else:
                        if target == () and seg in reexported:
                            target = reexported[seg]
                        break
                # siblings under their closest common parent
                n = 0
                while n < min(len(path), len(target)) and path[n] == target[n]:
                    n += 1
                if n == len(path) or n == len(target):
                    continue  # one holds the other
                a, b = path[: n + 1], target[: n + 1]
                edges.setdefault(a, set()).add(b)
        circles += [(crate, c) for c in strongly_connected(edges)]
    for crate, circle in circles:
        print(f"{crate}: " + " <-> ".join("::".join(m) for m in sorted(circle)))
    return 1 if circles else 0


def strongly_connected(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {b for bs in edges.values() for b in bs}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(group)

    sys.setrecursionlimit(100000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
