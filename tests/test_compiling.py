"""The compression program compiles fast on a CPU for a small teacher (jaxcompress.compiling):
the same network to rounding, the choice overridable, never inside an enclosing trace."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from programs import TRACED, named_events, programs_compiled

import jaxcompress as jc
from jaxcompress import compiling
from jaxcompress.driver import run_jit
from jaxcompress.flax import MLP, LinenMLP

SIZES = [2, 32, 32, 1]


def _compress(params):
    return jc.compress(params, jc.derivative_matching(3), activation="sigmoid",
                       domain=jc.Ball(2, 1.0))


def _grew(fn):
    """Which of run_jit's two programs a call of ``fn`` compiled: ``(full, fast)`` increments."""
    full, fast = run_jit.full._cache_size(), run_jit.fast._cache_size()
    out = fn()
    return out, (run_jit.full._cache_size() - full, run_jit.fast._cache_size() - fast)


def test_a_small_teacher_compiles_fast_and_gives_the_same_network(monkeypatch):
    # a shape no other test compiles: each call below must compile its own program
    params = jc.init_mlp(jax.random.PRNGKey(31), [2, 23, 19, 1])
    monkeypatch.setenv(compiling.ENV, "auto")
    (fast, fast_info), grew = _grew(lambda: _compress(params))
    assert grew == (0, 1)
    monkeypatch.setenv(compiling.ENV, "off")
    (full, full_info), grew = _grew(lambda: _compress(params))
    assert grew == (1, 0)
    assert jc.layer_sizes(fast) == jc.layer_sizes(full)
    assert [int(li.rank) for li in fast_info.layers] == [int(li.rank) for li in full_info.layers]
    for a, b in zip(fast, full, strict=True):
        np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(fast_info.error_estimate, full_info.error_estimate, rtol=1e-6)


def test_the_choice_follows_the_size_the_mode_and_the_trace(monkeypatch):
    leaves = jax.tree.leaves(jc.init_mlp(jax.random.PRNGKey(0), SIZES))   # 1,185 parameters
    monkeypatch.setenv(compiling.ENV, "auto")
    assert run_jit.choose(leaves) is run_jit.fast
    monkeypatch.setattr(compiling, "FAST_MAX_PARAMS", 1000)
    assert run_jit.choose(leaves) is run_jit.full
    monkeypatch.setenv(compiling.ENV, "on")
    assert run_jit.choose(leaves) is run_jit.fast
    monkeypatch.setenv(compiling.ENV, "off")
    monkeypatch.setattr(compiling, "FAST_MAX_PARAMS", 10**9)
    assert run_jit.choose(leaves) is run_jit.full
    monkeypatch.setenv(compiling.ENV, "auto")
    seen = []
    jax.jit(lambda ls: seen.append(run_jit.choose(ls)) or 0.0)(leaves)
    assert seen == [run_jit.full]     # inside the caller's jit: the caller's compile


def test_compress_under_jit_is_the_caller_s_program(monkeypatch):
    monkeypatch.setenv(compiling.ENV, "auto")
    params = jc.init_mlp(jax.random.PRNGKey(32), SIZES)
    eager, _ = _compress(params)
    # the teacher traced, or a closure constant while only the radius is traced: JAX refuses
    # compiler options on a nested jit, so both must take the caller's program
    small = jax.jit(lambda p: _compress(p)[0])(params)
    closed = jax.jit(lambda r: jc.compress(params, jc.derivative_matching(3),
                                           activation="sigmoid", domain=jc.Ball(2, r))[0])(1.0)
    for got in (small, closed):
        for a, b in zip(got, eager, strict=True):
            np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=1e-8, atol=1e-12)


def test_a_bad_mode_is_refused(monkeypatch):
    monkeypatch.setenv(compiling.ENV, "sometimes")
    with pytest.raises(ValueError, match="JAXCOMPRESS_FAST_COMPILE must be one of auto, on, off"):
        _compress(jc.init_mlp(jax.random.PRNGKey(0), SIZES))


