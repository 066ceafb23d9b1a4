"""jc.polish: data-free distillation of a compressed student towards its teacher.

Compilations dominate the time here, so the tests share shapes: one teacher ``[2, 24, 24, 1]``,
one student from ``jc.compress`` (width 6), 60 steps, 4096 points wherever possible.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from programs import programs_compiled

import jaxcompress as jc
from jaxcompress.measure import error_estimate
from jaxcompress.polishing import DEFAULT_POINTS, LBFGS_MEMORY

ACT = "sigmoid"
DISK = jc.Ball(2, 1.0)
STEPS = 60  # 10 chunks of 6 steps
#: Adam at a learning rate far too large for a student this close to its teacher (the loss
#: rises); one object, so the tests that use it share its compilations
ADAM = optax.adam(0.3)
_error = jax.jit(functools.partial(error_estimate, activation=ACT))


def _net(seed, sizes, scale=1.0):
    """PyTorch-default uniform init with kernels times ``scale`` (NumPy: no compilation)."""
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1 / np.sqrt(a)
        out.append({"kernel": scale * rng.uniform(-bound, bound, (a, b)),
                    "bias": rng.uniform(-bound, bound, (b,))})
    return out


def _teacher(seed):
    # kernels 5x the init scale: less smooth, like a trained network (a plain random init is
    # matched to 1e-11 by collocation at width 6, leaving nothing to polish)
    return _net(seed, [2, 24, 24, 1], scale=5.0)


def _np_apply(params, x):
    h = np.asarray(x, np.float64)
    for layer in params[:-1]:
        h = 1 / (1 + np.exp(-(h @ np.asarray(layer["kernel"]) + np.asarray(layer["bias"]))))
    return h @ np.asarray(params[-1]["kernel"]) + np.asarray(params[-1]["bias"])


def _mse(a, b, x):
    return float(np.mean((_np_apply(a, x) - _np_apply(b, x)) ** 2))


def _compress(teacher):
    return jc.compress(teacher, jc.collocation(2), activation=ACT, domain=DISK)


@pytest.fixture(scope="module")
def run():
    teacher = _teacher(0)
    student, info = _compress(teacher)
    lines = []
    params, history = jc.polish(student, teacher, activation=ACT, domain=DISK, info=info,
                                steps=STEPS, progress=lines.append)
    return teacher, student, info, params, history, lines


def test_polish_lowers_the_loss_and_keeps_the_shapes(run):
    teacher, student, _, params, history, _ = run
    assert jc.layer_sizes(params) == jc.layer_sizes(student) == [2, 6, 6, 1]
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(student)
    for new, old in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(student),
                        strict=True):
        assert new.shape == old.shape and new.dtype == old.dtype
    assert history.loss.shape == (STEPS,) and history.chunk_loss.shape == (11,)
    # L-BFGS's line search only accepts decreasing steps: the loss at every chunk boundary falls
    assert np.all(np.diff(np.asarray(history.chunk_loss)) <= 0)
    assert history.chunk_loss[-1] < 0.1 * history.chunk_loss[0]
    assert int(history.best_step) == STEPS
    # the objective is the mean squared difference on the first DEFAULT_POINTS Sobol points
    x = np.asarray(DISK.sobol(DEFAULT_POINTS))
    np.testing.assert_allclose(history.chunk_loss[0], _mse(student, teacher, x), rtol=1e-9)
    np.testing.assert_allclose(history.chunk_loss[-1], _mse(params, teacher, x), rtol=1e-9)
    # ... and the student is closer to the teacher off those points too
    x_test = np.random.default_rng(5).uniform(-0.7, 0.7, (2000, 2))
    assert _mse(params, teacher, x_test) < 0.2 * _mse(student, teacher, x_test)
    assert history.error_after < 0.5 * history.error_before
    assert history.seconds > 0 and history.steps == STEPS and history.optimizer == "default"


def test_polish_refreshes_the_compression_record(run):
    teacher, student, info, params, history, _ = run
    after = _error(teacher, params, domain=DISK)
    np.testing.assert_allclose(history.error_after, after, rtol=1e-12)
    np.testing.assert_allclose(history.error_before, _error(teacher, student, domain=DISK),
                               rtol=1e-12)
    # compress records the same estimate for the student it made
    np.testing.assert_allclose(info.error_estimate, history.error_before, rtol=1e-12)
    assert float(history.info.error_estimate) == pytest.approx(float(after), rel=1e-12)
    assert float(info.error_estimate) > float(after)
    # the record says the weights were polished, and on which points the estimate was taken
    assert history.info.method == f"{info.method}; polished ({STEPS} steps on 4096 points)"
    assert history.info.estimated_on == info.estimated_on == "256 Sobol points of the domain"
    for f in dataclasses.fields(info):
        if f.name not in ("error_estimate", "method", "estimated_on"):
            assert getattr(history.info, f.name) is getattr(info, f.name)


def test_a_saved_polished_network_stores_its_polished_record(run, tmp_path):
    """Polish, save, load: the stored error estimate is a fresh measurement of the loaded
    network, not the compression's (issue 62: 0.401 stored for 0.00245)."""
    teacher, student, info, params, history, _ = run
    jc.save(tmp_path / "polished.jcz", params, activation=ACT, info=history.info)
    loaded = jc.load(tmp_path / "polished.jcz")
    fresh = _error(teacher, loaded.params, domain=DISK)
    assert float(loaded.info.error_estimate) == pytest.approx(float(fresh), rel=1e-12)
    assert float(fresh) < 0.5 * float(info.error_estimate)
    assert loaded.info.method.endswith("; polished (60 steps on 4096 points)")


