"""The package's shape, kept so: an import graph without cycles, no hidden imports, short functions.

Issue 19's measurements as tests: circles in the import graph used to be hidden by imports inside
functions (8 modules through ``sharding.py``); the compression driver had a second copy in the
tolerance search. The checks read the source with :mod:`ast` (nothing is imported).
"""

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "jaxcompress"
#: The CLI defers importing the library until a command runs (start-up time of ``--help``).
DEFERRED = {"jaxcompress.cli"}
MAX_FUNCTION_LINES = 100


@functools.cache
def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


def _imports(module: str, tree: ast.Module, known) -> list[tuple[str, ast.AST]]:
    """``(imported package module, node)`` for every import of the package in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [(t, node) for t in names if t in known and t != module]
    return found


def _graph(mods) -> dict[str, set[str]]:
    graph = {m: set() for m in mods}
    for m, tree in mods.items():
        for target, _ in _imports(m, tree, mods):
            # a module importing its own package's __init__ (or the top package) is not an edge
            if m != "jaxcompress" and target != "jaxcompress" and not m.startswith(target + "."):
                graph[m].add(target)
    return graph


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycles():
    mods = _modules()
    assert len(mods) > 20
    assert _cycles(_graph(mods)) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_imports_of_the_package_inside_functions():
    mods = _modules()
    inner = []
    for m, tree in mods.items():
        if m in DEFERRED:
            continue
        top = {id(n) for n in tree.body}
        inner += [f"{m}:{node.lineno} imports {target}"
                  for target, node in _imports(m, tree, mods) if id(node) not in top]
    assert inner == []


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = fn.body[0]
    doc = (first.end_lineno - first.lineno + 1
           if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
           and isinstance(first.value.value, str) else 0)
    return fn.end_lineno - fn.lineno + 1 - doc


def test_no_function_over_100_lines_of_code():
    long = [f"{m}.{n.name}: {_code_lines(n)}" for m, tree in _modules().items()
            for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _code_lines(n) > MAX_FUNCTION_LINES]
    assert long == []