def test_the_measurement_has_its_own_limit(monkeypatch):
    from jaxcompress import measure

    monkeypatch.setenv(compiling.ENV, "auto")
    small = jc.init_mlp(jax.random.PRNGKey(0), SIZES)
    assert measure._sup_error.choose(small) is measure._sup_error.fast
    monkeypatch.setattr(compiling, "FAST_MAX_PARAMS_MEASURE", 1000)
    assert measure._sup_error.choose(small) is measure._sup_error.full
    assert run_jit.choose(jax.tree.leaves(small)) is run_jit.fast   # the compression's limit
    with pytest.raises(ValueError, match="no size limit named 'NOPE'"):
        compiling.FastOnSmallCPU(lambda x: x, limit="NOPE")


def test_fast_first_switches_to_xla_defaults_after_its_budget(monkeypatch):
    """FastFirst: the fast program while its calls after the first have run under the budget,
    then XLA's defaults (the same values); off / on / inside a trace as FastOnSmallCPU."""
    monkeypatch.setenv(compiling.ENV, "auto")
    x = jax.numpy.linspace(0.0, 1.0, 64)
    ref = np.asarray(np.tanh(np.linspace(0.0, 1.0, 64)) * 2.0)
    f = compiling.FastFirst(lambda v: jax.numpy.tanh(v) * 2.0)
    f.budget_s = 0.0
    np.testing.assert_allclose(f(x), ref, rtol=1e-12)     # first call: compiles, not counted
    assert (f.fast._cache_size(), f.full._cache_size(), f.spent) == (1, 0, 0.0)
    np.testing.assert_allclose(f(x), ref, rtol=1e-12)     # counted: over a budget of 0
    assert f.spent > 0.0 and f.full._cache_size() == 0
    np.testing.assert_allclose(f(x), ref, rtol=1e-12)     # now XLA's defaults
    assert f.full._cache_size() == 1
    g = compiling.FastFirst(lambda v: v + 1.0)
    monkeypatch.setenv(compiling.ENV, "off")
    g(x)
    assert (g.fast._cache_size(), g.full._cache_size()) == (0, 1)
    monkeypatch.setenv(compiling.ENV, "on")
    g.spent = 1e9
    g(x)
    assert g.fast._cache_size() == 1                      # "on": always fast
    monkeypatch.setenv(compiling.ENV, "auto")
    h = compiling.FastFirst(lambda v: v * 3.0)
    jax.jit(lambda v: h(v))(x)
    assert h.fast._cache_size() == 0                      # inside the caller's jit: its compile


def test_host_numbers_compile_nothing_and_trace_checks_in_one_program(user_broadcasting):
    """A concrete domain's points and validity come from NumPy (no program per shape), jc.trace
    proves fn's batch check from its program or runs it as one program, not one per operation,
    and small(x) is one program."""
    ball = jc.Ball(3, 0.7, center=[0.1, 0.0, -0.2])
    box = jc.Box([-1.0, 0.0], [0.5, 2.0])
    _, names = programs_compiled(lambda: (ball.sobol(37), ball.valid(), box.nodes(29),
                                           box.valid()))
    assert names == []

    def fn(p, x):   # a few operations, each a program when run op by op
        h = jax.numpy.tanh(x @ p[0]["kernel"] + p[0]["bias"])
        return jax.numpy.sin(h) @ p[1]["kernel"] * 0.5 + p[1]["bias"]

    params = jc.init_mlp(jax.random.PRNGKey(5), [2, 13, 3])
    net, names = programs_compiled(lambda: jc.trace(fn, params, np.zeros((5, 2))))
    assert names == []   # acts on each example alone, proven from its program: nothing run

    def flipped(p, x):   # a reversal (rev) is not among the proof's rules: measured instead
        return fn(p, x[:, ::-1])

    _, names = programs_compiled(lambda: jc.trace(flipped, params, np.zeros((5, 2))))
    assert len(names) == 1, names
    # small(x) of its compression and of a linen module's: one program, then none
    small, _ = jc.compress(net, jc.collocation(2), domain=jc.Ball(2, 1.0))
    module = LinenMLP(features=(11, 1), activation="tanh", param_dtype=np.float64)
    x = np.zeros((6, 2))
    mod = jc.trace_module(module, x, variables=module.init(jax.random.PRNGKey(0), x))
    mod_small, _ = jc.compress(mod, jc.collocation(2), domain=jc.Ball(2, 1.0))
    for s in (small, mod_small):
        for expected in (1, 0):
            _, names = programs_compiled(lambda s=s: s(np.full((7, 2), 0.1)))
            assert len(names) == expected, names


