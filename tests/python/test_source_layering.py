"""The source tree's folders include each other in one direction.

lazy_backend/ is a stack of floors (listed in lazy_backend/CMakeLists.txt):
a file may include its own folder and the floors below it, never one above,
so each floor can be read, and tested, knowing only what is under it. The
compiler side (lowering/, runtime/) has no declared order, but its folders
must not include each other in a cycle either. Parses `#include "..."` lines;
no build needed."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# lazy_backend's floors, from the ground up; the folder itself (the Python
# bindings) is the roof and includes every floor.
LAZY_FLOORS = ["base", "device", "trace", "cache", "exec", "sync", "readback", "frontend",
               "dist", "accelerator", ""]
# Below lazy_backend: the compiler and runtime, which never include it.
COMPILER_SIDE = ("lowering", "runtime")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_files(top):
    for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
        for n in names:
            if n.endswith((".h", ".cpp", ".def", ".inc")):
                yield os.path.join(dirpath, n)


def folder_of(path):
    return os.path.relpath(os.path.dirname(path), ROOT)


def includes(path):
    """(folder, included file) for each include that names a file in the tree."""
    text = open(path, encoding="utf-8").read()
    for inc in INCLUDE.findall(text):
        for candidate in (os.path.join(os.path.dirname(path), inc), os.path.join(ROOT, inc)):
            if os.path.exists(candidate):
                yield os.path.relpath(os.path.dirname(os.path.normpath(candidate)), ROOT), inc
                break


def folder_edges(tops):
    edges = {}
    for top in tops:
        for path in source_files(top):
            src = folder_of(path)
            for dst, inc in includes(path):
                if dst != src:
                    edges.setdefault((src, dst), []).append(f"{os.path.relpath(path, ROOT)}: {inc}")
    return edges


def find_cycle(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def floor(folder):
    rel = os.path.relpath(folder, "lazy_backend")
    return LAZY_FLOORS.index("" if rel == "." else rel.split(os.sep)[0])


def test_every_lazy_backend_folder_is_a_declared_floor():
    folders = {folder_of(p) for p in source_files("lazy_backend")}
    undeclared = [f for f in folders
                  if os.path.relpath(f, "lazy_backend").split(os.sep)[0] not in LAZY_FLOORS + ["."]]
    assert not undeclared, f"add {undeclared} to LAZY_FLOORS (and lazy_backend/CMakeLists.txt)"


def test_lazy_backend_floors_include_only_floors_below():
    upward = []
    for (src, dst), where in folder_edges(["lazy_backend"]).items():
        if dst.startswith("lazy_backend") and floor(dst) > floor(src):
            upward += where
    assert not upward, "includes of a higher floor:\n" + "\n".join(upward)


def test_compiler_side_never_includes_lazy_backend():
    wrong = [w for (src, dst), where in folder_edges(COMPILER_SIDE).items()
             if dst.startswith("lazy_backend") for w in where]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("tops", [COMPILER_SIDE, ("lazy_backend", "autograd") + COMPILER_SIDE])
def test_folders_include_each_other_without_cycles(tops):
    edges = folder_edges(tops)
    cycle = find_cycle(edges)
    assert cycle is None, "folder include cycle: " + " -> ".join(cycle) + "\n" + "\n".join(
        w for a, b in zip(cycle, cycle[1:]) for w in edges[(a, b)])