def test_a_polished_traced_network_carries_its_polished_record(tmp_path):
    """A compressed traced network comes back from polish with its own record refreshed (no
    ``info=`` needed), and ``jc.save`` stores that: after loading, the record's error estimate
    is what ``jc.error_estimate`` measures afresh on the loaded network."""
    teacher = _teacher(0)

    def fn(params, x):
        for layer in params[:-1]:
            x = jax.nn.sigmoid(x @ layer["kernel"] + layer["bias"][None])
        return x @ params[-1]["kernel"] + params[-1]["bias"][None]

    net = jc.trace(fn, teacher, jnp.zeros((4, 2)))
    small, info = jc.compress(net, jc.collocation(2), domain=DISK)
    polished, history = jc.polish(small, net, domain=DISK, steps=20, points=512)
    assert polished.info is history.info
    assert float(polished.info.error_estimate) < 0.5 * float(info.error_estimate)
    assert polished.info.method == f"{info.method}; polished (20 steps on 512 points)"
    assert small.info is info                        # the student given is unchanged
    jc.save(tmp_path / "polished.jcz", polished)
    loaded = jc.load(tmp_path / "polished.jcz")
    fresh = jc.error_estimate(net, loaded, domain=DISK)
    np.testing.assert_allclose(loaded.info.error_estimate, fresh, rtol=1e-6)
    assert loaded.info.method == polished.info.method
    with pytest.raises(ValueError, match="info describes hidden widths"):
        jc.polish(small, net, domain=DISK, steps=2, points=64,
                  info=dataclasses.replace(info, layers=info.layers[:1]))


def _pinn(params, x):
    """A PINN package's convention: Python ints (a frequency, the input dimension) inside the
    params tree (cast: jc.trace passes them as int64 arrays and the tests' promotion is
    strict)."""
    h = x * jnp.asarray(params["omega"] / (15 * params["d_in"]), x.dtype)
    for layer in params["layers"][:-1]:
        h = jax.nn.sigmoid(h @ layer["kernel"] + layer["bias"][None])
    return h @ params["layers"][-1]["kernel"] + params["layers"][-1]["bias"][None]


