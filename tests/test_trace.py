"""The trace on chains of dense layers: ``jc.trace`` finds the neuron groups of a JAX
program; ``jc.compress(net, method)`` lowers a chain to the one driver and writes the result back
into the user's own pytree."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from user_nets import GeluNet

import jaxcompress as jc
from jaxcompress.graph import chain_activation
from jaxcompress.measure import error_points

nnx = pytest.importorskip("flax.nnx")
nn = pytest.importorskip("flax.linen")

X = jnp.zeros((4, 2), jnp.float32)
BALL = jc.Ball(2, 1.0)


pytestmark = pytest.mark.usefixtures("user_broadcasting")   # x @ w + b, as users write it


def _measured(fn, teacher, small, domain=BALL):
    """``max |fn(teacher, p) - small(p)|`` on the error estimate's points of ``domain``
    (``fn`` in one jitted program and the difference on the host: op by op, each operation and
    shape compiled a program of its own)."""
    pts = error_points(domain, dtype=jnp.float32)
    return float(np.max(np.abs(np.asarray(jax.jit(fn)(teacher, pts)) - np.asarray(small(pts)))))


def _dense(key, shape):
    k1, k2 = jax.random.split(key)
    # the arithmetic on the host (on the device: a program per shape), bit for bit what the
    # device computed: XLA divides by a constant as a product with its float32 reciprocal
    scale = np.float32(1) / np.float32(np.sqrt(shape[0]))
    w = np.asarray(draws.normal(k1, shape, jnp.float32)) * scale
    b = np.float32(0.1) * np.asarray(draws.normal(k2, (shape[1],), jnp.float32))
    return jax.device_put(w), jax.device_put(b)


def _out_in(params):
    """The ``(out, in)`` kernels (Equinox / PyTorch layout) of ``(kernel, bias)`` pairs,
    transposed on the host."""
    return [(jax.device_put(np.asarray(w).T), b) for w, b in params]


def test_one_driver_same_kept_neurons_and_weights():
    """(a) the params convention through jc.trace gives what jc.compress gives directly."""
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1], dtype=jnp.float32)
    net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), params, X)
    assert [g.width for g in net.compressible] == [24, 24]
    method = jc.derivative_matching(3)
    small, info = jc.compress(net, method, domain=BALL)
    ref, rinfo = jc.compress(params, method, activation="tanh", domain=BALL)
    assert info.activation == "tanh" and small.polymorphic
    for a, b in zip(info.layers, rinfo.layers, strict=True):
        np.testing.assert_array_equal(a.kept, b.kept)
    for a, b in zip(small.params, ref, strict=True):
        np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(a["bias"], b["bias"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(info.error_estimate, rinfo.error_estimate, rtol=1e-5)




def test_nnx_module_custom_call():
    """(b) nnx: gelu(approximate=True) is recognised as gelu_tanh, the smaller state merges."""
    graphdef, state = nnx.split(GeluNet([2, 32, 32, 1], nnx.Rngs(0)))

    def fn(s, x):
        return nnx.merge(graphdef, s)(x)

    net = jc.trace(fn, state, X)
    assert "gelu_tanh (matches numerically and structurally)" in str(net)
    small, info = jc.compress(net, jc.derivative_matching(4), domain=BALL)
    assert info.activation == "gelu_tanh" and small.polymorphic
    assert jax.tree.structure(small.params) == jax.tree.structure(state)
    model = nnx.merge(graphdef, small.params)
    assert model.layers[1].kernel[...].shape == (15, 15)
    pts = error_points(BALL, dtype=jnp.float32)
    np.testing.assert_allclose(jax.jit(model)(pts), small(pts), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_measured(fn, state, small), info.error_estimate, rtol=1e-3,
                               atol=1e-6)
    assert float(info.error_estimate) < 0.05


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = jax.nn.sigmoid(nn.Dense(20)(x))
        x = jax.nn.sigmoid(nn.Dense(20)(x))
        return nn.Dense(1)(x)


def test_linen_compact_mlp():
    """(c) linen: the variables dict keeps its structure; linen's shape check refuses the smaller
    leaves in model.apply, so small(x) runs the lowered chain, and a module of the new widths
    takes small.params."""
    model = LinenMLP()
    variables = model.init(jax.random.PRNGKey(0), X)
    net = jc.trace(model.apply, variables, X)
    assert [g.width for g in net.compressible] == [20, 20]
    assert "['params']['Dense_0']['kernel']" in str(net)
    small, info = jc.compress(net, jc.derivative_matching(3), domain=BALL)
    assert info.activation == "sigmoid"
    assert jax.tree.structure(small.params) == jax.tree.structure(variables)
    assert small.params["params"]["Dense_1"]["kernel"].shape == (10, 10)
    assert not small.polymorphic and "shape" in small.why.lower()
    np.testing.assert_allclose(_measured(model.apply, variables, small), info.error_estimate,
                               rtol=1e-3, atol=1e-6)

    class Small(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jax.nn.sigmoid(nn.Dense(10)(x))
            x = jax.nn.sigmoid(nn.Dense(10)(x))
            return nn.Dense(1)(x)

    pts = error_points(BALL, dtype=jnp.float32)
    np.testing.assert_allclose(jax.jit(Small().apply)(small.params, pts), small(pts), rtol=1e-6,
                               atol=1e-6)


def _siren(params, x):
    *hidden, (w, b) = params
    for wl, bl in hidden:
        x = jnp.sin(30.0 * (x @ wl + bl))
    return x @ w + b


def _siren_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    out = []
    for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        bound = 1.0 / a if i == 0 else float(np.sqrt(6.0 / a)) / 30.0      # SIREN's initialisation
        k1, k2 = jax.random.split(k)
        out.append((draws.uniform(k1, (a, b), jnp.float32, -bound, bound),
                    draws.uniform(k2, (b,), jnp.float32, -bound, bound)))
    return out


def test_siren_derived_activation():
    """(d) sin(30 u) is an activation built from the trace (never registered: compressing
    writes no global state); the user's function on small.params is within the reported
    error, for collocation and for derivative matching."""
    params = _siren_params(jax.random.PRNGKey(1), [2, 24, 24, 1])
    net = jc.trace(_siren, params, X)
    assert [g.expression() for g in net.compressible] == ["sin(mul(30.0, u))"] * 2
    domain = jc.Ball(2, 0.3)
    for method in (jc.collocation(5), jc.derivative_matching(5)):
        small, info = jc.compress(net, method, domain=domain)
        assert info.activation == "traced:sin(mul(30.0, u))" and small.polymorphic
        assert [w.shape for w, _ in small.params] == [(2, 21), (21, 21), (21, 1)]
        measured = _measured(_siren, params, small, domain)
        np.testing.assert_allclose(measured, info.error_estimate, rtol=1e-3, atol=1e-6)
    assert net.activation.rho_sigma == np.inf   # entire
    assert "traced:sin(mul(30.0, u))" not in jc.activations.registered_activations()


def _mlp_params(key, sizes):
    return [_dense(k, (a, b)) for k, a, b in
            zip(jax.random.split(key, len(sizes) - 1), sizes[:-1], sizes[1:], strict=True)]


def _residual(params, x):
    (w1, b1), (w2, b2), (w3, b3) = params
    h = jnp.tanh(x @ w1 + b1)
    h = jnp.tanh(h @ w2 + b2) + h
    return h @ w3 + b3


def _concat_skip(params, x):
    (w1, b1), (w2, b2), (w3, b3) = params
    h = jnp.tanh(x @ w1 + b1)
    h = jnp.tanh(jnp.concatenate([h, x], axis=-1) @ w2 + b2)
    return h @ w3 + b3


def _relu(params, x):
    """ReLU with ``(out, in)`` kernels (``x @ W.T``, the Equinox / PyTorch layout)."""
    (w1, b1), (w2, b2), (w3, b3) = params
    h = jax.nn.relu(x @ w1.T + b1)
    h = jax.nn.relu(h @ w2.T + b2)
    return h @ w3.T + b3


def test_residual_add_ties_a_stream_and_max_pins():
    """(e) a residual add ties both groups into one stream set, compressed jointly
    within the reported error; an elementwise max of two groups pins both, names the op and
    its line."""
    params = _mlp_params(jax.random.PRNGKey(2), [2, 8, 8, 1])
    net = jc.trace(_residual, params, X)
    assert [g.tied for g in net.compressible] == [(1, 2), (1, 2)]
    small, info = jc.compress(net, jc.collocation(2), domain=BALL)
    assert [w.shape for w, _ in small.params] == [(2, 6), (6, 6), (6, 1)]
    np.testing.assert_allclose(_measured(_residual, params, small), info.error_estimate,
                               rtol=1e-3, atol=1e-6)

    def fn(p, x):
        (w1, b1), (w2, b2), (w3, b3) = p
        h = jnp.tanh(x @ w1 + b1)
        return jnp.maximum(jnp.tanh(h @ w2 + b2), h) @ w3 + b3

    text = str(jc.trace(fn, params, X))
    assert "`max` with group 2 (only products and sums tie groups into one set; fix: " in text
    assert "test_trace.py" in text


def test_concatenated_input_is_compressed_group_by_group():
    """(e) an input concatenated into a middle layer: the group before the concatenate is read
    by rows 0:8 of the next kernel (the input's 2 rows stay); compressed group by group, the
    user's function on the smaller leaves within the reported error."""
    params = _mlp_params(jax.random.PRNGKey(3), [2, 8, 1])
    params.insert(1, _dense(jax.random.PRNGKey(4), (10, 8)))
    net = jc.trace(_concat_skip, params, X)
    assert "[1][0] rows 0:8 of 10" in str(net) and not net.chain
    assert [g.index for g in net.compressible] == [1, 2]
    for method in (jc.collocation(2), jc.derivative_matching(2)):
        small, info = jc.compress(net, method, domain=BALL)
        assert [w.shape for w, _ in small.params] == [(2, 6), (8, 6), (6, 1)]
        np.testing.assert_allclose(_measured(_concat_skip, params, small), info.error_estimate,
                                   rtol=1e-3, atol=1e-6)
        assert float(info.error_estimate) < 0.05


def test_relu_refused_for_derivatives_compressed_by_collocation():
    """(e) ReLU: derivative matching names `max`, relu and the user's line; collocation (values
    only) compresses it, the user's function on small.params within the reported error."""
    params = _out_in(_mlp_params(jax.random.PRNGKey(5), [2, 24, 24, 1]))
    net = jc.trace(_relu, params, X)
    assert "not analytic: `max`" in str(net) and all(g.out_in for g in net.groups)
    with pytest.raises(ValueError, match=r"(?s)max\(u, 0.0\) \(relu\) uses `max` at .*test_trace.py"
                       r".*jc.collocation"):
        jc.compress(net, jc.derivative_matching(3))
    with pytest.raises(ValueError, match="`max`"):
        jc.compress(net, jc.best_of(jc.collocation(3), jc.derivative_matching(3)))
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    assert [w.shape for w, _ in small.params] == [(10, 2), (10, 10), (1, 10)]   # transposed
    np.testing.assert_allclose(_measured(_relu, params, small), info.error_estimate, rtol=1e-3,
                               atol=1e-6)


def test_unknown_primitive_pins_and_is_named():
    """(f) a primitive without a rule pins what it touches and is named in the table."""
    def fn(params, x):
        (w1, b1), (w2, b2) = params
        h = jnp.sort(jnp.tanh(x @ w1 + b1), axis=-1)
        return h @ w2 + b2

    net = jc.trace(fn, _mlp_params(jax.random.PRNGKey(6), [2, 8, 1]), X)
    text = str(net)
    assert "feeds `sort`, a primitive without a rule" in text
    assert "unknown primitive `sort` at" in text and "test_trace.py" in text
    assert not net.compressible


def test_softplus_and_silu_are_the_registered_ones():
    """jax.nn.softplus (which traces through max / abs / select_n) is the registered analytic
    softplus, not a kinked function; silu likewise; (out, in) kernels are recognised."""
    def fn(params, x, act):
        (w1, b1), (w2, b2), (w3, b3) = params
        h = act(x @ w1.T + b1)
        h = act(h @ w2.T + b2)
        return h @ w3.T + b3

    params = _out_in(_mlp_params(jax.random.PRNGKey(7), [2, 20, 20, 1]))
    silu = jc.trace(lambda p, x: fn(p, x, jax.nn.silu), params, X)
    assert "silu (matches numerically and structurally)" in str(silu)

    def softplus(p, x):
        return fn(p, x, jax.nn.softplus)

    net = jc.trace(softplus, params, X)
    assert all(g.out_in for g in net.groups) and "softplus (matches numerically" in str(net)
    # max, abs, select_n inside jax.nn.softplus's custom_jvp: recognised as one analytic call
    assert not any(g.kinks for g in net.compressible)
    names = {chain_activation(g, jnp.float32).name for g in net.compressible}
    assert names == {"softplus"}


def test_a_traced_network_takes_no_activation():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1], dtype=jnp.float32)
    net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), params, X)
    with pytest.raises(ValueError, match="carries its own activation"):
        jc.compress(net, jc.collocation(2), activation="tanh")
    with pytest.raises(TypeError, match="give a method"):
        jc.compress(net)
    with pytest.raises(TypeError, match="activation= is required"):
        jc.compress(params, jc.collocation(2))
    with pytest.raises(ValueError, match=r"x must be example inputs of shape \(n, d_in\)"):
        jc.trace(lambda p, x: x, params, jnp.zeros(2, jnp.float32))


