"""The polishing benchmark and the two coordinate-network workloads.

Slow (``-m slow``): the three scripts run end to end with ``--quick``, started together (each is
mostly single-threaded XLA compilation, 30-90 s on two loaded cores), and each test checks one
script's exit status, its JSON and PNG, and properties of its numbers;
``notebooks/04_coordinate_networks.ipynb`` runs the same quick configurations.

Default (their fast twin): the workloads' building blocks in-process on tiny sizes: the image and
its Fourier map, the PINN's Laplacian against nested ``jax.hessian``, its boundary sampler, the
teacher cache, and every compression method of the comparison, polish included
(``tests/test_polish.py`` covers polish on a parameterized domain).
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from quick_runs import ROOT, run_together

import jaxcompress as jc

SCRIPTS = ("polish_table1", "image_field", "pinn_poisson")
sys.path.insert(0, str(ROOT / "benchmarks"))

import _workloads as W  # noqa: E402
import image_field as IF  # noqa: E402
import pinn_poisson as PP  # noqa: E402


def test_image_and_fourier_map():
    img, coords, rgb = IF.load_image(8)
    assert img.shape == (75, 64, 3) and img.dtype == np.float32
    assert 0.0 <= img.min() < 0.1 and 0.9 < img.max() <= 1.0
    assert coords.shape == (75 * 64, 2) and rgb.shape == (75 * 64, 3)
    np.testing.assert_allclose(coords.min(0), [-1, -1])
    np.testing.assert_allclose(coords.max(0), [1, 1])
    # row-major: pixel (i, j) of the image is row i * 64 + j, at x = coords[., 0] (column j)
    np.testing.assert_array_equal(rgb[64 + 5], img[1, 5])
    assert coords[64 + 5, 0] == pytest.approx(-1 + 2 * 5 / 63)
    gamma = IF.fourier_map(4, 3.0)
    f = np.asarray(jax.jit(gamma)(np.array([[0.3, -0.2], [0.0, 0.0]])))
    assert f.shape == (2, 8)
    np.testing.assert_allclose(f[1], [0, 0, 0, 0, 1, 1, 1, 1], atol=1e-15)
    np.testing.assert_allclose(f[0, :4] ** 2 + f[0, 4:] ** 2, 1.0, rtol=1e-12)


def test_pinn_laplacian_and_boundary_points():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 7, 5, 1])
    x = np.random.default_rng(1).uniform(0, 1, (6, 2))

    @jax.jit
    def both(params, x):
        def u(p):
            return jc.apply(params, p, activation=PP.ACTIVATION)[0]

        ref = jax.vmap(lambda p: jnp.trace(jax.hessian(u)(p)))(x)
        # the exact solution solves the PDE: -Delta u* = f (a check of the source term)
        exact = jax.vmap(lambda p: jnp.trace(jax.hessian(PP.exact)(p)))(x)
        return PP.laplacian(params, x), ref, -exact, PP.source(x)

    lap, ref, lap_exact, f = both(params, x)
    np.testing.assert_allclose(lap, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lap_exact, f, rtol=1e-10)
    b = np.asarray(jax.jit(PP.boundary_points, static_argnums=(1, 2))(
        jax.random.PRNGKey(2), 400, jnp.float64))
    assert np.all((b >= 0) & (b <= 1))
    sides = [b[:, 1] == 0, b[:, 0] == 1, b[:, 1] == 1, b[:, 0] == 0]
    assert np.all(np.any(sides, axis=0))
    assert all(side.sum() > 50 for side in sides)   # all four sides are sampled
    assert np.abs(np.sin(np.pi * b[:, 0]) * np.sin(np.pi * b[:, 1])).max() < 1e-12


def test_teacher_cache(tmp_path):
    # (W.train itself runs in every quick script: the slow tests below)
    calls = []

    def make():
        calls.append(1)
        params = [{"kernel": np.full((1, 3), float(len(calls))), "bias": np.zeros(3)},
                  {"kernel": np.ones((3, 1)), "bias": np.zeros(1)}]
        return params, {"train_seconds": 1.0}

    path = tmp_path / "t.npz"
    params, record = W.load_or_train(path, {"a": 1}, make, log=lambda m: None)
    assert record == {"train_seconds": 1.0, "config": {"a": 1}}
    again, _ = W.load_or_train(path, {"a": 1}, make, log=lambda m: None)
    assert len(calls) == 1  # cached
    np.testing.assert_array_equal(again[0]["kernel"], params[0]["kernel"])
    assert again[0]["kernel"].dtype == np.float32
    other, _ = W.load_or_train(path, {"a": 2}, make, log=lambda m: None)
    assert len(calls) == 2 and other[0]["kernel"][0, 0] == 2.0  # another configuration retrains


def test_every_method_compresses_and_polish_improves_collocation():
    # the shapes and settings of tests/test_polish.py (run before this file in one process), so
    # the collocation and polish compilations are shared
    disk = jc.Ball(2, 1.0)
    rng = np.random.default_rng(0)
    teacher = [{"kernel": 5.0 * rng.uniform(-1, 1, (a, b)) / np.sqrt(a),
                "bias": rng.uniform(-1, 1, (b,)) / np.sqrt(a)}
               for a, b in ((2, 24), (24, 24), (24, 1))]
    res = W.compress_all(jc, teacher, activation="sigmoid", order=2, domain=disk,
                         polish_kwargs={"steps": 60})
    assert set(res) == set(W.METHODS)
    x = np.asarray(disk.sample(jax.random.PRNGKey(4), 500))

    def rms(p):
        d = jc.apply(p, x, activation="sigmoid") - jc.apply(teacher, x, activation="sigmoid")
        return float(np.sqrt(np.mean(np.asarray(d) ** 2)))

    for name, r in res.items():
        assert jc.layer_sizes(r["params"]) == [2, 6, 6, 1], name
        assert r["seconds"] > 0 and r["compress_seconds"] > 0
        assert r["method"].startswith("derivative" if name == "derivative" else "collocation")
    # polish started from the collocation student (compressed once) and moved it closer
    assert res["collocation+polish"]["compress_seconds"] == res["collocation"]["seconds"]
    assert rms(res["collocation+polish"]["params"]) < 0.5 * rms(res["collocation"]["params"])
    hist = res["collocation+polish"]["polish"]
    assert hist["steps"] == 60 and hist["chunk_loss"][-1] < hist["chunk_loss"][0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("workloads")
    return run_together({name: (name, []) for name in SCRIPTS}, out, timeout=400)


def _load(runs, name):
    code, log, out = runs[name]
    assert code == 0, f"{name} exited {code}\n{log}"
    files = sorted(p.name for p in out.iterdir())
    (path,) = out.glob(f"{name}_*_float64_quick.json")
    assert path.with_suffix(".png").stat().st_size > 0, files
    assert "# device:" in log and "matmul precision HIGHEST" in log
    result = json.loads(path.read_text())
    assert result["quick"] is True and result["checks"]["passed"]
    assert result["env"]["load_avg_1_5_15"]["start"] is not None
    return result, log, out


@pytest.mark.slow
def test_polish_table1_quick(runs):
    result, log, out = _load(runs, "polish_table1")
    assert "perturbed copy" in log and "FAILED" not in log
    assert sorted(p.name for p in (out / "teachers").glob("*.npz")) == [
        "teacher_quick_seed0.npz", "teacher_quick_seed1.npz"]
    assert result["widths"] == [6]
    for row in result["rows"]:
        hist = row["polished"]["history"]
        # polishing never returns a student worse on its points than the start
        assert hist["chunk_loss"][-1] <= hist["chunk_loss"][0]
        assert row["polished"]["error_estimate"] <= row["plain"]["error_estimate"]
        assert row["polished"]["seconds"] > 0 and row["plain"]["seconds"] > 0
    for key in ("plain", "polished"):
        assert len(result["summary"][key]["first_width_per_seed"]) == 2
    assert set(result["optimizer_comparison"]["configs"]) == {
        "lbfgs m100, 4096 fixed (default)", "adam cosine 1e-3, batch 1024 of 65536"}
    assert result["paper"]["first_width_per_seed"] == [66, 21, 36, 28, 21]


@pytest.mark.slow
def test_image_field_quick(runs):
    result, _, out = _load(runs, "image_field")
    assert result["image_shape"] == [75, 64, 3]
    assert sorted(p.name for p in (out / "teachers").glob("*.npz")) == [
        "image_fourier_quick.npz", "image_plain_quick.npz"]
    for kind, t in result["teachers"].items():
        assert t["psnr"] > 8, kind   # a fitted field, not noise (a constant image gives ~6 dB)
        rows = {r["method"]: r for r in result["rows"] if r["teacher"] == kind}
        assert set(rows) == {"derivative", "collocation", "collocation+polish", "weight_norm"}
        for r in rows.values():
            assert r["sizes"][1:-1] == [10] * (len(t["sizes"]) - 2)
        # polishing moves the student towards the teacher
        assert rows["collocation+polish"]["rms_vs_teacher"] <= rows["collocation"][
            "rms_vs_teacher"]
        tim = result["timing"][kind]
        assert tim["teacher_ms_per_mpixel"] > 0 and all(t > 0 for t in tim["student_ms_per_mpixel"])


@pytest.mark.slow
def test_pinn_poisson_quick(runs):
    result, _, out = _load(runs, "pinn_poisson")
    assert (out / "teachers" / "pinn_poisson_quick.npz").is_file()
    t = result["teacher"]
    assert t["rel_l2"] < 0.5 and t["residual_rms"] > 0
    rows = {r["method"]: r for r in result["rows"]}
    assert set(rows) == {"derivative", "collocation", "collocation+polish", "weight_norm"}
    for r in rows.values():
        assert r["width"] == 10 and r["rel_l2"] > 0 and r["residual_rms"] > 0
    assert rows["collocation+polish"]["polish"]["error_after"] <= rows["collocation+polish"][
        "polish"]["error_before"]
