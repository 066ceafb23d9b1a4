"""The paper-figure benchmarks (Fig 1-4), the method comparison and the suites, run end to end.

Each test checks one ``--quick`` run: its exit status, its JSON and PNG, and one property of its
numbers. The runs a session needs (those of its selected tests) are started by one fixture, as
many at once as the test process has cores (``quick_runs.run_together``).

The default run starts five: Fig 1 (with two rank thresholds), Fig 3, Fig 4, the accelerator
suite's CPU steps and the method comparison on two of its methods (the paper's and the best
data-free one) without the Fig 2 network.
Four more are slow twins (``-m slow``), each with a fast one:

* ``fig2_deep`` shares the error-sweep loop, parser and writer of ``fig1_single_layer``
  (``_common.run_error_sweep``); the Fig 2 network itself is compressed in
  ``tests/test_compress.py::test_fig2_network_float64``;
* ``compare_methods`` on all twelve methods and the Fig 2 network: the two-method run below
  (same script, same code path), and every feature map, selector and layer order the twelve
  combine in ``tests/test_methods.py::test_every_method_runs_under_jit``;
* ``width_independence``:
  ``tests/test_defaults.py::test_float32_error_does_not_grow_with_the_width``;
* ``input_dimension``: ``tests/test_sharding.py`` (sharded vs one device, memory per device) and
  the memory estimate's tests.
"""

import importlib.util
import json
import math

import numpy as np
import pytest
from quick_runs import ROOT, run_together

#: run name -> (script, extra arguments)
RUNS = {
    # fig1 also runs a second rank threshold, so the two-variant code path is exercised
    "fig1_single_layer": ("fig1_single_layer", ["--rtol", "default,1e-4"]),
    "fig2_deep": ("fig2_deep", []),
    "fig3_post_training": ("fig3_post_training", []),
    "fig4_runtime": ("fig4_runtime", []),
    "compare_methods": ("compare_methods", []),
    "compare_methods_four": ("compare_methods", [
        "--methods", *(FOUR_METHODS := ["derivative", "collocation+omp/fwd"]), "--no-fig2"]),
    "width_independence": ("width_independence", []),
    # the suite's own steps; the scripts it starts are the ones above
    "accelerator_suite": ("accelerator_suite", ["--steps", "correctness,roofline,stages"]),
    "input_dimension": ("input_dimension", []),
}
DTYPES = {"fig1_single_layer": "float32", "fig2_deep": "float32",
          "fig3_post_training": "float64", "fig4_runtime": "float64"}


def _run_of(item) -> str:
    """The run a test of this module checks (from its ``run`` marker)."""
    return item.get_closest_marker("run").args[0]


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    wanted = sorted({_run_of(item) for item in request.session.items
                     if item.module is request.module})
    return run_together({name: RUNS[name] for name in wanted}, out, timeout=300)


def _load(runs, name):
    code, log, out = runs[name]
    assert code == 0, f"{name} exited {code}\n{log}"
    stem = f"{name}_cpu_{DTYPES[name]}_quick"
    files = sorted(p.name for p in out.iterdir())
    assert (out / f"{stem}.json").is_file(), files
    assert (out / f"{stem}.png").stat().st_size > 0, files
    assert "# device:" in log and "matmul precision HIGHEST" in log
    result = json.loads((out / f"{stem}.json").read_text())
    assert result["device"]["platform"] == "cpu" and result["quick"] is True
    assert result["paper"]["reports"] and result["env"]["load_avg_1_5_15"]["start"] is not None
    return result


@pytest.mark.run("fig1_single_layer")
def test_fig1_quick(runs):
    result = _load(runs, "fig1_single_layer")
    cfg = result["config"]
    assert cfg["rtol"] == ["default", "1e-4"]
    for variant in cfg["rtol"]:
        for act in ("sigmoid", "gelu"):
            for r in cfg["radii"]:
                errs = [x["sup_error"] for x in sorted(
                    (x for x in result["rows"] if x["activation"] == act and x["radius"] == r
                     and x["rtol_spec"] == variant), key=lambda x: x["k"])]
                assert len(errs) == cfg["kmax"] + 1
                # derivative matching: more orders, smaller error (geometric decay)
                assert errs[-1] < 0.5 * errs[0], (variant, act, r, errs)