def test_shared_weights_and_a_wrong_domain_are_refused():
    def tied(params, x):
        (w1, b1), (w2, b2), (w3, b3) = params
        h = jnp.tanh(x @ w1 + b1)
        h = jnp.tanh(h @ w2 + b2)
        h = jnp.tanh(h @ w2 + b2)           # the same layer twice
        return h @ w3 + b3

    params = _mlp_params(jax.random.PRNGKey(8), [2, 8, 8, 1])
    net = jc.trace(tied, params, X)
    assert ("the rows of [1][0] read group 1 at one call and group 2 at another (one set of "
            "rows cannot be re-weighted for both)") in str(net)
    assert not net.compressible
    chain = jc.trace(_relu, _out_in(params), X)
    with pytest.raises(ValueError, match="domain has dim 3; the network takes inputs of size 2"):
        jc.compress(chain, jc.collocation(2), domain=jc.Ball(3, 1.0))


def test_calls_are_inlined():
    """jax.checkpoint (remat), custom_vjp and jit sub-programs are read through."""
    @jax.custom_vjp
    def act(u):
        return jnp.tanh(u)

    act.defvjp(lambda u: (jnp.tanh(u), u), lambda u, g: (g * (1 - jnp.tanh(u) ** 2),))

    @jax.jit
    def fn(params, x):
        (w1, b1), (w2, b2), (w3, b3) = params
        h = jax.checkpoint(lambda x: act(x @ w1 + b1))(x)
        return act(h @ w2 + b2) @ w3 + b3

    net = jc.trace(fn, _mlp_params(jax.random.PRNGKey(9), [2, 8, 8, 1]), X)
    assert [g.width for g in net.compressible] == [8, 8] and not net.unknown
    assert "tanh (matches numerically and structurally)" in str(net)


