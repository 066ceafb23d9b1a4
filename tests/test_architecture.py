"""The package's shape, kept so (docs/layout.md): an import graph without cycles, no hidden
imports, short functions, the IR below its driver, one network protocol, a small top level.

Each check is a measurement that once failed: circles in the import graph hidden by imports
inside functions (8 modules through ``sharding.py``); a second copy of the driver in the
tolerance search; the graph importing the driver for its plan records; 32 ``isinstance``
checks telling six kinds of network apart; 81 top-level names, one function shadowing its
module. The checks read the source with :mod:`ast` (nothing is imported).
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


def test_the_graph_never_imports_the_driver():
    """The IR holds its plans (graph/plan.py); the loop is the driver's and the graph package
    imports nothing above it (docs/layout.md)."""
    mods = _modules()
    graph = _graph(mods)
    above = {"jaxcompress.driver", "jaxcompress.planning", "jaxcompress.compression",
             "jaxcompress.measure", "jaxcompress.networks"}
    found = {m: sorted(graph[m] & above) for m in graph if m.startswith("jaxcompress.graph")}
    assert {m: t for m, t in found.items() if t} == {}


#: Kinds of network (the classes the protocol unifies): the verbs ask the protocol instead.
NETWORK_KINDS = ("Network", "ModuleNetwork", "Compressed", "CompressedModule", "LoadedNetwork")
#: ``isinstance`` checks on a kind of network allowed in the package: a compressed result's
#: own behaviour (trim, polish, save), a loaded traced file (save). Dispatch on the kind of a
#: network happens in networks.network_like, on the protocol.
MAX_KIND_CHECKS = 4


def test_the_verbs_ask_the_protocol_not_the_kind():
    checks = []
    for m, tree in _modules().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance" and len(node.args) == 2):
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [
                    node.args[1]]
                named = [k.id for k in kinds if isinstance(k, ast.Name)]
                if any(k in NETWORK_KINDS for k in named):
                    checks.append(f"{m}:{node.lineno} {named}")
    assert len(checks) <= MAX_KIND_CHECKS, checks


def test_the_driver_is_the_loop():
    """driver.py is the loop over the sets, best-of and the feature sources (about 500 lines at
    most); plans, widths and checks, measurements live elsewhere."""
    lines = (PACKAGE / "driver.py").read_text().count("\n")
    assert lines <= 500, lines


def _top_level() -> list[str]:
    """``jaxcompress.__all__``, read from the source."""
    for node in _modules()["jaxcompress"].body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return [e.value for e in node.value.elts]
    raise AssertionError("jaxcompress/__init__.py has no __all__")


def test_no_function_shadows_a_module():
    """``jaxcompress.X`` is one thing: no top-level function or class has a submodule's name
    (``jc.frontier`` the function, the records in ``jaxcompress.pareto``)."""
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir()
                                                         if (p / "__init__.py").exists()}
    assert sorted(set(_top_level()) & modules) == []


def test_a_small_top_level():
    """What a newcomer calls in the first hour; the rest in submodules (45-50 names)."""
    assert len(_top_level()) <= 50, len(_top_level())


#: The calls that pad, bucket or mask candidates: the driver's masked runs (``live=``,
#: ``narrow=``), masked features, a plan's padding (``place``), masked polishing.
MASKING = {"masked_jit", "masked_rows", "masked_runs", "place", "bucket", "Space"}
#: Where they may be made: the search's candidates, and where they are defined (the driver's
#: masked runs, the per-layer step they call, a plan's padding, masked polishing).
PADS = {"jaxcompress.search.candidates", "jaxcompress.driver", "jaxcompress.layer",
        "jaxcompress.planning", "jaxcompress.graph.plan", "jaxcompress.polishing"}


def test_only_the_search_candidates_pad_bucket_or_mask():
    """The compile-once work of the searches (padding to buckets, masks, masked programs) lives
    in one module, so the proposers and judges read as algorithms (docs/layout.md)."""
    found = []
    for m, tree in _modules().items():
        if m in PADS:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            keywords = {k.arg for k in node.keywords}
            if (name in MASKING or keywords & {"live", "narrow"}
                    or (name == "polish_leaves" and "mask" in keywords)):
                found.append(f"{m}:{node.lineno} {name}")
    assert found == []


def test_the_masking_check_finds_a_masked_call():
    tree = ast.parse("def f(p, x):\n    return run(p, x, narrow=(3, 2)) + plan.place(x, [])\n")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        {k.arg for k in n.keywords} & {"narrow"} or getattr(n.func, "attr", "") in MASKING)]
    assert len(calls) == 2


def test_one_search_package():
    """One loop and its values in ``jaxcompress/search/``, held at its size, docstrings included
    (2,280 lines; the modules it replaced, with compression.UniformOrders and the command
    line's loop, had ~2,450); the old modules of the search are gone."""
    lines = sum(p.read_text().count("\n") for p in (PACKAGE / "search").glob("*.py"))
    assert lines <= 2300, lines
    assert not any((PACKAGE / f"{m}.py").exists() for m in ("shrink", "tolerance", "pareto"))


#: What makes a compiled program: a decorator or a call of these.
COMPILES = {"jit", "FastOnSmallCPU", "FastFirst", "masked_jit"}


def _compiled_programs(tree: ast.Module) -> list[int]:
    """The lines where ``tree`` defines or calls a compiled program of its own."""
    found = set()
    for node in ast.walk(tree):
        exprs = node.decorator_list if isinstance(node, ast.FunctionDef) else (
            [node] if isinstance(node, ast.Call) else [])
        for e in exprs:
            e = e.args[0] if isinstance(e, ast.Call) and getattr(e.func, "attr", "") == "partial" \
                and e.args else e
            e = e.func if isinstance(e, ast.Call) else e
            if (e.id if isinstance(e, ast.Name) else getattr(e, "attr", None)) in COMPILES:
                found.add(e.lineno)
    return sorted(found)


def test_the_search_compiles_only_in_its_candidates():
    """In the search package only ``candidates.py`` compiles programs (its jitted candidates,
    measurements and masked runs): the loop, the proposers, the judges and the strategies ask
    it, so the compile-once work is in one module."""
    found = {m: _compiled_programs(t) for m, t in _modules().items()
             if m.startswith("jaxcompress.search") and m != "jaxcompress.search.candidates"}
    assert {m: lines for m, lines in found.items() if lines} == {}
    assert _compiled_programs(_modules()["jaxcompress.search.candidates"])


def test_the_compile_check_finds_a_program():
    tree = ast.parse("@functools.partial(jax.jit, static_argnames=('n',))\ndef f(x, n):\n"
                     "    return x\n\ng = FastOnSmallCPU(f)\n")
    assert _compiled_programs(tree) == [1, 5]
