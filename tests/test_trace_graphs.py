"""The trace on networks that are not chains: every group that is
not pinned is compressed with the one per-layer step, its producers sliced and each linear
consumer's rows re-weighted; the user's own function runs on the smaller leaves."""

import dataclasses

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.driver import run_jit
from jaxcompress.measure import error_points

X2 = jnp.zeros((4, 2), jnp.float32)
BALL = jc.Ball(2, 1.0)


pytestmark = pytest.mark.usefixtures("user_broadcasting")   # x @ w + b, as users write it


def _dense(key, n_in, n_out, dtype=jnp.float32):
    k1, k2 = jax.random.split(key)
    # the arithmetic on the host: run on the device it compiled a program per shape
    w = np.asarray(draws.normal(k1, (n_in, n_out), dtype)) / np.asarray(np.sqrt(n_in), dtype)
    return (jax.device_put(w),
            jax.device_put(np.asarray(0.1, dtype) * np.asarray(draws.normal(k2, (n_out,), dtype))))


def _layers(key, sizes, dtype=jnp.float32):
    keys = jax.random.split(key, len(sizes) - 1)
    return [_dense(k, a, b, dtype) for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def _check(fn, params, small, info, domain=BALL, *, below=None):
    """The user's fn on small.params is small(x), and the reported error is the measured one.
    (The user's fn runs in one jitted program and the difference on the host: op by op, each
    operation and shape compiled a program of its own.)"""
    pts = error_points(domain, dtype=jax.tree.leaves(params)[0].dtype)
    run = jax.jit(fn)
    user = np.asarray(run(small.params, pts))
    np.testing.assert_allclose(user, small(pts), rtol=1e-6, atol=1e-6)
    measured = float(np.max(np.abs(np.asarray(run(params, pts)) - user)))
    np.testing.assert_allclose(measured, info.error_estimate, rtol=1e-3, atol=1e-6)
    if below is not None:
        assert measured < below, measured
    return measured


def test_program_features_equal_the_chain_passes_on_a_chain():
    """One driver, two feature sources: a chain whose features are forced through its program
    (jet, points by running fn) keeps the same neurons with the same weights as the closed-form
    passes of the params convention."""
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1], dtype=jnp.float64)
    net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), params,
                   jnp.zeros((4, 2), jnp.float64))
    leaves = jax.tree.leaves(params)
    for method in (jc.derivative_matching(3), jc.collocation(3)):
        small, info = run_jit(leaves, method, BALL,
                              plan=dataclasses.replace(net.plan(), chain=None))
        ref, rinfo = jc.compress(params, method, activation="tanh", domain=BALL)
        for a, b in zip(info.layers, rinfo.layers, strict=True):
            np.testing.assert_array_equal(a.kept, b.kept)
        for a, b in zip(small, jax.tree.leaves(ref), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(info.error_estimate, rinfo.error_estimate, rtol=1e-6)


def test_equinox_mlp():
    """eqx.nn.MLP under vmap: (out, in) kernels applied as the dot_general's left operand."""
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(2, 1, 24, 2, activation=jnp.tanh, key=jax.random.PRNGKey(1),
                       dtype=jnp.float32)
    params, static = eqx.partition(model, eqx.is_array)

    def fn(p, x):
        return jax.vmap(eqx.combine(p, static))(x)

    net = jc.trace(fn, params, X2)
    assert net.chain and all(g.out_in for g in net.groups)
    small, info = jc.compress(net, jc.derivative_matching(3), domain=BALL)
    assert small.params.layers[1].weight.shape == (10, 10)
    _check(fn, params, small, info, below=0.05)


def _igr(params, x):
    """An IGR-style SDF network: softplus with beta = 100, the input concatenated at the middle
    layer and the concatenation scaled by 1/sqrt(2)."""
    (w1, b1), (w2, b2), (w3, b3), (w4, b4) = params

    def act(u):
        return jax.nn.softplus(100.0 * u) / 100.0

    h = act(x @ w1 + b1)
    h = act(h @ w2 + b2)
    h = jnp.concatenate([h, x], axis=-1) * 2.0 ** -0.5
    h = act(h @ w3 + b3)
    return h @ w4 + b4


def test_igr_sdf_network():
    params = _layers(jax.random.PRNGKey(2), [3, 16, 13, 16, 1])
    params[2] = _dense(jax.random.PRNGKey(3), 16, 16)
    net = jc.trace(_igr, params, jnp.zeros((4, 3), jnp.float32))
    text = str(net)
    assert "[2][0] rows 0:13 of 16" in text and "not analytic" not in text
    assert [g.index for g in net.compressible] == [1, 2, 3]
    ball = jc.Ball(3, 1.0)
    for method in (jc.derivative_matching(2),):       # collocation: tests/test_zoo.py (sdf_igr)
        small, info = jc.compress(net, method, domain=ball)
        assert [w.shape for w, _ in small.params] == [(3, 10), (10, 10), (13, 10), (10, 1)]
        _check(_igr, params, small, info, ball)


B = np.asarray(draws.normal(jax.random.PRNGKey(9), (2, 8)), np.float32)


def _fourier(params, x, act=jnp.tanh):
    """Fourier features of x with a fixed (closed-over) B, then an MLP."""
    (w1, b1), (w2, b2), (w3, b3) = params
    e = jnp.concatenate([jnp.cos(x @ B), jnp.sin(x @ B)], axis=-1)
    h = act(e @ w1 + b1)
    h = act(h @ w2 + b2)
    return h @ w3 + b3


def test_fourier_features_tanh_and_relu():
    params = _layers(jax.random.PRNGKey(4), [16, 24, 24, 1])
    net = jc.trace(_fourier, params, X2)
    assert net.groups[0].source == "other" and [g.index for g in net.compressible] == [1, 2]
    small, info = jc.compress(net, jc.derivative_matching(3), domain=BALL)
    _check(_fourier, params, small, info)

    def relu_net(p, x):
        return _fourier(p, x, jax.nn.relu)

    net = jc.trace(relu_net, params, X2)
    with pytest.raises(ValueError, match=r"(?s)uses `max` at .*test_trace_graphs.py.*collocation"):
        jc.compress(net, jc.derivative_matching(3), domain=BALL)
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    assert [w.shape for w, _ in small.params] == [(16, 10), (10, 10), (10, 1)]
    _check(relu_net, params, small, info)


def test_per_neuron_scale_mixed_activations_and_two_heads():
    """A per-neuron scale (FiLM-like) inside the activation is sliced with the neurons; layers
    with different activations; one group read by two heads (joint re-weighting)."""
    (w1, b1), (w2, b2), (w3, b3) = _layers(jax.random.PRNGKey(5), [2, 20, 20, 1])
    w4, b4 = _dense(jax.random.PRNGKey(6), 20, 2)
    params = {"l1": (w1, b1),
              "a": jax.device_put(1.0 + 0.2 * np.arange(20, dtype=np.float32) / 20),
              "l2": (w2, b2), "head": (w3, b3), "aux": (w4, b4)}

    def fn(p, x):
        h = jnp.tanh(p["a"] * (x @ p["l1"][0] + p["l1"][1]))
        h = jnp.sin(h @ p["l2"][0] + p["l2"][1])
        return jnp.concatenate([h @ p["head"][0] + p["head"][1], h @ p["aux"][0] + p["aux"][1]],
                               axis=-1)

    net = jc.trace(fn, params, X2)
    g1, g2 = net.compressible
    assert net.paths[g1.scales[0]] == "['a']" and len(g2.consumers) == 2
    assert "not a chain" in str(net)
    small, info = jc.compress(net, jc.derivative_matching(4), domain=BALL)
    assert small.params["a"].shape == (15,) and small.params["aux"][0].shape == (15, 2)
    _check(fn, params, small, info, below=0.1)


def test_residual_stream_and_inner_layer_compressed():
    """A residual block h + W_o tanh(W_i h + b_i): the stream is a tied set (the input layer
    and W_o write it, W_i and the head read it), the block's inner layer its own set."""
    (w1, b1), (wi, bi) = _layers(jax.random.PRNGKey(7), [2, 12, 24])
    w3, b3 = _dense(jax.random.PRNGKey(11), 12, 1)
    wo = jax.device_put(np.float32(0.3)
                        * np.asarray(draws.normal(jax.random.PRNGKey(8), (24, 12), jnp.float32)))
    params = [(w1, b1), (wi, bi), wo, (w3, b3)]

    def fn(p, x):
        (w1, b1), (wi, bi), wo, (w3, b3) = p
        h = jnp.tanh(x @ w1 + b1)
        h = h + jnp.tanh(h @ wi + bi) @ wo
        return jnp.tanh(h) @ w3 + b3

    net = jc.trace(fn, params, X2)
    assert net.groups[0].tied == (1, 3) and [g.index for g in net.compressible] == [1, 2, 3]
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    assert small.params[1][0].shape == (10, 10) and small.params[2].shape == (10, 10)
    _check(fn, params, small, info)


def test_best_of_forward_backward_and_a_fixed_width_function():
    params = _layers(jax.random.PRNGKey(10), [16, 24, 24, 1])
    net = jc.trace(_fourier, params, X2)
    method = jc.best_of(jc.collocation(3), jc.collocation(3, layer_order="backward"),
                        jc.derivative_matching(3))
    small, info = jc.compress(net, method, domain=BALL)
    assert info.candidates and int(info.choice) in (0, 1, 2)
    _check(_fourier, params, small, info)

    def fixed(p, x):          # a hard-coded width: not shape-polymorphic
        (w1, b1), (w2, b2), (w3, b3) = p
        e = jnp.concatenate([jnp.cos(x @ B), jnp.sin(x @ B)], axis=-1)
        h = jnp.tanh(e @ w1 + b1)
        h = jnp.tanh(h @ w2 + b2) * jnp.ones((24,), h.dtype)
        return h @ w3 + b3

    net = jc.trace(fixed, params, X2)
    with pytest.raises(ValueError, match="not shape-polymorphic|non-scalar|no compressible"):
        jc.compress(net, jc.collocation(3, layer_order="forward"), domain=BALL)


def test_polish_a_traced_network_and_a_module():
    """jc.polish distils the compressed traced network towards its teacher (the user's own
    function), keeping the pytree; the error estimate never grows."""
    params = _layers(jax.random.PRNGKey(12), [16, 24, 24, 1])
    net = jc.trace(_fourier, params, X2)
    small, info = jc.compress(net, jc.collocation(2), domain=BALL)
    polished, hist = jc.polish(small, net, domain=BALL, steps=40, points=512, info=info)
    assert jax.tree.structure(polished.params) == jax.tree.structure(small.params)
    assert float(hist.error_after) <= float(hist.error_before)
    np.testing.assert_allclose(hist.error_before, info.error_estimate, rtol=1e-5)
    _check(_fourier, params, polished, hist.info)
    # dtype=float64: the loop runs on float64 copies of the float32 leaves, which come back;
    # _fourier's float32 constant B needs standard promotion to meet float64 inputs
    with pytest.raises(ValueError, match="standard dtype promotion"):
        jc.polish(small, net, domain=BALL, steps=4, points=64, dtype=jnp.float64)
    with jax.numpy_dtype_promotion("standard"):
        again, hist64 = jc.polish(small, net, domain=BALL, steps=4, points=64,
                                  dtype=jnp.float64)
    assert (hist.dtype, hist64.dtype) == ("float32", "float64")
    assert {a.dtype for a in jax.tree.leaves(again.params)} == {jnp.dtype(jnp.float32)}
    with pytest.raises(TypeError, match="teacher of a compressed traced network is a network"):
        jc.polish(small, params, domain=BALL, steps=2)
    with pytest.raises(ValueError, match="carries its own activations"):
        jc.polish(small, net, activation="tanh", domain=BALL, steps=2)


def test_vmap_over_a_stack_of_teachers():
    """jc.compressor(net, method) is pure: jax.jit(jax.vmap(.)) over stacked teachers gives each
    one's result (the second teacher checked against its own compression). Under jit: run
    eagerly, the batched group-by-group program dispatched op by op took 10-40 s."""
    stack = [_layers(jax.random.PRNGKey(20 + i), [16, 8, 8, 1]) for i in range(2)]
    net = jc.trace(_fourier, stack[0], X2)
    run = jc.compressor(net, jc.collocation(2), domain=BALL)
    small, info = jax.jit(jax.vmap(run))(jax.tree.map(lambda *a: np.stack(a), *stack))
    assert info.error_estimate.shape == (2,) and small[0][0].shape == (2, 16, 6)
    one, one_info = jax.jit(run)(stack[1])
    np.testing.assert_allclose(np.asarray(small[1][0])[1], one[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(info.error_estimate)[1], one_info.error_estimate,
                               rtol=1e-4)


def test_an_error_in_the_users_fn_names_the_call_and_chains_the_original():
    """Python control flow on values, or an x of the wrong width: a jaxcompress error that
    says which call failed, with JAX's own error chained."""
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1])

    def branchy(p, x):
        return x if x.sum() > 0 else -x

    with pytest.raises(ValueError, match=r"trace: fn\(params, x\) with x of shape \(4, 2\) "
                                         r"\(float32\) and params of 4 leaves raised "
                                         r"TracerBoolConversionError") as err:
        jc.trace(branchy, params, jnp.zeros((4, 2), jnp.float32))
    assert isinstance(err.value.__cause__, jax.errors.TracerBoolConversionError)
    with pytest.raises(ValueError, match=r"with x of shape \(4, 3\).*raised ValueError: apply: "
                                         r"x has shape \(4, 3\)"):
        jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), params, jnp.zeros((4, 3)))