def test_python_numbers_in_the_params_are_given_back_by_every_verb():
    """Leaves that are not floating-point arrays ("traced, never compressed, given back") are
    given back unchanged by polish, frontier's and compress_to_tolerance's polishing, and
    accepted by verify: only the float arrays are optimised (the ints once reached optax's line
    search, which cannot build its infinite start value in an integer dtype)."""
    params = {"layers": _teacher(0), "omega": 30, "d_in": 2}
    net = jc.trace(_pinn, params, jnp.zeros((4, 2)))
    small, info = jc.compress(net, jc.collocation(2), domain=DISK)
    polished, history = jc.polish(small, net, domain=DISK, steps=20, points=512)
    assert polished.params["omega"] == 30 and type(polished.params["omega"]) is int
    assert polished.params["d_in"] == 2 and type(polished.params["d_in"]) is int
    assert float(history.error_after) < 0.5 * float(history.error_before)
    for a, b in zip(polished.params["layers"], small.params["layers"], strict=True):
        assert a["kernel"].shape == b["kernel"].shape and a["kernel"].dtype == b["kernel"].dtype
    assert jc.verify(net, polished, domain=DISK, max_seconds=5).lower > 0
    settings = jc.PolishSettings(steps=6, points=128)
    front = jc.frontier(net, jc.collocation(2), domain=DISK, widths=[4], polish=settings)
    assert front.rows[0].error < front.rows[0].error_before
    found = jc.compress_to_tolerance(net, jc.Measured(method=jc.collocation, polish=settings),
                                     domain=DISK, eps=0.5)
    assert found.params["omega"] == 30 and type(found.params["d_in"]) is int


