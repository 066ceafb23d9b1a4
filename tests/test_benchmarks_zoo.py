"""``benchmarks/zoo.py`` end to end with ``--quick``, and its building blocks.

Default: one model (``pinn_tanh``: train, trace, compress by two methods, polish, a from-scratch
network of the compressed widths, throughput) through the whole script, JSON and PNG; the torus
SDF and the generic Laplacian in-process. Slow twin (``-m slow``): every model (the script's
default ``--models``: chains and networks compressed group by group).
"""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from quick_runs import ROOT

import jaxcompress as jc

sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo  # noqa: E402
import zoo_models as Z  # noqa: E402


def _run(tmp_path, *extra):
    proc = subprocess.run(
        [sys.executable, "benchmarks/zoo.py", "--quick", "--out", str(tmp_path), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    jsons = sorted(tmp_path.glob("zoo_*_float32_quick.json"))
    assert len(jsons) == 1, sorted(p.name for p in tmp_path.iterdir())
    assert jsons[0].with_suffix(".png").stat().st_size > 0
    return json.loads(jsons[0].read_text())


def _check_model(result, name, hidden):
    r = result["models"][name]
    (row,) = r["rows"]
    assert row["k"] == 3 and row["hidden"] == hidden
    assert r["num_params"] == Z.num_params(Z.build(name, "small").params)
    methods = {"collocation"} | (set() if name in zoo.NON_ANALYTIC else {"derivative"})
    assert {c["method"] for c in row["candidates"]} == methods
    key = r["primary"]
    for part in ("compressed", "polished", "scratch"):
        assert np.isfinite(row[part][key]), (part, row[part])
    assert np.isfinite(r["teacher"][key])
    assert row["throughput"]["teacher"]["points_per_s"] > 0 and row["speedup"] > 0
    assert set(result["targets"][name][0]) == {"k", "params_ratio", "4x_fewer",
                                                "within_tolerance", "3x_faster",
                                                "no_worse_than_scratch"} | (
        {"3x_fewer"} if name in Z.TIED_MODELS else set())


def test_zoo_quick_one_model(tmp_path, user_broadcasting):
    """One model (``pinn_tanh``: a PINN, two methods, polish, from scratch, throughput) through
    the whole script, its trained networks kept in ``--cache``. The tied sets and ``g * v``
    kernels of the tied models are tests/test_trace_tied.py's, the float64 polish of a float32
    student tests/test_polish.py's and tests/test_trace_graphs.py's; every model runs with
    ``-m slow``."""
    cache = tmp_path / "cache"
    result = _run(tmp_path, "--models", "pinn_tanh", "--cache", str(cache))
    assert list(result["models"]) == ["pinn_tanh"] and result["quick"]
    _check_model(result, "pinn_tanh", [10, 10])
    assert len(list(cache.glob("pinn_tanh_*.pkl"))) == 2     # the teacher, from scratch


@pytest.mark.slow
def test_zoo_quick_all_models(tmp_path):
    result = _run(tmp_path)
    assert list(result["models"]) == list(Z.MODELS)
    for name in Z.MODELS:
        d_k = 10 if Z.TASKS[name] in ("image", "pinn") else 20
        _check_model(result, name, [min(d_k, w) for w in Z.build(name, "small").hidden])


def test_torus_sdf_and_laplacian():
    """The torus SDF is zero on its surface points and has unit gradient off it; the generic
    Laplacian (forward over reverse) is the trace of the Hessian."""
    surface = jax.jit(zoo.torus_surface, static_argnums=(1, 2))(
        jax.random.PRNGKey(0), 64, jnp.float64)
    np.testing.assert_allclose(jax.jit(zoo.torus_sdf)(surface), 0.0, atol=1e-12)
    pts = jax.random.uniform(jax.random.PRNGKey(1), (64, 3), jnp.float64, -1, 1)
    grads = jax.jit(jax.vmap(jax.grad(zoo.torus_sdf)))(pts)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(grads), axis=-1), 1.0, rtol=1e-10)
    model = Z.build("pinn_tanh", "small", hidden=[7, 5], dtype=jnp.float64)
    x = jax.random.uniform(jax.random.PRNGKey(2), (6, 2), jnp.float64)
    with jax.numpy_rank_promotion("allow"):
        got = jax.jit(lambda xs: zoo.laplacian(model.fn, model.params, xs))(x)
        ref = jax.jit(jax.vmap(lambda p: jnp.trace(jax.hessian(
            lambda q: model.fn(model.params, q[None])[0, 0])(p))))(x)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    assert set(zoo.methods_for("fourier_relu", 3)) == {"collocation"}


