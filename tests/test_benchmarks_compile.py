"""``benchmarks/compile_latency.py`` end to end with ``--quick``, and its span arithmetic.

Default: the fastest case (``compress``: ``jc.compress`` of the nnx field, a second call, a new
order, a second process on the warm persistent cache) through the whole script, JSON and PNG.
Slow twin (``-m slow``): every case (the command line and the "how small" search as well).
"""

import json
import subprocess
import sys

import pytest
from quick_runs import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import compile_latency as CL  # noqa: E402


def _run(tmp_path, *extra):
    proc = subprocess.run(
        [sys.executable, "benchmarks/compile_latency.py", "--quick", "--out", str(tmp_path),
         *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    jsons = sorted(tmp_path.glob("compile_latency_*_float64_quick.json"))
    assert len(jsons) == 1, sorted(p.name for p in tmp_path.iterdir())
    assert jsons[0].with_suffix(".png").stat().st_size > 0
    return json.loads(jsons[0].read_text())


def _check_case(case):
    """Programs counted, compile inside the wall, nothing compiled again where nothing new."""
    bars = {b["call"] if b["process"] == "cold" else b["process"]: b for b in case["bars"]}
    first, second, warm = bars["first"], bars["second"], bars["warm"]
    assert first["programs"] > 0 and first["compiled"] > 0 and first["compile_s"] > 0
    for b in case["bars"]:
        assert 0 <= b["compile_s"] <= b["wall_s"], b
        assert 0 <= b["compile_s"] + b["trace_lower_s"] <= b["wall_s"] * 1.001, b
        assert b["compiled"] + b["cache_hits"] == b["programs"], b
    # the same call again in the same process compiles nothing
    assert second["programs"] == 0 and second["compiled"] == 0, second
    # a second process finds every program in the persistent cache
    assert warm["programs"] > 0 and warm["compiled"] == 0, warm
    assert warm["cache_hits"] == warm["programs"], warm


def test_compile_latency_quick_compress(tmp_path):
    result = _run(tmp_path, "--cases", "compress")
    assert result["quick"] and result["checks"]["passed"], result["checks"]
    assert result["config"]["cases"] == ["compress"]
    assert CL.COMPILE_EVENT in result["events"]["seen"]
    (case,) = result["cases"]
    _check_case(case)
    new = next(b for b in case["bars"] if b["call"] == "new_order")
    assert new["programs"] >= 0 and new["compile_s"] <= new["wall_s"]
    checks = [c["check"] for c in case["processes"]["cold"]["calls"] if "check" in c]
    assert [c["order"] for c in checks] == [6, 6, 5]
    assert checks[0]["params"] < 1185    # Field(32) has 96 + 1,056 + 33 parameters


@pytest.mark.slow
def test_compile_latency_quick_all_cases(tmp_path):
    result = _run(tmp_path)
    assert [c["case"] for c in result["cases"]] == list(CL.CASE_NAMES)
    assert result["checks"]["passed"], result["checks"]
    for case in result["cases"]:
        _check_case(case)
    cli = result["cases"][0]
    assert all(b["startup_s"] > 0 for b in cli["bars"] if b["call"] == "first")


def test_span_union():
    """Nested and overlapping spans count once; trace time inside a compile is not counted."""
    assert CL._union([]) == 0.0
    assert CL._union([(0.0, 2.0), (0.5, 1.0), (1.5, 3.0), (4.0, 5.0)]) == pytest.approx(4.0)
    row = CL.Recorder.summary(
        "x", 0.0, 10.0, 10.0,
        [(CL.TRACE_EVENTS[0], 0.0, 4.0, "jit(f)"),       # outer trace
         (CL.TRACE_EVENTS[0], 1.0, 2.0, "jit(g)"),       # nested trace
         (CL.COMPILE_EVENT, 1.5, 3.0, "jit(h)"),         # compiled while tracing
         (CL.TRACE_EVENTS[1], 4.0, 5.0, "jit(f)"),       # lowering
         (CL.COMPILE_EVENT, 5.0, 8.0, "jit(f)")],
        [(CL.CACHE_HIT_EVENT, 7.9)])
    assert row["programs"] == 2 and row["cache_hits"] == 1 and row["compiled"] == 1
    assert row["programs_compiled"] == {"jit(h)": 1}
    assert row["compile_s"] == pytest.approx(4.5)
    assert row["trace_lower_s"] == pytest.approx(3.5)
    assert row["compile_share"] == pytest.approx(0.45)
