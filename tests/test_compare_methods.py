"""The method-comparison benchmark runs end to end (``--quick``) and writes its JSON and PNG."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_compare_methods_quick(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/compare_methods.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "correctness check" in proc.stdout and "FAILED" not in proc.stdout
    path = tmp_path / "compare_methods_cpu_quick.json"
    if not path.exists():  # run on an accelerator
        (path,) = tmp_path.glob("compare_methods_*_quick.json")
    assert path.with_suffix(".png").stat().st_size > 0
    # the quick teachers were cached for reuse
    assert sorted(p.name for p in (tmp_path / "teachers").glob("*.npz")) == [
        "teacher_quick_seed0.npz", "teacher_quick_seed1.npz"]
    result = json.loads(path.read_text())
    t1 = result["table1"]
    assert t1["widths"] == [1, 3, 6]
    assert set(t1["summary"]) >= {"derivative", "derivative+maxvol", "taylor_multi",
                                  "collocation", "data", "weight_norm+lstsq", "random+lstsq"}
    for name, summary in t1["summary"].items():
        assert len(summary["first_width_per_seed"]) == 2, name
        assert all(r > 0 for r in summary["median_ratio_per_width"]), name
        assert all(s >= 0 for s in summary["median_sup_per_width"]), name
        for row in t1["per_seed"][name].values():
            assert row["width"] == [1, 3, 6]
    assert all(t["test_mse"] > 0 for t in t1["teachers"])
    assert result["targets"]["best_data_free_method"] in t1["summary"]
    assert set(result["fig2"]["methods"]) == set(t1["summary"])
