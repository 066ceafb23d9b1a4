"""The notebooks: stored with their outputs and plots, and re-executed without error.

The notebooks in ``notebooks/`` are committed *executed* (``python notebooks/execute.py``), so a
reader browsing the repository, and the docs site (which never executes them), sees every output
and plot. ``test_notebook_stored_executed`` checks that: every code cell ran, in order, without
an error, every notebook has at least one figure, and the file stays small enough to review.
``test_notebook_executes`` re-runs each top to bottom in a fresh ``python3`` kernel whose working
directory is ``notebooks/``, with matplotlib on the Agg backend, and fails on the first cell
error (their own checks are ``assert`` cells). The execution of ``02_reproduce_paper.ipynb`` is
a slow twin (see ``SLOW``).
"""

from __future__ import annotations

import pathlib

import pytest

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: Notebooks whose execution is a slow twin (``-m slow``): 02 runs the four paper-figure scripts
#: in --quick mode, which tests/test_figures.py already runs (and checks) in the default run; 04
#: trains and compresses the two coordinate-network workloads in their quick configuration
#: (~70 s on two loaded cores), whose building blocks tests/test_workloads.py checks by default.
SLOW = {"02_reproduce_paper.ipynb", "04_coordinate_networks.ipynb"}
EXECUTE = [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in SLOW else [])
           for p in NOTEBOOKS]


@pytest.mark.parametrize("path", EXECUTE)
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
