"""``benchmarks/manifold.py``: widths needed on data near a low-dimensional manifold.

Slow (``-m slow``): the script end to end with ``--quick`` (one tiny case, ~70 s). Default (its
fast twin): the compression itself is ``tests/test_many_inputs.py``'s; here the script's own
pieces in-process: its check, its data, the width scan, the summary and the plot on a result of
its own format.
"""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from quick_runs import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import manifold as M  # noqa: E402

import jaxcompress as jc  # noqa: E402


def test_check_passes_and_the_data_lie_on_the_manifold():
    lines = []
    assert M.check(jc, lines.append) == []
    assert "held-out max error" in lines[0]
    case = M.CASES["d64_m2_noise0.01"]
    data, iota = M.synthetic_data(case, 300, 100)
    (x, y), (xt, _) = data["train"], data["test"]
    assert x.shape == (300, 64) and y.shape == (300, 1) and xt.shape == (100, 64)
    clean, _ = M.synthetic_data(M.CASES["d64_m2"], 300, 100)
    # the same u, so the noisy inputs are the clean ones plus sigma-sized noise, same targets
    assert 0.005 < np.std(x - clean["train"][0]) < 0.02
    np.testing.assert_array_equal(y, clean["train"][1])
    assert abs(jc.profile.intrinsic_dimension(clean["train"][0]) - 2) < 0.5
    assert np.asarray(iota(np.zeros((1, 2)))).shape == (1, 64)


def test_scan_returns_the_first_width_within_budget():
    errors = {1: 5.0, 2: 3.0, 4: 0.9, 8: 0.5}
    found, curve = M.scan(lambda w: errors[w], 1.0, [1, 2, 4, 8])
    assert found == 4 and [c["width"] for c in curve] == [1, 2, 4]
    found, curve = M.scan(lambda w: errors[w], 0.1, [1, 2, 4, 8])
    assert found is None and len(curve) == 4


def _result():
    def methods(base):
        out = {}
        for i, name in enumerate(M.METHODS):
            w = base + 2 * i
            out[name] = {"width": w if name != "scratch" else None, "note": "",
                         "num_params": 100 * w,
                         "curve": [{"width": v, "task_error": 1e-3 * 2.0 ** (w - v),
                                    "seconds": 1.0} for v in (1, 2, 4, w)]}
        return out

    cases = {}
    for name in ("issue_d32_m2", "d64_m1", "d64_m2", "d64_m3", "d16_m2", "d256_m2",
                 "d64_m2_noise0.01", "d64_m2_noise0.03", "d64_m2_noise0.1", "digits"):
        case = M.CASES[name]
        cases[name] = {"case": case,
                       "teacher": {"width": case["width"], "test_error": 1e-3, "accuracy": None,
                                   "train_seconds": 1.0, "num_params": 1000},
                       "budget": 1.05e-3,
                       "profile": {"intrinsic_dim": 2.1, "sets": [{"rank": 30}, {"rank": 40}]},
                       "width_scale": {"1": 3}, "methods": methods(4)}
    return {"env": {"device": {"platform": "cpu", "host_cpus": 2, "host_cpu": "test"},
                    "load_avg_1_5_15": {"start": [1, 1, 1]}},
            "config": {"ratio": 1.05}, "cases": cases}


def test_summary_and_plot_of_a_result(tmp_path, capsys):
    result = _result()
    M.summarize(result)
    out = capsys.readouterr().out
    assert "issue_d32_m2 [256]" in out and "30,40" in out and "none" in out
    M.plot(json.loads(json.dumps(result)), tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 40_000


@pytest.mark.slow
def test_manifold_quick(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/manifold.py", "--quick", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    result = json.loads((tmp_path / "manifold_cpu_float64_quick.json").read_text())
    row = result["cases"]["d16_m1"]
    assert row["methods"]["data (OMP, fwd)"]["width"] < row["teacher"]["width"]
    assert math.isfinite(row["profile"]["intrinsic_dim"])
    assert (tmp_path / "manifold_cpu_float64_quick.png").stat().st_size > 20_000