def test_operator_target_is_the_antiderivative_of_each_input_function():
    """``G(u_j)(y)`` is ``(n, functions)``, zero at y = 0, and its y-derivative is ``u_j(y)``
    (the sensors' formula ``c_j + sum_k a_jk cos(k pi s)``), for every function. Run with rank
    promotion raised (tests/conftest.py): a target broadcast to ``(n, n, functions)`` trained
    the zoo's first DeepONet."""
    coef, sensors = Z.operator_family()
    y = np.linspace(0.0, 1.0, 7)[:, None]
    g = np.asarray(jax.jit(Z.antiderivative)(coef, y))
    assert g.shape == (7, coef.shape[0])
    np.testing.assert_allclose(g[0], 0.0, atol=1e-15)
    dg = np.asarray(jax.jit(jax.vmap(jax.jacfwd(
        lambda t: Z.antiderivative(coef, t[None])[0])))(y))[:, :, 0]
    k = np.arange(1, coef.shape[1])

    def inputs(s):  # u_j(s) = c_j + sum_k a_jk cos(k pi s) at s (m, 1): (m, functions)
        return coef[:, :1].T + np.cos(np.pi * s * k) @ coef[:, 1:].T

    np.testing.assert_allclose(dg, inputs(np.asarray(y)), rtol=1e-12, atol=1e-12)
    # and the sensors are the same functions at 32 equispaced points
    s = np.linspace(0.0, 1.0, sensors.shape[1])[:, None]
    np.testing.assert_allclose(sensors, inputs(s).T, rtol=1e-12, atol=1e-12)


#: One model of each task (sdf: linen and Equinox; image; pinn; the operator, whose target was
#: the wrong shape) by default, each model built as it is trained (op by op, 0.1-1 s a model);
#: every model with -m slow.
SHAPE_DEFAULT = ("linen_compact", "eqx_mlp", "fourier_relu", "pinn_tanh", "deeponet",
                 "hamiltonian", "neural_ode")


@pytest.mark.usefixtures("user_broadcasting")
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[] if n in SHAPE_DEFAULT else [pytest.mark.slow])
    for n in Z.MODELS + Z.TIED_MODELS + Z.DERIVATIVE_MODELS + Z.ODE_MODELS])
def test_every_task_target_has_the_model_output_shape(name):
    """The zoo trains under rank promotion (user code adds biases by broadcasting), where a
    target of the wrong shape broadcasts silently (the first DeepONet target did): each model's
    output and its task's target have one shape, and the loss is one number."""
    model = Z.build(name, "small")
    task = zoo._TASKS[Z.TASKS[name]](zoo.QUICK)
    # shapes only (jax.eval_shape: nothing is compiled or run, the batch drawn included)
    batch = jax.eval_shape(lambda key: task.sample(key, 8), jax.random.PRNGKey(0))
    if task.name == "pinn":  # (interior, boundary) points; the residual is per interior point
        xi, _ = batch
        lap = jax.eval_shape(lambda p, x: zoo.laplacian(model.fn, p, x), model.params, xi)
        assert lap.shape == jax.eval_shape(zoo.PP.source, xi).shape == (8,)
    else:
        x, target = batch
        out = jax.eval_shape(model.fn, model.params, x)
        assert out.shape == target.shape == (8, model.d_out)
    assert jax.eval_shape(task.loss(model.fn), model.params, batch).shape == ()


