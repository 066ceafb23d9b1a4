"""The notebooks: stored with their outputs and plots, and re-executed without error.

The notebooks in ``notebooks/`` are committed *executed* (``python notebooks/execute.py``), so a
reader browsing the repository, and the docs site (which never executes them), sees every output
and plot. ``test_notebook_stored_executed`` checks that: every code cell ran, in order, without
an error, every notebook has at least one figure, and the file stays small enough to review.
``test_notebook_executes`` re-runs each top to bottom in a fresh ``python3`` kernel whose working
directory is ``notebooks/``, with matplotlib on the Agg backend, and fails on the first cell
error (their own checks are ``assert`` cells). Executing them is slow (20-70 s each on two
cores, about three minutes for ``04_coordinate_networks``, which trains its teachers), so in
the default run every notebook gets a fast twin instead,
``test_notebook_code_matches_the_api``: every code cell compiles, and every ``jc.<name>`` /
``jf.<name>`` it uses, and every keyword it passes to one of them, exists in the installed
library (what breaks a notebook when the API moves). The executions are ``-m slow``.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re

import pytest

import jaxcompress
import jaxcompress.flax

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: The modules the notebooks import under these names.
ALIASES = {"jc": jaxcompress, "jf": jaxcompress.flax}


def _code_cells(path: pathlib.Path) -> list[str]:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    # IPython magics (``%matplotlib inline``) are not Python
    return ["\n".join(line for line in c.source.splitlines() if not line.lstrip().startswith("%"))
            for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_code_matches_the_api(path: pathlib.Path) -> None:
    used = 0
    for i, source in enumerate(_code_cells(path)):
        tree = ast.parse(source, filename=f"{path.name}[cell {i}]")
        compile(tree, f"{path.name}[cell {i}]", "exec")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in ALIASES):
                continue
            module = ALIASES[node.value.id]
            assert hasattr(module, node.attr), (
                f"{path.name} cell {i}: {node.value.id}.{node.attr} is not in {module.__name__}")
            used += 1
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            f = call.func
            if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and f.value.id in ALIASES and callable(getattr(ALIASES[f.value.id], f.attr))):
                continue
            target = getattr(ALIASES[f.value.id], f.attr)
            try:
                params = inspect.signature(target).parameters
            except (TypeError, ValueError):  # a builtin or a class without a signature
                continue
            if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                continue
            for kw in call.keywords:
                assert kw.arg is None or kw.arg in params, (
                    f"{path.name} cell {i}: {f.value.id}.{f.attr} has no keyword {kw.arg!r}")
        # the scripts a notebook runs (02 runs the paper-figure scripts;
        # tests/test_benchmarks_figures.py runs and checks them in the default run)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in re.findall(r"benchmarks/(\w+)\.py", node.value):
                    assert (ROOT / "benchmarks" / f"{name}.py").is_file(), (path.name, name)
                    used += 1
            elif isinstance(node, ast.Dict) and any(
                    isinstance(v, ast.Constant) and v.value == "float32" for v in node.values):
                for k in node.keys:  # {"fig1_single_layer": "float32", ...}
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        assert (ROOT / "benchmarks" / f"{k.value}.py").is_file(), (path.name, k)
                        used += 1
    assert used, f"{path.name}: uses nothing from jaxcompress or benchmarks/?"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    # The kernel is a subprocess that inherits this environment when it starts.
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell


#: Upper bound on a stored notebook (outputs included): small enough to review in a diff.
MAX_BYTES = 600 * 1024


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_stored_executed(path: pathlib.Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    hint = "run `python notebooks/execute.py` and commit the result"
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: not executed in order; {hint}"
    errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              and any(o.output_type == "error" for o in c.outputs)]
    assert not errors, f"{path.name}: cells {errors} stored with an error; {hint}"
    images = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert images >= 1, f"{path.name}: no figure stored; {hint}"
    size = path.stat().st_size
    assert size <= MAX_BYTES, f"{path.name}: {size / 1024:.0f} KiB stored, over {MAX_BYTES // 1024}"