def test_the_default_optimizer_runs_on_one_vector_a_users_on_the_tree(run):
    """The default L-BFGS optimises the student's leaves joined in one vector (a smaller
    program: methods.md); the same optimizer given by the user runs on the tree it expects, to
    the same student up to the order of the sums."""
    teacher, student, _, params, history, _ = run
    lbfgs, seen = optax.lbfgs(memory_size=LBFGS_MEMORY), []

    def init(p):
        seen.append(jax.tree_util.tree_structure(p))
        return lbfgs.init(p)

    users = optax.GradientTransformationExtraArgs(init, lbfgs.update)
    tree_params, tree_history = jc.polish(student, teacher, activation=ACT, domain=DISK,
                                          steps=STEPS, optimizer=users)
    assert seen == [jax.tree_util.tree_structure(student)]
    assert tree_history.optimizer == "user" and history.optimizer == "default"
    np.testing.assert_allclose(tree_history.chunk_loss, history.chunk_loss, rtol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(tree_params), jax.tree_util.tree_leaves(params),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


def test_another_step_count_compiles_only_the_loop_and_only_for_another_chunk_length(run):
    """L-BFGS's default object does not depend on ``steps`` (keyed by it, a polish of 55 steps
    after one of 60 compiled its first program and its loop again): the same chunk length
    compiles nothing, another compiles the loop alone. The result is the one of that many
    steps."""
    teacher, student, *_ = run
    (params, history), names = programs_compiled(lambda: jc.polish(
        student, teacher, activation=ACT, domain=DISK, steps=STEPS - 5))   # chunks of 6 steps
    assert names == [] and history.steps == STEPS - 5 and np.shape(history.loss) == (STEPS - 5,)
    (_, history), names = programs_compiled(lambda: jc.polish(
        student, teacher, activation=ACT, domain=DISK, steps=STEPS + 10))  # chunks of 7
    assert names == ["jit(_run_chunk)"] and history.steps == STEPS + 10


def test_polish_reports_progress(run, capsys):
    teacher, student, _, _, history, lines = run
    assert len(lines) == 10 and lines[-1].startswith(f"polish: step {STEPS}/{STEPS}  loss")
    assert f"{float(history.chunk_loss[-1]):.3e}" in lines[-1]
    jc.polish(student, teacher, activation=ACT, domain=DISK, steps=STEPS, progress=True)
    assert capsys.readouterr().err.count("polish: step") == 10


def test_given_points_and_a_parameterized_domain(run):
    teacher, student, *_ = run
    x = np.random.default_rng(6).uniform(-1, 1, (DEFAULT_POINTS, 2))
    _, history = jc.polish(student, teacher, activation=ACT, domain=DISK, points=x, steps=STEPS)
    assert history.n_points == DEFAULT_POINTS
    np.testing.assert_allclose(history.chunk_loss[0], _mse(student, teacher, x), rtol=1e-9)

    # an analytic map of a 2-D parameter box onto part of the disk: points are iota(Sobol of U)
    def iota(u):
        return 0.7 * jnp.stack([jnp.sin(u[0]) * jnp.cos(u[1]), jnp.sin(u[1])])

    box = jc.Box([-1.0, -1.0], [1.0, 1.0])
    dom = jc.Parameterization(iota, box)
    params, history = jc.polish(student, teacher, activation=ACT, domain=dom, steps=STEPS)
    u = np.asarray(box.sobol(DEFAULT_POINTS))
    x = 0.7 * np.stack([np.sin(u[:, 0]) * np.cos(u[:, 1]), np.sin(u[:, 1])], axis=1)
    np.testing.assert_allclose(history.chunk_loss[0], _mse(student, teacher, x), rtol=1e-9)
    np.testing.assert_allclose(history.chunk_loss[-1], _mse(params, teacher, x), rtol=1e-9)
    assert history.chunk_loss[-1] < 0.5 * history.chunk_loss[0]
    assert history.error_after < history.error_before


def test_minibatches_never_return_a_worse_student(run):
    teacher, student, *_ = run
    # the loss rises, and polish hands back the best chunk boundary instead
    params, history = jc.polish(student, teacher, activation=ACT, domain=DISK, steps=20,
                                optimizer=ADAM, batch=64)
    assert history.batch == 64 and history.optimizer == "user"
    losses = np.asarray(history.chunk_loss)
    assert losses.max() > 10 * losses[0]
    best = int(np.argmin(losses))
    assert int(history.best_step) == 2 * best
    x = np.asarray(DISK.sobol(DEFAULT_POINTS))
    assert _mse(params, teacher, x) == pytest.approx(losses[best], rel=1e-9)
    assert _mse(params, teacher, x) <= _mse(student, teacher, x)


def _vmap_equals_two_calls(optimizer, batch, steps):
    teachers = [_teacher(1), _teacher(2)]
    students = [_compress(t)[0] for t in teachers]

    def one(s, t):
        return jc.polish(s, t, activation=ACT, domain=DISK, steps=steps, optimizer=optimizer,
                         batch=batch)

    def stack(trees):
        return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *trees)

    params, history = jax.vmap(one)(stack(students), stack(teachers))
    assert history.loss.shape == (2, steps) and history.seconds is None
    for i in range(2):
        p_i, h_i = one(students[i], teachers[i])
        # the whole trajectory, step by step, not only the returned (best) parameters
        np.testing.assert_allclose(history.loss[i], h_i.loss, rtol=1e-7)
        assert not np.allclose(h_i.loss[-1], h_i.loss[0])
        for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(p_i),
                        strict=True):
            np.testing.assert_allclose(a[i], b, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(history.chunk_loss[i], h_i.chunk_loss, rtol=1e-7)


def test_vmap_over_two_teachers_equals_two_calls():
    _vmap_equals_two_calls(ADAM, 64, 20)


@pytest.mark.slow
def test_vmap_over_two_teachers_equals_two_calls_lbfgs():
    # the default optimizer (L-BFGS with its zoom line search, a while loop): compiling its
    # batched loop takes ~20 s on 2 cores, hence the Adam twin above in the default run
    _vmap_equals_two_calls(None, None, STEPS)


@pytest.fixture(scope="module")
def pair():
    return _net(1, [2, 3, 3, 1]), _net(0, [2, 8, 8, 1])


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"student": [2, 3, 3, 2]}, r"student maps 2 -> 2 but the teacher maps 2 -> 1"),
        ({"student": [3, 3, 3, 1]}, r"student maps 3 -> 1 but the teacher maps 2 -> 1"),
        ({"steps": 0}, r"steps must be a positive int, got 0"),
        ({"steps": -5}, r"steps must be a positive int, got -5"),
        ({"steps": 2.5}, r"steps must be a positive int, got 2.5"),
        ({"domain": jc.Ball(3, 1.0)},
         r"polish: the domain has dim 3; the network takes inputs of size 2"),
        ({"domain": jc.Parameterization(lambda u: jnp.concatenate([u, u]), jc.Ball(2, 1.0))},
         r"polish: the domain maps to inputs of size 4; the network takes inputs of size 2"),
        ({"points": np.zeros((10, 3))}, r"points has shape \(10, 3\); expected \(N, 2\)"),
        ({"points": np.full((10, 2), np.nan)}, r"points contains NaN"),
        ({"points": 0}, r"points must be a positive int"),
        ({"batch": 0}, r"batch must be None or a positive int, got 0"),
    ],
)
def test_bad_input_is_refused(pair, change, pattern):
    student, teacher = pair
    kwargs = {"activation": ACT, "domain": DISK, "steps": 10}
    if "student" in change:
        student = _net(1, change.pop("student"))
    kwargs.update(change)
    with pytest.raises(ValueError, match=pattern):
        jc.polish(student, teacher, **kwargs)