@pytest.mark.usefixtures("user_broadcasting")
def test_hamiltonian_model_differentiates_inside_fn_and_its_target_is_the_pendulum():
    """The Hamiltonian network's ``fn`` is ``J grad H`` of its MLP (``jax.grad`` inside ``fn``):
    traced, the network is differentiated and its two hidden groups compressible; the task's
    target is ``J grad`` of the pendulum's ``H = p^2 / 2 + (1 - cos q)``."""
    model = Z.build("hamiltonian", "small", dtype=jnp.float64)
    x = jax.random.uniform(jax.random.PRNGKey(0), (5, 2), jnp.float64, -2, 2)
    g = np.asarray(jax.jit(jax.vmap(jax.grad(
        lambda xi: jnp.sum(Z.pinn_fn(model.params, xi[None])))))(x))
    np.testing.assert_allclose(jax.jit(model.fn)(model.params, x),
                               np.stack([g[:, 1], -g[:, 0]], -1), rtol=1e-12, atol=1e-12)
    net = jc.trace(model.fn, model.params, jnp.zeros((4, 2), jnp.float64))
    assert net.derivative
    assert [grp.width for grp in net.compressible] == [24, 24]
    gh = np.asarray(jax.jit(jax.vmap(jax.grad(lambda z: z[1] ** 2 / 2 + 1 - jnp.cos(z[0]))))(x))
    np.testing.assert_allclose(jax.jit(zoo.pendulum_field)(x), np.stack([gh[:, 1], -gh[:, 0]], -1),
                               rtol=1e-12)


def test_rk4_is_fourth_order_on_the_harmonic_oscillator():
    """``zoo_models.rk4`` against the closed form of ``(q, p)' = (p, -q)``: a rotation; the
    error at t = 1 falls 16x when the step halves."""
    y0 = jnp.array([[1.0, 0.0], [0.3, -0.5]], jnp.float64)
    exact = np.stack([y0[:, 0] * np.cos(1.0) + y0[:, 1] * np.sin(1.0),
                      -y0[:, 0] * np.sin(1.0) + y0[:, 1] * np.cos(1.0)], -1)
    errs = []
    for n in (10, 20):
        ys = np.asarray(Z.rk4(lambda y: jnp.stack([y[:, 1], -y[:, 0]], -1), y0, 1.0 / n, n))
        assert ys.shape == (n + 1, 2, 2)
        errs.append(np.max(np.abs(ys[-1] - exact)))
    assert 14 < errs[0] / errs[1] < 18, errs


@pytest.mark.usefixtures("user_broadcasting")
def test_neural_ode_field_is_the_models_mlp_and_traces_as_its_part():
    """The neural ODE's ``fn`` is its ``Func``'s MLP on a batch of states; its whole model
    integrates that field with RK4; ``trace_module(model, y, part=lambda m: m.func.mlp)`` finds
    the network ``jc.trace(fn, params)`` does; the task's target is the damped pendulum's
    state after one step."""
    pytest.importorskip("equinox", reason="equinox is not installed")
    model = Z.build("neural_ode", "small")
    y = jax.random.uniform(jax.random.PRNGKey(0), (5, 2), jnp.float32, -1, 1)
    field = np.asarray(jax.jit(model.fn)(model.params, y))
    np.testing.assert_allclose(field, np.asarray(jax.vmap(
        lambda v: model.module.func(0.0, v, None))(y)), rtol=1e-6, atol=1e-6)
    traj = np.asarray(model.module(y, dt=0.1, steps=3))
    np.testing.assert_allclose(traj, np.asarray(Z.rk4(lambda v: model.fn(model.params, v), y,
                                                      0.1, 3)), rtol=1e-5, atol=1e-6)
    x0 = jnp.zeros((4, 2), jnp.float32)
    part = jc.trace_module(model.module, x0, part=lambda m: m.func.mlp)
    net = jc.trace(model.fn, model.params, x0)
    assert part.layer_sizes() == net.layer_sizes() == [2, 24, 24, 2]
    task = zoo._TASKS["ode"](zoo.QUICK)
    x, nxt = task.sample(jax.random.PRNGKey(1), 4)
    want = Z.rk4(zoo.ode_field, x, zoo.ODE_DT / 100, 100)[-1]
    np.testing.assert_allclose(np.asarray(nxt), np.asarray(want), rtol=1e-4, atol=1e-5)
