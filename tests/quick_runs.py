"""Benchmark scripts run end to end with ``--quick``, started together (a helper of the tests).

Each script is mostly single-threaded XLA compilation, so on two cores running them side by side
roughly halves the wall time. Used by ``tests/test_benchmarks_figures.py`` and
``tests/test_benchmarks_workloads.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_together(runs: dict[str, tuple[str, list[str]]], out: Path, *,
                 timeout: float) -> dict[str, tuple[int, str, Path]]:
    """Run ``benchmarks/<script>.py --quick --out <out>/<name> <extra>`` for every
    ``name: (script, extra)`` at once; returns ``{name: (exit status, log, its out folder)}``.

    A run past ``timeout`` seconds is killed; its log says so.
    """
    procs = {
        name: subprocess.Popen(
            [sys.executable, f"benchmarks/{script}.py", "--quick", "--out", str(out / name),
             *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, (script, extra) in runs.items()
    }
    results = {}
    for name, proc in procs.items():
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
            log += f"\n[timed out after {timeout:.0f} s]"
        results[name] = (proc.returncode, log, out / name)
    return results
