"""``benchmarks/frontier.py``: the search on the Table 1 teachers and zoo models.

Slow (``-m slow``): the script end to end with ``--quick`` (a tiny Table 1 teacher, a small
zoo PINN). Default (its fast twin): the search itself is ``tests/test_searches.py``'s; here the
script's own pieces in-process: the zoo tolerances as metrics, the committed zoo sweep it
compares with, its targets, summary and plot on a result of its own format.
"""

import json
import subprocess
import sys

import jax.numpy as jnp
import pytest
from quick_runs import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import frontier as F  # noqa: E402

import jaxcompress as jc  # noqa: E402


def test_zoo_tolerances_are_metrics_and_the_sweep_is_read_back():
    class Task:
        name = "sdf"

        @staticmethod
        def metrics(f):
            out = f(jnp.ones((2, 3)))
            return {"surface": float(out[0, 0]), "off": float(out[1, 0]), "sum": 0.0}

    metric, eps, _ = F.zoo_metric(Task, {"surface": 2.0, "off": 4.0}, jnp.float32)
    assert eps == 1.1 and metric(lambda x: jnp.array([[3.0], [2.0]])) == 1.5
    Task.name = "image"
    Task.metrics = staticmethod(lambda f: {"psnr": float(f(jnp.ones((1, 2)))[0, 0])})
    metric, eps, _ = F.zoo_metric(Task, {"psnr": 20.0}, jnp.float32)
    assert metric(lambda x: jnp.full((1, 1), 20.0)) == pytest.approx(1e-2)
    assert eps == pytest.approx(10 ** (-1.95))       # within 0.5 dB of the teacher's PSNR
    sweep = F.zoo_sweep("pinn_tanh", F._within("pinn", {"rel_l2": 0.00147}))
    assert sweep["best"]["num_params"] == 2809 and sweep["best"]["k"] == 7
    assert sweep["seconds"] > 30 and sweep["files"] == ["zoo_cpu_float32.json"]
    assert F.zoo_sweep("no_such_model", lambda m: True) is None


def test_summary_targets_and_plot_of_a_result(tmp_path, capsys):
    teacher = jc.init_mlp(jnp.zeros((2,), jnp.uint32), [2, 8, 1])
    front = jc.frontier(teacher, jc.collocation, activation="tanh", domain=jc.Ball(2, 1.0),
                        orders=[1, 2], batch=None)
    rows = [{"seed": s, "teacher_val_mse": 1e-3,
             "collocation": {"num_params": 20 + s, "widths": [3], "test_ratio": 0.9,
                             "seconds": 10.0, "uniform": {"num_params": 40}},
             "scratch": {"test_ratio": 3.0}} for s in range(3)]
    rows[0]["collocation"]["frontier"] = front.to_dict()
    result = {"env": {"device": {"platform": "cpu", "host_cpus": 2, "host_cpu": "test"},
                      "load_avg_1_5_15": {"start": [1, 1, 1]},
                      },
              "table1": {"seeds": rows, "summary": {"collocation": {
                  "num_params": [20, 21, 22], "median_num_params": 21,
                  "median_uniform_num_params": 40, "all_keep_task": True,
                  "total_seconds": 30.0}}},
              "zoo": {"models": {"pinn_tanh": {
                  "task": "pinn", "metric": "rel_l2", "eps": 2e-3, "metric_value": 1.5e-3,
                  "num_params": 300, "teacher_params": 33537, "seconds": 100.0,
                  "frontier": front.to_dict(), "zoo_sweep": {"best": {"num_params": 2809},
                                                             "seconds": 150.0},
                  "seconds_to_match_sweep": 40.0, "scratch": {"metric_value": 3e-3}}}}}
    result["targets"] = F.targets(result)
    assert result["targets"]["table1_median_params_below_109"]
    assert result["targets"]["pinn_tanh_no_larger_than_zoo_sweep"]
    assert result["targets"]["pinn_tanh_matched_sweep_faster"]
    F.summarize(result)
    out = capsys.readouterr().out
    assert "seed 0: uniform   40, search   20 [3] (test 0.900x" in out
    assert "zoo sweep 2,809 params (150 s; matched after 40 s)" in out
    F.plot(json.loads(json.dumps(result)), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 20_000


@pytest.mark.slow
def test_frontier_quick(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/frontier.py", "--quick", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    (path,) = tmp_path.glob("frontier_cpu_float64_quick.json")
    assert path.with_suffix(".png").stat().st_size > 0
    result = json.loads(path.read_text())
    assert result["checks"]["passed"] and result["quick"]
    (seed,) = result["table1"]["seeds"]
    assert seed["collocation"]["val_ratio"] <= F.RATIO and "scratch" in seed
    r = result["zoo"]["models"]["pinn_tanh"]
    assert r["metric_value"] <= r["eps"] and r["num_params"] < r["teacher_params"]
    assert r["zoo_sweep"] is None and "scratch" in r
    assert "## check:" in proc.stdout and "ok" in proc.stdout