def _two_heads_params(width=16):
    k = jax.random.split(jax.random.PRNGKey(0), 4)

    def w(key, shape, scale=1.0):      # scaled on the host: on the device, a program per shape
        return jax.device_put(np.asarray(draws.normal(key, shape)) * scale)

    return {"l1": {"w": w(k[0], (2, width)), "b": jax.device_put(np.zeros(width))},
            "l2": {"w": w(k[1], (width, width), 0.25), "b": jax.device_put(np.zeros(width))},
            "sigma": {"w": w(k[2], (width, 1), 0.25), "b": jax.device_put(np.zeros(1))},
            "rgb": {"w": w(k[3], (width, 3), 0.25), "b": jax.device_put(np.zeros(3))}}


def _two_heads(p, x):
    """A NeRF-like field: a density and a colour, returned as a tuple."""
    h = jnp.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    h = jnp.tanh(h @ p["l2"]["w"] + p["l2"]["b"])
    return (h @ p["sigma"]["w"] + p["sigma"]["b"],
            jax.nn.sigmoid(h @ p["rgb"]["w"] + p["rgb"]["b"]))


def test_several_outputs_a_tuple_or_a_dict_compress_measure_and_polish():
    """Every output is matched (flattened side by side for features, errors and polishing) and
    ``small(x)`` returns the structure ``fn`` returns; at full rank it is the teacher."""
    params, ball = _two_heads_params(), jc.Ball(2, 1.0)

    def as_dict(p, x):
        density, rgb = _two_heads(p, x)
        return {"density": density[..., 0], "rgb": rgb}

    x = ball.sobol(64)
    for fn in (_two_heads, as_dict):
        net = jc.trace(fn, params, jnp.zeros((4, 2)))
        exact, _ = jc.compress(net, jc.collocation(8, widths=(16, 16)), domain=ball)
        want, got = jax.jit(fn)(params, x), exact(x)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                        strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, atol=1e-4)
    small, _ = jc.compress(net, jc.collocation(3), domain=ball)      # the dict network
    err = float(jc.sup_error(net, small, domain=ball, key=jax.random.PRNGKey(0), n_samples=256))
    # the sup error sees both heads: at least the colour head's own gap
    gap = np.abs(np.asarray(small(x)["rgb"]) - np.asarray(jax.jit(as_dict)(params, x)["rgb"]))
    assert err >= float(np.max(gap)) - 1e-6
    polished, history = jc.polish(small, net, domain=ball, steps=10, points=256)
    loss = np.asarray(history.chunk_loss)
    assert float(loss[-1]) < float(loss[0])   # both heads' MSE
    assert jax.tree_util.tree_structure(polished(x)) == jax.tree_util.tree_structure(want)