def test_the_public_verbs_compile_only_their_own_programs():
    """With JAX's caches emptied (once: emptying them per test made the suite recompile what
    later tests share), each verb compiles its own programs only, none op by op (each of these
    compiled eager programs before, listed): the proof's domain numbers and float64 check
    (stage x2, convert_element_type), error_estimate's gap (subtract, abs, max, where), a
    concrete data set's finiteness check (isfinite, all, where), polish(dtype=float64)'s casts
    (a convert per leaf shape; committed arrays made the loop compile twice) and
    small.module's check (a program per operation of the rebuilt module). Values are checked
    against JAX's where the computation moved to NumPy."""
    from flax import nnx

    ball = jc.Ball(2, 0.8)
    teacher = jc.init_mlp(jax.random.PRNGKey(7), [2, 9, 9, 1], dtype=np.float64)
    small, _ = jc.compress(teacher, jc.collocation(2), activation="tanh", domain=ball)
    x = np.asarray(ball.sobol(23))
    nnx_model = MLP([2, 12, 12, 1], activation="tanh", rngs=nnx.Rngs(1), param_dtype=np.float64)
    linen = LinenMLP(features=(12, 12, 1), activation="tanh", param_dtype=np.float64)
    modules = [(jc.trace_module(nnx_model, x), MLP),
               (jc.trace_module(linen, x, variables=linen.init(jax.random.PRNGKey(1), x)),
                LinenMLP)]
    modules = [(jc.compress(m, jc.collocation(2), domain=ball)[0], cls) for m, cls in modules]
    s32, t32 = (jax.tree.map(lambda a: jax.device_put(np.asarray(a, np.float32)), p)
                for p in (small, teacher))
    jax.clear_caches()

    res, names = programs_compiled(lambda: jc.verify(teacher, small, activation="tanh",
                                                     domain=jc.Box([-0.3, -0.2], [0.4, 0.5]),
                                                     order=2, tol=0.5))
    assert res.status == "converged"
    assert set(names) <= {"jit(bound)", "jit(values)", "jit(ascent)"}, names

    est, names = programs_compiled(
        lambda: jc.error_estimate(teacher, small, activation="tanh", domain=ball))
    assert set(names) == {"jit(_evaluate_jit)"}, names
    pts = jc.measure.error_points(ball, dtype=np.float64)
    gap = jax.numpy.max(jax.numpy.abs(jc.apply(teacher, pts, activation="tanh")
                                      - jc.apply(small, pts, activation="tanh")))
    assert est.dtype == gap.dtype and float(est) == float(gap) > 0
    traced = jax.jit(lambda a, b: jc.error_estimate(a, b, activation="tanh", domain=ball))
    np.testing.assert_allclose(float(traced(teacher, small)), float(est), rtol=1e-10)

    _, names = programs_compiled(lambda: jc.data_profile(teacher, x, activation="tanh"))
    assert names == ["jit(_evaluate_jit)"], names
    assert np.array_equal(np.asarray(jc.features.DataFeatures(x=x)._data(np.float64)), x)
    bad = x.copy()   # concrete, it is refused; traced, it makes every feature NaN
    bad[3, 1] = np.inf
    poisoned = jax.jit(lambda v: jc.features.DataFeatures(x=v)._data(np.float64))(bad)
    assert np.all(np.isnan(np.asarray(poisoned)))

    (got, hist), names = programs_compiled(lambda: jc.polish(
        s32, t32, activation="tanh", domain=ball, steps=4, points=64, dtype=jnp.float64))
    assert "jit(convert_element_type)" not in names, names
    assert names.count("jit(_run_chunk)") == 1, names
    assert {a.dtype for a in jax.tree.leaves(got)} == {np.dtype(np.float32)}
    assert hist.loss.dtype == np.float32 and not any(a.committed for a in jax.tree.leaves(got))

    for mod_small, cls in modules:
        module, names = programs_compiled(lambda s=mod_small: s.module)
        assert isinstance(module, cls)
        assert len(names) <= 2, names

    # the per-layer order search's orders and the certificate's float64 parameters come from
    # the host (jnp.asarray compiled a program per shape: stage x4, convert_element_type), and
    # init_mlp reads JAX's default float from the configuration (jnp.zeros(()) compiled one)
    res, names = programs_compiled(lambda: jc.compress_to_tolerance(
        teacher, jc.MeasuredOrders(), activation="tanh", domain=ball, eps=1e-4))
    assert res.measured_error <= 1e-4
    assert not {"jit(stage)", "jit(convert_element_type)"} & set(names), names
    _, names = programs_compiled(lambda: jc.init_mlp(jax.random.PRNGKey(9), [2, 5, 1]))
    assert "jit(convert_element_type)" not in names and "jit(broadcast_in_dim)" not in names

    # a bare jax.vmap of jc.compressor: one program (it ran op by op: 145 for [2, 16, 16, 1])
    stack = jax.tree.map(lambda a: np.stack([np.asarray(a)] * 2), teacher)
    compress = jc.compressor(teacher, jc.collocation(2), activation="tanh", domain=ball)
    (smalls, _), names = programs_compiled(lambda: jax.vmap(compress)(stack))
    # (and JAX's own broadcast of an output the batch does not change, at most)
    assert names[0] == "jit(compress_params)" and set(names[1:]) <= {"jit(broadcast_in_dim)"}
    for a, b in zip(jax.tree.leaves(smalls), jax.tree.leaves(small), strict=True):
        np.testing.assert_allclose(a[1], b, rtol=1e-9, atol=1e-12)