def test_an_activation_traced_to_a_registered_program_is_matched_without_evaluating(
        monkeypatch):
    """jnp.tanh traces to the program the registered tanh traces to: matched by identity,
    without evaluating either on the grid (which compiles a program per primitive); a tanh
    written otherwise (sinh / cosh) is compared on the grid, once per process."""
    from jaxcompress.graph import match

    def traced(act):
        def fn(params, x):
            (w1, b1), (w2, b2) = params
            return act(x @ w1 + b1) @ w2 + b2
        (group,) = jc.trace(fn, _mlp_params(jax.random.PRNGKey(3), [2, 6, 1]), X).compressible
        return group

    evaluated = []
    real = match._match_fn
    monkeypatch.setattr(match, "_match_fn", lambda *a: evaluated.append(a) or real(*a))
    tanh, ratio = traced(jnp.tanh), traced(lambda u: jnp.sinh(u) / jnp.cosh(u))
    monkeypatch.setattr(match, "_MATCHED", {})
    evaluated.clear()
    assert match.match_activation(tanh, jnp.float32) == ("tanh", "numerically and structurally")
    assert evaluated == []
    assert match.match_activation(ratio, jnp.float32) == ("tanh", "numerically")
    assert len(evaluated) == 1
    assert match.match_activation(ratio, jnp.float32) == ("tanh", "numerically")
    assert len(evaluated) == 1


