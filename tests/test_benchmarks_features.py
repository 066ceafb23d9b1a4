"""The feature and verification benchmarks run end to end (``--quick``) and write their JSON and
PNG (``-m slow``: the feature benchmark's first step, the three feature backends agreeing, is
tests/test_features.py's ``test_backends_agree`` in the default run, the verifier is
tests/test_verify.py's, and their JSON and plot writers are the other benchmarks'
(tests/test_benchmarks_figures.py))."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_features_quick(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_features.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    jsons = sorted(tmp_path.glob("bench_features_*_float64_quick.json"))
    assert len(jsons) == 1, sorted(p.name for p in tmp_path.iterdir())
    assert jsons[0].with_suffix(".png").stat().st_size > 0
    result = json.loads(jsons[0].read_text())
    agreement = result["agreement"]
    assert agreement["passed"] and agreement["tolerance"] == 1e-8
    for backend in ("jet", "jacfwd"):
        diffs = agreement["rel_diff"][backend]
        assert sorted(diffs) == ["2", "3", "4"]
        assert all(d is not None and 0 <= d < 1e-8 for d in diffs.values()), diffs


@pytest.mark.slow
def test_verify_benchmark_quick(tmp_path):
    """benchmarks/verify.py --quick: its soundness check first, then the bracket timed (the
    verifier itself is tests/test_verify.py's in the default run)."""
    proc = subprocess.run(
        [sys.executable, "benchmarks/verify.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    (path,) = sorted(tmp_path.glob("verify_*_quick.json"))
    result = json.loads(path.read_text())
    assert result["soundness"]["passed"] and all(result["targets"].values())
    assert path.with_suffix(".png").stat().st_size > 0
