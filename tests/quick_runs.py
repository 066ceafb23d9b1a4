"""Benchmark scripts run end to end with ``--quick``, started together (a helper of the tests).

Each script is mostly single-threaded XLA compilation, so as many run side by side as the test
process has cores: on a test worker pinned to one core (``tests/conftest.py``) they run one after
another, since five of Fig 1-4's quick runs took 41 s side by side on one core and 31 s one after
another (2-core EPYC, 2026-12-07). Used by ``tests/test_benchmarks_figures.py`` and
``tests/test_benchmarks_workloads.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_together(runs: dict[str, tuple[str, list[str]]], out: Path, *,
                 timeout: float) -> dict[str, tuple[int, str, Path]]:
    """Run ``benchmarks/<script>.py --quick --out <out>/<name> <extra>`` for every
    ``name: (script, extra)``, as many at once as this process has cores; returns
    ``{name: (exit status, log, its out folder)}``.

    A run past ``timeout`` seconds is killed; its log says so.
    """
    results, todo = {}, list(runs.items())
    at_once = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count() or 1)
    while todo:
        wave, todo = todo[:at_once], todo[at_once:]
        procs = {
            name: subprocess.Popen(
                [sys.executable, f"benchmarks/{script}.py", "--quick", "--out", str(out / name),
                 *extra],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for name, (script, extra) in wave
        }
        for name, proc in procs.items():
            try:
                log, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                log, _ = proc.communicate()
                log += f"\n[timed out after {timeout:.0f} s]"
            results[name] = (proc.returncode, log, out / name)
    return results