def test_select_columns_called_eagerly_is_one_program():
    """An eager ``select_columns`` compiles one program per shape and configuration (op by op
    it compiled 29 for pivoted QR of a 28 x 64 matrix, 42 for greedy Gram-Schmidt), with the
    selector's own choice; a selector that is a pytree (a random choice's key) is traced; a
    bare ``jax.vmap`` of it is one program too (it ran op by op: 79)."""
    z = np.random.default_rng(3).standard_normal((17, 23))   # a shape no other test uses
    kernel = np.random.default_rng(4).standard_normal((23, 2))
    for sel in ("pivoted_qr", "greedy_gs", jc.MaxVol(delta=0.05), jc.OMP(),
                jc.select.RandomChoice(jax.random.PRNGKey(5))):
        got, names = programs_compiled(lambda s=sel: jc.select.select_columns(
            z, 7, s, out_kernel=kernel))
        # (once, in a full run, OMP compiled nothing here: jit's cache handed it pivoted QR's
        # program, their pytree structures comparing equal; see test_select.py's
        # test_selectors_of_different_classes_have_different_structures)
        assert len(names) == 1, (sel, names)
        # the selector itself in a program of the caller's (op by op it compiled ~100 more)
        obj = jc.select.as_selector(sel)
        want = jax.jit(lambda a, k, obj=obj: obj(a, 7, out_kernel=k))(z, kernel)
        np.testing.assert_array_equal(np.asarray(got.perm), np.asarray(want.perm))
        np.testing.assert_allclose(np.asarray(got.coef), np.asarray(want.coef), atol=1e-10)
    batch = np.stack([z, 2 * z])
    got, names = programs_compiled(lambda: jax.vmap(
        lambda a: jc.select.select_columns(a, 7, "greedy_gs"))(batch))
    # (and JAX's own broadcast of an output the batch does not change, at most)
    assert names[0] == "jit(_select)" and set(names[1:]) <= {"jit(broadcast_in_dim)"}, names
    assert got.perm.shape == (2, 23)


