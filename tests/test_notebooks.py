"""Execute every notebook in ``notebooks/`` and fail on any cell error.

Each notebook runs top to bottom in a fresh ``python3`` kernel whose working directory is
``notebooks/``; matplotlib is forced onto the non-interactive Agg backend. The notebooks are
stored without outputs, which is checked too (so the repository stays small). The execution of
``02_reproduce_paper.ipynb`` is marked slow (see ``SLOW``).
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_stored_without_outputs(path: pathlib.Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: clear the outputs of code cells {dirty} before committing"