def test_a_function_that_mixes_the_examples_of_a_batch_is_refused_with_its_line():
    """Centring by the batch mean or BatchNorm's batch statistics: never a silent result."""
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1])

    def centred(p, x):
        x = x - x.mean(0)                          # the batch's statistics
        return jc.apply(p, x, activation="tanh")

    def batch_norm(p, x):
        h = x @ p[0]["kernel"] + p[0]["bias"]
        h = (h - h.mean(0)) / jnp.sqrt(h.var(0) + 1e-5)
        return jnp.tanh(h) @ p[1]["kernel"] + p[1]["bias"]

    for fn in (centred, batch_norm):
        with pytest.raises(ValueError, match=r"trace: fn mixes the examples of a batch \(at "
                                             r".*test_trace_graphs.py:\d+"):
            jc.trace(fn, params, jnp.zeros((4, 2)))
    # statistics of the data set, as constants: each input alone, traced as usual
    mean = jnp.array([0.1, -0.2])
    net = jc.trace(lambda p, x: jc.apply(p, x - mean, activation="tanh"), params,
                   jnp.zeros((4, 2)))
    assert [g.width for g in net.compressible] == [8]


def test_acting_on_each_example_alone_is_proven_from_the_program_where_it_can_be():
    """jc.trace's batch check: a program whose every value depending on x keeps the batch on
    axis 0, row i from example i (elementwise operations, x @ W, broadcasts, joins along
    features, reductions over features, the gradient by x of a per-example jax.grad under
    jax.vmap or of the batch's sum: its cotangents are summed by add_any, elementwise like add
    in graph.rules) is proven row-wise with nothing compiled; any other operation on x (a
    reduction, a reversal, a roll or a sort over the batch, x.T @ x, a flattening reshape) is
    measured instead."""
    from jaxcompress.graph.network import _acts_rowwise
    from jaxcompress.program import trace_program

    params = jc.init_mlp(jax.random.PRNGKey(5), [2, 13, 3])

    def mlp(p, x):
        return jnp.sin(jnp.tanh(x @ p[0]["kernel"] + p[0]["bias"])) @ p[1]["kernel"] + 1.0

    proven = {"mlp": mlp, "skip": lambda p, x: jnp.concatenate([mlp(p, x), x], -1),
              "gelu of features": lambda p, x: jax.nn.gelu(mlp(p, x)).sum(-1),
              "constant rows": lambda p, x: mlp(p, x) * 0.0 + p[1]["bias"],
              "grad inside": lambda p, x: jax.vmap(jax.grad(
                  lambda xi: mlp(p, xi[None])[0, 0]))(x),
              "grad of the sum": lambda p, x: jax.grad(lambda y: mlp(p, y)[:, 0].sum())(x)}
    measured = {"batch mean": lambda p, x: mlp(p, x) - jnp.mean(mlp(p, x), axis=0),
                "x.T @ x": lambda p, x: mlp(p, x) + jnp.sum(x.T @ x),
                "roll": lambda p, x: mlp(p, jnp.roll(x, 1, axis=0)),
                "flattened": lambda p, x: mlp(p, x.reshape(-1)[::-1].reshape(x.shape)),
                "sort": lambda p, x: jnp.sort(mlp(p, x), axis=0)}
    x = np.linspace(-0.6, 0.7, 10).reshape(5, 2)
    moved = x.copy()
    moved[0] = [0.9, -0.4]
    with jax.numpy_rank_promotion("allow"):
        for name, fn in {**proven, **measured}.items():
            prog = trace_program(fn, params, jax.ShapeDtypeStruct((5, 2), x.dtype))
            assert _acts_rowwise(prog, 5) == (name in proven), name
            if name in proven:   # and it is so: moving example 0 moves its output only
                run = jax.jit(fn)
                np.testing.assert_array_equal(np.asarray(run(params, x))[1:],
                                              np.asarray(run(params, moved))[1:])


def test_random_numbers_inside_fn_are_refused_and_a_python_leaf_passes_through():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 8, 1])

    def dropout(p, x):                            # a fixed key: still not one function
        h = jnp.tanh(x @ p[0]["kernel"] + p[0]["bias"])
        h = jnp.where(jax.random.bernoulli(jax.random.PRNGKey(1), 0.9, h.shape), h / 0.9, 0.0)
        return jc.apply(p[1:], h, activation="tanh")

    with pytest.raises(ValueError, match=r"trace: fn draws random numbers \(`random_\w+` at "
                                         r".*test_trace_graphs.py:\d+.*model.eval\(\)"):
        jc.trace(dropout, params, jnp.zeros((4, 2)))
    # a step counter in the params: traced, never compressed, given back as it was
    state = {"layers": params, "step": 7}
    net = jc.trace(lambda q, x: jc.apply(q["layers"], x, activation="tanh"), state,
                   jnp.zeros((4, 2)))
    small, _ = jc.compress(net, jc.collocation(2), domain=jc.Ball(2, 1.0))
    assert small.params["step"] == 7 and type(small.params["step"]) is int
    assert jc.layer_sizes(small) == [2, 6, 6, 1]