def test_a_selector_refuses_missing_inputs_before_tracing():
    """OMP and the weight-norm baseline need the next layer's kernel: ``select_columns``
    refuses a call without it (or with one of the wrong size) before tracing anything (the
    check ran only inside the compiled program's trace; once, in a full run, the refusal went
    missing there)."""
    z = np.random.default_rng(6).standard_normal((20, 30))

    def refusal(sel, **kwargs):
        try:
            jc.select.select_columns(z, 3, sel, **kwargs)
        except ValueError as e:
            return str(e)
        return None

    for sel, name in (("omp", "OMP"), (jc.OMP(), "OMP"), (jc.select.WeightNorm(), "WeightNorm")):
        for kernel, shown in ((None, "None"), (np.zeros((29, 2)), r"\(29, 2\)")):
            message, traced = named_events(lambda s=sel, k=kernel: refusal(s, out_kernel=k),
                                           TRACED)
            assert message is not None and re.match(
                rf"{name}: needs out_kernel of shape \(30, t\).*, got {shown}$", message), message
            assert traced == [], traced


def test_a_traced_activation_is_matched_and_checked_in_one_program_each(user_broadcasting):
    """A traced network whose activation is no registered one (here sin(7.25 u)) is compared
    with every registered activation in one compiled program (per registry and dtype: they were
    evaluated one by one, op by op, ~17 programs) and its jet expansion checked in one (~16 op
    by op), once per activation and dtype in a process: a second network with the same
    activation compiles nothing of either."""
    from jaxcompress.graph import match

    def net(p, x):
        return jnp.sin(7.25 * (x @ p[0]["kernel"] + p[0]["bias"])) @ p[1]["kernel"]

    params = jc.init_mlp(jax.random.PRNGKey(4), [2, 6, 1], dtype=np.float64)
    x = np.zeros((3, 2))
    match._reference_values.cache_clear()
    match._JET_CHECKED.pop(("traced:sin(mul(7.25, u))", "float64"), None)
    traced, names = programs_compiled(lambda: jc.trace(net, params, x).activation)
    assert traced.name == "traced:sin(mul(7.25, u))"
    assert names.count("jit(values)") == 1 and names.count("jit(<lambda>)") == 1, names
    assert not {"jit(tanh)", "jit(logistic)", "jit(erfc)"} & set(names), names
    # the values it compared are those of the registered functions
    refs = match._reference_values(tuple((n, jc.activations.get_activation(n).fn)
                                         for n in jc.activations.registered_activations()),
                                   "float64")
    np.testing.assert_allclose(refs["tanh"], np.tanh(match.MATCH_GRID), rtol=1e-15)
    again, names = programs_compiled(lambda: jc.trace(net, params, x).activation)
    assert again.name == traced.name
    assert "jit(values)" not in names and "jit(<lambda>)" not in names, names


def test_the_profile_report_sums_tests_and_call_sites(tmp_path, capsys):
    """``tests/profile_report.py`` adds up the workers' lines and keeps the jitted functions,
    the library's call sites and the tests' call sites in their own tables."""
    import json

    import profile_report

    row = {"wall_s": 1.0, "cpu_s": 2.0, "child_cpu_s": 0.5, "compile_s": 0.25, "programs": 3,
           "trace_s": 0.5, "cache_hits": 1}
    for worker in ("gw0", "gw1"):
        (tmp_path / f"{worker}.jsonl").write_text(
            json.dumps({"test": "tests/test_x.py::test_a", **row}) + "\n")
        (tmp_path / f"{worker}.names.json").write_text(json.dumps({
            "jit(_run_impl)": [2, 0.5, 1, 0.25],
            "lib:jaxcompress/compression.py:208 compress_network": [2, 0.5, 1, 0.25],
            "test:tests/test_x.py:5 test_a": [3, 0.75, 2, 0.5]}))
    profile_report.main(str(tmp_path), 5)
    out = capsys.readouterr().out
    assert out.startswith("2 tests: wall_s 2, cpu_s 4, child_cpu_s 1, compile_s 0, programs 6")
    tables = out.split("by compile + trace seconds")
    assert len(tables) == 4
    assert "jit(_run_impl)" in tables[1] and "lib:" not in tables[1] and "test:" not in tables[1]
    assert "     4      1.0      2    0.5  lib:jaxcompress/compression.py:208" in tables[2]
    assert "     6      1.5      4    1.0  test:tests/test_x.py:5 test_a" in tables[3]
