"""Execute the notebooks in place and store their outputs (what the repository shows).

Usage, from anywhere::

    python notebooks/execute.py                  # every notebooks/*.ipynb
    python notebooks/execute.py 01_quickstart    # the ones whose name starts with this

Each notebook runs top to bottom in a fresh ``python3`` kernel whose working directory is
``notebooks/`` (as ``tests/test_notebooks.py`` runs them), with matplotlib on the Agg backend.
The outputs are stored with the notebook; per-cell execution timestamps are dropped so that a
re-run changes only what the cells print. A failing cell stops the run with the cell's error and
leaves the notebook unchanged on disk.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import nbclient
import nbformat

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent


def execute(path: pathlib.Path, timeout: int = 600) -> float:
    """Execute ``path`` in place; return the wall time in seconds."""
    nb = nbformat.read(path, as_version=4)
    os.environ["MPLBACKEND"] = "Agg"  # the kernel inherits it: no window, inline PNGs only
    t0 = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}}).execute()
    seconds = time.perf_counter() - t0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timestamps: noise in every diff
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str]) -> int:
    paths = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    if argv:
        paths = [p for p in paths if any(p.name.startswith(a) for a in argv)]
        if not paths:
            print(f"no notebook in {NOTEBOOK_DIR} starts with {argv}", file=sys.stderr)
            return 2
    for path in paths:
        seconds = execute(path)
        size = path.stat().st_size
        print(f"{path.name}: executed in {seconds:.1f} s, {size / 1024:.0f} KiB stored", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