@pytest.mark.run("fig2_deep")
@pytest.mark.slow
def test_fig2_quick(runs):
    result = _load(runs, "fig2_deep")
    cfg = result["config"]
    for act in ("sigmoid", "gelu"):
        for order in ("backward", "forward"):
            for r in cfg["radii"]:
                sel = sorted((x for x in result["rows"] if x["activation"] == act
                              and x["layer_order"] == order and x["radius"] == r),
                             key=lambda x: x["k"])
                assert [x["width"] for x in sel] == [1, 3][: cfg["kmax"] + 1]
                assert sel[-1]["sup_error"] < sel[0]["sup_error"], (act, order, r)
    # the paper: backward and forward order are indistinguishable
    comp = result["comparison"]["default"]["orders_indistinguishable"]
    assert comp["max_abs_log10_fwd_over_bwd"] < 0.5


@pytest.mark.run("fig3_post_training")
def test_fig3_quick(runs):
    result = _load(runs, "fig3_post_training")
    cfg = result["config"]
    assert result["checks"]["passed"]
    table = result["table1"]["per_seed"]
    # Table 1: one row per seed, with the certificate's numbers and a parameter reduction
    assert [r["seed"] for r in table] == cfg["seeds"]
    for r in table:
        assert r["rho_1"] > 0 and r["q_hat_2"] > 0 and r["teacher_test_mse"] > 0
        assert r["param_reduction"] is None or r["param_reduction"] > 1
        # more derivative orders, a better student: the MSE ratio drops from width 1
        assert 0 < r["ratio_at_max_width"] < r["ratio_k0"], r
    for t in result["teachers"]:
        assert len(t["certificate"]) == len(cfg["sizes"]) - 2
        assert {"assumption4", "rho", "q_hat", "rho_pole", "r_violate"} <= set(
            t["certificate"][0])
    # the Table 1 / Appendix G columns next to the paper's
    side = result["comparison"]["table1_diagnostics"]
    assert side["q_hat_2"]["paper"] == [7.87, 7.00, 14.46, 8.32, 13.81]
    assert side["r_violate_2"]["paper"] == [0.300, 0.287, 0.248, 0.290, 0.261]
    assert side["rho_1"]["ours"] == [r["rho_1"] for r in table]
    for r in table:  # a violating radius exists exactly when q-hat_2 >= 1
        assert (r["r_violate_2"] is not None) == (r["q_hat_2"] >= 1)
        assert r["rho_1"] <= r["rho_1_bias_free"]
    widths = [x["width"] for x in result["controls"] if x["seed"] == cfg["seeds"][0]]
    assert widths == cfg["widths"] == [1, 3, 6, 10][: cfg["kmax"] + 1]
    assert result["paper"]["first_width_per_seed"] == [66, 21, 36, 28, 21]


@pytest.mark.run("fig4_runtime")
def test_fig4_quick(runs):
    result = _load(runs, "fig4_runtime")
    assert result["checks"]["passed"]
    rows = result["rows"]
    assert {r["sweep"] for r in rows} == {"width", "depth"}
    for r in rows:
        assert r["check_passed"] and r["sup_error"] < 1e-2
        assert r["warm_median_s"] > 0 and r["first_call_s"] >= r["warm_median_s"]
        assert len(r["warm_s"]) == result["config"]["repeats"]
    # the roofline is taken at the median of the run's measurements (start + one per network)
    samples = result["machine_samples"]
    assert len(samples) == len(rows) + 1 and samples[0] == result["machine_start"]
    speeds = sorted(m["matmul_flops_per_s"] for m in samples)
    assert math.isclose(result["machine"]["matmul_flops_per_s"], float(np.median(speeds)))
    assert result["machine_fastest"]["matmul_flops_per_s"] == speeds[-1]
    for r in rows:
        # the fastest speeds give the smallest roofline: the largest ratio
        assert r["warm_over_best_roofline"] >= r["warm_over_roofline"] * (1 - 1e-12)
        assert r["warm_over_best_roofline"] >= r["warm_over_adjacent_roofline"] * (1 - 1e-12)
        assert math.isclose(r["warm_over_roofline"] * r["roofline_s"], r["warm_median_s"])


def _check_compare_methods(runs, name, methods, fig2: bool):
    code, log, out = runs[name]
    assert code == 0, f"{name} exited {code}\n{log}"
    assert "correctness check" in log and "FAILED" not in log
    path = out / "compare_methods_cpu_quick.json"
    if not path.exists():  # run on an accelerator
        (path,) = out.glob("compare_methods_*_quick.json")
    assert path.with_suffix(".png").stat().st_size > 0
    # the quick teachers were cached for reuse
    assert sorted(p.name for p in (out / "teachers").glob("*.npz")) == [
        "teacher_quick_seed0.npz", "teacher_quick_seed1.npz"]
    result = json.loads(path.read_text())
    t1 = result["table1"]
    assert t1["widths"] == [1, 3]   # --quick: k = 0, 1
    assert set(t1["summary"]) == set(methods)
    for method, summary in t1["summary"].items():
        assert len(summary["first_width_per_seed"]) == 2, method
        assert all(r > 0 for r in summary["median_ratio_per_width"]), method
        assert all(s >= 0 for s in summary["median_sup_per_width"]), method
        for row in t1["per_seed"][method].values():
            assert row["width"] == [1, 3]
    assert all(t["test_mse"] > 0 for t in t1["teachers"])
    assert result["targets"]["best_data_free_method"] in t1["summary"]
    if fig2:
        assert set(result["fig2"]["methods"]) == set(t1["summary"])
    else:
        assert result["fig2"] is None