def test_bad_types_are_refused(pair):
    student, teacher = pair
    with pytest.raises(TypeError, match="polish: domain must be a jaxcompress.Ball, "):
        jc.polish(student, teacher, activation=ACT, domain=(0.0, 1.0))
    with pytest.raises(TypeError, match="progress must be None, a bool or a callable"):
        jc.polish(student, teacher, activation=ACT, domain=DISK, progress="yes")
    stack = [{k: np.stack([v, v]) for k, v in layer.items()} for layer in student]
    with pytest.raises(ValueError, match="wrap polish in jax.vmap"):
        jc.polish(stack, teacher, activation=ACT, domain=DISK)
    bad = [dict(layer) for layer in teacher]
    bad[1]["kernel"] = np.where(np.eye(8, 8, dtype=bool), np.nan, bad[1]["kernel"])
    with pytest.raises(ValueError, match="teacher: layer 1 kernel contains NaN"):
        jc.polish(student, bad, activation=ACT, domain=DISK)


def test_a_float64_loop_for_a_float32_student(run):
    """dtype=float64 polishes a float32 student in float64 (64-bit types turned on for the loop
    when they are off) and hands back float32: the same run as the float64 fixture, to float32
    rounding of the start."""
    teacher, student, _, params, history, _ = run
    s32, t32 = (jax.tree.map(lambda a: np.asarray(a, np.float32), p) for p in (student, teacher))
    with jax.enable_x64(False):
        got, hist = jc.polish(s32, t32, activation=ACT, domain=DISK, steps=STEPS,
                              dtype=jnp.float64)
        assert not jax.config.jax_enable_x64 and jnp.zeros(()).dtype == jnp.float32
        with pytest.raises(ValueError, match="dtype=float64 under jax.jit"):
            jax.jit(lambda s: jc.polish(s, t32, activation=ACT, domain=DISK, steps=2,
                                        dtype=jnp.float64)[0])(s32)
    assert hist.dtype == "float64" and history.dtype == "float64"
    assert {a.dtype for a in jax.tree.leaves(got)} == {np.dtype(np.float32)}
    assert {hist.loss.dtype, hist.chunk_loss.dtype, hist.error_after.dtype} == {
        np.dtype(np.float32)}
    np.testing.assert_allclose(hist.chunk_loss[-1], history.chunk_loss[-1], rtol=0.05)
    assert float(hist.error_after) < 0.5 * float(hist.error_before)
    with pytest.raises(ValueError, match="dtype must be a floating dtype"):
        jc.polish(s32, t32, activation=ACT, domain=DISK, steps=2, dtype=jnp.int32)