def test_a_users_own_primitive_pins_until_it_has_a_rule():
    """register_rule: a primitive without a rule pins what it touches (named, with its line);
    registered as elementwise (the registry's own helper), its group compresses, and the flags
    registered with it are what the side tables say."""
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    from jaxcompress.graph import rules

    softsign = Primitive("test_softsign")

    def impl(u):
        return u / (1 + jnp.abs(u))

    softsign.def_impl(impl)
    softsign.def_abstract_eval(lambda u: u)
    mlir.register_lowering(softsign, mlir.lower_fun(impl, multiple_results=False))

    def fn(p, x):
        h = softsign.bind(x @ p["w1"] + p["b1"])
        return h @ p["w2"] + p["b2"]

    k = jax.random.split(jax.random.PRNGKey(3), 2)
    w1, b1 = _dense(k[0], (2, 24))
    w2, b2 = _dense(k[1], (24, 1))
    params = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
    net = jc.trace(fn, params, X)
    assert not net.compressible and ("test_softsign", net.unknown[0][1]) in net.unknown
    assert "feeds `test_softsign`, a primitive without a rule" in str(net)
    try:
        rules.register_rule("test_softsign", rules.ELEMENTWISE, analytic=False)
        assert not rules.analytic("test_softsign") and not rules.entire("test_softsign")
        net = jc.trace(fn, params, X)
        assert [g.width for g in net.compressible] == [24] and not net.unknown
        small, info = jc.compress(net, jc.collocation(4), domain=BALL)
        assert jc.layer_sizes(small) == [2, 15, 1]
        assert _measured(fn, params, small) < 1e-2
        with pytest.raises(TypeError, match="analytic must be a bool"):
            rules.register_rule("test_softsign", rules.ELEMENTWISE, analytic="no")
    finally:
        rules.RULES.pop("test_softsign", None)
    assert rules.analytic("max") is False and rules.ties("add") and not rules.ties("max")
    assert rules.entire("sin") and not rules.entire("tanh")