@pytest.mark.run("compare_methods")
@pytest.mark.slow
def test_compare_methods_quick(runs):
    # every method of the table (the method comparison; its JSON has its own layout)
    spec = importlib.util.spec_from_file_location("_bench_common", ROOT / "benchmarks/_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    methods = list(common.METHODS)
    assert len(methods) == 12
    _check_compare_methods(runs, "compare_methods", methods, fig2=True)


@pytest.mark.run("compare_methods_four")
def test_compare_methods_four_quick(runs):
    _check_compare_methods(runs, "compare_methods_four", FOUR_METHODS, fig2=False)


@pytest.mark.run("width_independence")
@pytest.mark.slow
def test_width_independence_quick(runs):
    code, log, out = runs["width_independence"]
    assert code == 0, f"width_independence exited {code}\n{log}"
    assert "# device:" in log and "matmul precision HIGHEST" in log
    result = json.loads((out / "width_independence_cpu_quick.json").read_text())
    assert (out / "width_independence_cpu_quick.png").stat().st_size > 0
    rows = result["rows"]
    assert {r["dtype"] for r in rows} == {"float32", "float64"}
    assert {r["family"] for r in rows} == {"one layer", "three layers"}
    for r in rows:
        # every width is compressed to the same D_k with the dtype-only default threshold
        assert r["rtol_spec"] == "default" and 0 < r["sup_error"] < 1e-2
        assert 0 < r["error_estimate"] <= r["sup_error"] * (1 + 1e-6)


@pytest.mark.run("accelerator_suite")
def test_accelerator_suite_quick(runs):
    code, log, out = runs["accelerator_suite"]
    assert code == 0, f"accelerator_suite exited {code}\n{log}"
    result = json.loads((out / "accelerator_suite_cpu_quick.json").read_text())
    assert (out / "accelerator_suite_cpu_quick_roofline.png").stat().st_size > 0
    steps = result["steps"]
    assert set(steps) == {"correctness", "roofline", "stages"} and result["complete"]
    assert steps["correctness"]["status"] == "ok" and not steps["correctness"]["failures"]
    for row in steps["roofline"]["rows"]:
        assert row["warm_median_s"] > 0 and row["warm_over_roofline"] > 0.1  # a real bound
        assert row["cost"]["flops"] > 0 and row["error_estimate"] < 1e-2
    # the stage breakdown (compress_stages.py, run inside the suite's process)
    assert steps["stages"]["status"] == "ok"
    stages = json.loads((out / "compress_stages_cpu_float32_quick.json").read_text())
    assert (out / "compress_stages_cpu_float32_quick.png").stat().st_size > 0
    assert stages["complete"] and not stages["failures"]
    assert [r["sizes"] for r in stages["rows"]] == [[2, 48, 48, 2], [2, 32, 32, 32, 32, 2]]
    for r in stages["rows"]:
        for stage in ("features", "select pivoted_qr", "select greedy_gs",
                      "compress pivoted_qr", "compress greedy_gs"):
            assert 0 < r[stage]["warm_s"] and 0 < r[stage]["first_s"]
        assert r["select pivoted_qr"]["rank"] == r["select greedy_gs"]["rank"] > 0
        assert r["compress pivoted_qr"]["widths"][1] <= 10  # D_3 = 10 for two inputs


@pytest.mark.run("input_dimension")
@pytest.mark.slow
def test_input_dimension_quick(runs):
    code, log, out = runs["input_dimension"]
    assert code == 0, f"input_dimension exited {code}\n{log}"
    result = json.loads((out / "input_dimension_cpu_quick.json").read_text())
    rows = result["rows"]
    assert [r["m"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["D_k"] == __import__("math").comb(r["m"] + 2, r["m"])
        assert r["one"]["sup_error"] < 1e-2 and r["one"]["device_bytes"] > 0
        # the forced four CPU devices: the same widths, error within 2x (the sharded selection)
        assert r["sharded"]["widths"] == r["one"]["widths"]
        assert r["sharded"]["sup_error"] <= 2 * r["one"]["sup_error"] + 1e-12