def _rows(p, x):
    """Biases stored ``(1, n)``, as code ported from TensorFlow keeps them."""
    for w, b in p[:-1]:
        x = jnp.tanh(x @ w + b)
    return x @ p[-1][0] + p[-1][1]


def _columns(p, x):
    """Neurons along axis 0 (``W^T x^T + b``) with biases stored ``(n, 1)``."""
    h = x.T
    for w, b in p[:-1]:
        h = jnp.tanh(w.T @ h + b)
    return (p[-1][0].T @ h + p[-1][1]).T


def test_singleton_axis_biases_are_one_number_per_neuron():
    """A ``(1, n)`` bias added to ``x K`` (or ``(n, 1)`` added to ``K^T x^T``) is one number per
    neuron: sliced along its neuron axis, the network compresses to the widths and the error of
    the same network with ``(n,)`` biases (equal to rounding); a ``(1, n)`` parameter read
    other than as a bias pins its group with that reason and the fix."""
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    flat = [_dense(k, s) for k, s in zip(keys, [(2, 24), (24, 24), (24, 1)], strict=True)]
    rows = [(w, b.reshape(1, -1)) for w, b in flat]
    cols = [(w, b.reshape(-1, 1)) for w, b in flat]
    method = jc.derivative_matching(3)

    def plain(p, x):
        for w, b in p[:-1]:
            x = jnp.tanh(x @ w + b)
        return x @ p[-1][0] + p[-1][1]

    ref, _ = jc.compress(jc.trace(plain, flat, X), method, domain=BALL)
    want = _measured(plain, flat, ref)
    for fn, params, shape in ((_rows, rows, lambda n: (1, n)), (_columns, cols, lambda n: (n, 1))):
        net = jc.trace(fn, params, X)
        assert [g.width for g in net.compressible] == [24, 24], net
        small, _ = jc.compress(net, method, domain=BALL)
        assert small.layer_sizes() == ref.layer_sizes()
        assert [b.shape for _, b in small.params] == [shape(n) for n in ref.layer_sizes()[1:]]
        np.testing.assert_allclose(_measured(fn, params, small), want, rtol=1e-4)

    def scaled(p, x):
        for w, b in p[:-1]:
            x = jnp.tanh((x @ w) * b)
        return x @ p[-1][0] + p[-1][1]

    net = jc.trace(scaled, rows, X)
    assert not net.compressible
    assert "parameter of shape (1, 24)" in str(net) and "b.reshape(-1)" in str(net)


def _pinn_with_settings(p, x):
    """A PINN package's network: its settings (depth, frequency, a switch) stored in params as
    Python numbers and used in Python control flow."""
    h = jnp.sin(p["omega"] * x) if p["periodic"] else x
    for i in range(p["depth"]):
        h = jnp.tanh(h @ p["layers"][i]["kernel"] + p["layers"][i]["bias"])
    return h @ p["layers"][p["depth"]]["kernel"] + p["layers"][p["depth"]]["bias"]


def test_python_numbers_in_params_reach_fn_as_numbers():
    """``range(p["depth"])`` and ``if p["periodic"]`` work in the trace, in the compressed
    network's call (jitted), in polishing and under a user's ``jax.jit`` of ``small``: the
    numbers are never traced, never compressed, given back."""
    seen = []

    def fn(p, x):
        seen.append((type(p["depth"]), type(p["omega"]), type(p["periodic"])))
        return _pinn_with_settings(p, x)

    params = {"layers": jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1], dtype=jnp.float32),
              "depth": 2, "omega": 1.5, "periodic": True}
    net = jc.trace(fn, params, X)
    assert [g.width for g in net.compressible] == [16, 16]
    small, _ = jc.compress(net, jc.collocation(3), domain=BALL)
    assert small.params["depth"] == 2 and type(small.params["depth"]) is int
    pts = error_points(BALL, dtype=jnp.float32)
    y = np.asarray(small(pts))
    np.testing.assert_allclose(np.asarray(jax.jit(lambda z: small(z))(pts)), y, rtol=1e-6,
                               atol=1e-6)
    assert np.max(np.abs(np.asarray(net(pts)) - y)) <= 5e-2
    polished, _ = jc.polish(small, net, domain=BALL, steps=3)
    assert polished.params["omega"] == 1.5 and np.all(np.isfinite(np.asarray(polished(pts))))
    assert set(seen) == {(int, float, bool)}


def _layer(p, x):
    """``tanh(x W1 + b1)``: the hidden values the refusals below misuse."""
    return jnp.tanh(x @ p["w1"] + p["b1"])


REFUSALS = {
    # a name: (fn, the operation the refusal names)
    "reshaped across the neurons": (
        lambda p, x: _layer(p, x).reshape(-1, 4, 6).sum(1) @ p["w2"][:6], "reshape"),
    "a primitive without a rule": (
        lambda p, x: jnp.sort(_layer(p, x), -1) @ p["w2"], "sort"),
    "two hidden values multiplied as matrices": (
        lambda p, x: jnp.sum(_layer(p, x) * _layer(p, 2 * x), -1, keepdims=True)
        @ p["w2"][:1], "reduce_sum"),
    "LayerNorm over the neurons": (
        lambda p, x: (_layer(p, x) - _layer(p, x).mean(-1, keepdims=True)) @ p["w2"],
        "reduce_sum"),
    "hidden values sliced": (lambda p, x: _layer(p, x)[:, :3] @ p["w2"][:3], "slice"),
    "joined along another axis": (
        lambda p, x: jnp.stack([_layer(p, x), _layer(p, -x)], 1).sum(1) @ p["w2"],
        "stack"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_every_refusal_names_the_operation_the_users_line_and_a_fix(name):
    fn, op = REFUSALS[name]
    k = jax.random.split(jax.random.PRNGKey(3), 2)
    w1, b1 = _dense(k[0], (2, 24))
    w2, b2 = _dense(k[1], (24, 1))
    net = jc.trace(fn, {"w1": w1, "b1": b1, "w2": w2}, X)
    pins = [(reason, line) for g in net.groups for reason, line in g.pins
            if "reaches the output" not in reason]
    assert pins and not net.compressible, str(net)
    assert any(f"`{op}`" in reason for reason, _ in pins), str(net)
    assert all("fix:" in reason for reason, _ in pins), str(net)
    assert all("test_trace.py" in line for reason, line in pins if f"`{op}`" in reason)
