"""Layers under ``jax.lax.scan``: a scan over stacked parameters is read as
its unrolled layers; each layer keeps its own neurons, the stack keeps one width and stays
stacked, and ``fn`` runs on the smaller stack.

The exact property: when each layer's neurons repeat ``distinct`` ones (every producer's slice
copied), every layer's features have rank ``<= distinct``, so at that width the compressed
stack is the teacher to float64 rounding. A second reference: the same network written as a
Python loop over separate leaves compresses to the same network (the same error estimate).
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.measure import error_points

X2 = jnp.zeros((4, 2), jnp.float64)
BALL = jc.Ball(2, 1.0)

pytestmark = pytest.mark.usefixtures("user_broadcasting")   # x @ w + b, as users write it


def _dense(key, a, b, *, repeat=None, scale=1.0):
    """A kernel ``(a, b)`` and bias; with ``repeat``, neuron ``j`` a copy of ``j mod repeat``."""
    k1, k2 = jax.random.split(key)
    cols = b if repeat is None else repeat
    # the arithmetic on the host: run on the device it compiled a program per shape
    w = scale * np.asarray(draws.normal(k1, (a, cols), jnp.float64)) / np.sqrt(a)
    bias = 0.1 * np.asarray(draws.normal(k2, (cols,), jnp.float64))
    idx = np.arange(b) % cols
    return {"kernel": jax.device_put(w[:, idx]), "bias": jax.device_put(bias[idx])}


def _stack(layers):
    return jax.tree.map(lambda *a: jax.device_put(np.stack([np.asarray(x) for x in a])), *layers)


def _params(seed, width, depth, repeat=None):
    """``[2, width x depth, 1]`` with the ``depth`` hidden-to-hidden layers stacked."""
    keys = jax.random.split(jax.random.PRNGKey(seed), depth + 2)
    layers = [_dense(k, width, width, repeat=repeat) for k in keys[1:-1]]
    return {"inp": _dense(keys[0], 2, width, repeat=repeat), "stack": _stack(layers),
            "out": _dense(keys[-1], width, 1)}


def scanned(p, x):
    h = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])

    def layer(h, w):
        return jnp.tanh(h @ w["kernel"] + w["bias"]), None

    h, _ = jax.lax.scan(layer, h, p["stack"])
    return h @ p["out"]["kernel"] + p["out"]["bias"]


def _error(fn, teacher, small):
    pts = error_points(BALL, dtype=jnp.float64)
    y, ys = np.asarray(jax.jit(fn)(teacher, pts)), np.asarray(jax.jit(fn)(small.params, pts))
    np.testing.assert_allclose(ys, small(pts), rtol=1e-12, atol=1e-12)
    return float(np.max(np.abs(y - ys)))


def test_a_scanned_stack_compresses_stacked_and_exact_at_its_rank():
    """``[2, 64 x 4, 1]``, the four 64 -> 64 layers under scan, each layer's 64 neurons 6
    distinct ones: at order 3 (``D_3 = 10``) the stack is ``(4, 10, 10)``, one width, and
    the network is the teacher's to rounding."""
    params = _params(0, 64, 4, repeat=6)
    net = jc.trace(scanned, params, X2)
    assert [g.stack for g in net.groups] == [None, 0, 1, 2, 3, None]
    assert net.groups[0].stacked == (1, 2, 3, 4, 5) and len(net.plan().sets) == 1
    assert net.set_names() == ["groups 1, 2, 3, 4, 5 (a stack under scan: one width)"]
    text = str(net)
    assert "['stack']['kernel'][2], ['stack']['bias'][2]" in text
    assert "layers under scan" in text and "a stack under scan" in text
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    shapes = jax.tree.map(jnp.shape, small.params)
    assert shapes["stack"] == {"kernel": (4, 10, 10), "bias": (4, 10)}
    assert shapes["inp"]["kernel"] == (2, 10) and shapes["out"]["kernel"] == (10, 1)
    (layer,) = info.layers
    assert layer.width_out == 10 and int(layer.rank) == 6
    np.testing.assert_array_equal(layer.kept, np.arange(10))
    assert _error(scanned, params, small) < 1e-12


def _unrolled(p, x):
    h = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])
    for w in p["layers"]:
        h = jnp.tanh(h @ w["kernel"] + w["bias"])
    return h @ p["out"]["kernel"] + p["out"]["bias"]


def _fori(p, x):
    h = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])
    stack = p["stack"]

    def layer(i, h):
        return jnp.tanh(h @ stack["kernel"][i] + stack["bias"][i])

    h = jax.lax.fori_loop(0, stack["kernel"].shape[0], layer, h)
    return h @ p["out"]["kernel"] + p["out"]["bias"]


def test_a_scan_is_its_unrolled_layers():
    """A random stack indexed by ``fori_loop`` (collocation in forward order: each layer
    re-fitted on the compressed layers before it) and under ``scan`` (derivative matching in
    backward order) compresses to the network its layers compress to as separate leaves in a
    Python loop (equal error estimates, equal kernels: each slice holds its own layer's kept
    neurons)."""
    params = _params(1, 16, 3)
    layers = [jax.tree.map(lambda a, i=i: jax.device_put(np.asarray(a)[i]), params["stack"])
              for i in range(3)]
    loose = {"inp": params["inp"], "layers": layers, "out": params["out"]}
    for method, fn in ((jc.collocation(3), _fori), (jc.derivative_matching(3), scanned)):
        ref, ref_info = jc.compress(jc.trace(_unrolled, loose, X2), method, domain=BALL)
        assert float(ref_info.error_estimate) > 1e-6        # a real compression, not a copy
        small, info = jc.compress(jc.trace(fn, params, X2), method, domain=BALL)
        np.testing.assert_allclose(info.error_estimate, ref_info.error_estimate, rtol=1e-9)
        for i, layer in enumerate(ref.params["layers"]):
            np.testing.assert_allclose(np.asarray(small.params["stack"]["kernel"])[i],
                                       layer["kernel"], atol=1e-12)


def test_a_residual_stream_under_scan():
    """``s + tanh(s W_i + b_i) W_o + b_o`` over stacked blocks: the stream is one set of
    channels (its writers ``W_o``, ``b_o`` sliced alike in every layer), the blocks' inner
    layers a stack of their own; exact at the rank (stream 5 of 16, inner 4 of 12)."""
    keys = jax.random.split(jax.random.PRNGKey(2), 8)
    blocks = [{"inner": _dense(keys[1 + 2 * i], 16, 12, repeat=4),
               "outer": _dense(keys[2 + 2 * i], 12, 16, repeat=5, scale=0.5)} for i in range(3)]
    params = {"inp": _dense(keys[0], 2, 16, repeat=5), "blocks": _stack(blocks),
              "out": _dense(keys[-1], 16, 1)}

    def fn(p, x):
        s = x @ p["inp"]["kernel"] + p["inp"]["bias"]

        def block(s, b):
            h = jnp.tanh(s @ b["inner"]["kernel"] + b["inner"]["bias"])
            return s + h @ b["outer"]["kernel"] + b["outer"]["bias"], None

        s, _ = jax.lax.scan(block, s, p["blocks"])
        return jnp.tanh(s) @ p["out"]["kernel"] + p["out"]["bias"]

    net = jc.trace(fn, params, X2)
    assert [len(s.parts) for s in net.plan().sets] == [1, 3]      # the stream, the inner stack
    small, _ = jc.compress(net, jc.collocation(4, widths=(5, 4)), domain=BALL)
    shapes = jax.tree.map(jnp.shape, small.params["blocks"])
    assert shapes == {"inner": {"kernel": (3, 5, 4), "bias": (3, 4)},
                      "outer": {"kernel": (3, 4, 5), "bias": (3, 5)}}
    assert _error(fn, params, small) < 1e-12
    with pytest.raises(ValueError, match=r"gives 3 widths; this traced network has 2 .*groups "
                                         r"2, 4, 6 \(a stack under scan: one width\)"):
        jc.compress(net, jc.collocation(4, widths=(5, 4, 4)), domain=BALL)


def test_what_a_scan_cannot_keep_stacked_is_pinned_with_the_reason():
    """Per-iteration outputs ``ys`` stacked into the output, a kernel closed over by the body
    (every iteration's layer), a stacked leaf also read whole: the stack is pinned (every
    layer of it: they keep one width), each with its reason. A reverse scan whose ``ys``
    nothing reads compresses."""
    params = _params(3, 8, 3)

    def stacked_output(p, x):
        h = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])

        def layer(h, w):
            h = jnp.tanh(h @ w["kernel"] + w["bias"])
            return h, h

        h, ys = jax.lax.scan(layer, h, p["stack"])
        return (h + jnp.sum(ys, axis=0)) @ p["out"]["kernel"]

    net = jc.trace(stacked_output, params, X2)
    text = str(net)
    assert "stacked as the per-iteration outputs ys of a scan" in text and not net.compressible
    assert "keeps the width of group 2 (the layers of a scan stay stacked" in text
    assert "test_trace_scan.py" in text                   # the user's line, not the library's

    def closed_over(p, x):
        h = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])
        w = p["stack"]["kernel"][0]
        h, _ = jax.lax.scan(lambda h, _: (jnp.tanh(h @ w), None), h, None, length=3)
        return h @ p["out"]["kernel"]

    text = str(jc.trace(closed_over, params, X2))
    assert ("the rows of ['stack']['kernel'][0] read group 1 at one call and group 2 at "
            "another") in text

    def shared(p, x):
        return scanned(p, x) + jnp.sum(p["stack"]["bias"])

    net = jc.trace(shared, params, X2)
    assert ("the leaf ['stack']['bias'][0] is read 2 times, 1 of them other than as this "
            "network's weights (shared weights)") in str(net)
    pin = next(line for line in str(net).splitlines() if "is read 2 times" in line)
    assert "test_trace_scan.py:" in pin, pin  # the user's line that computes the group
    assert not net.compressible

    def reverse(p, x):
        h = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])

        def layer(h, w):
            h = jnp.tanh(h @ w["kernel"] + w["bias"])
            return h, h

        h, _ = jax.lax.scan(layer, h, p["stack"], reverse=True)
        return h @ p["out"]["kernel"] + p["out"]["bias"]

    net = jc.trace(reverse, params, X2)
    assert [g.stack for g in net.groups] == [None, 2, 1, 0, None]
    small, info = jc.compress(net, jc.collocation(2), domain=BALL)
    assert small.params["stack"]["kernel"].shape == (3, 6, 6)
    np.testing.assert_allclose(_error(reverse, params, small), info.error_estimate, rtol=1e-6)


def test_flax_scans_through_trace_module():
    """``nnx.scan`` over an ``nnx.vmap``-built stack of Linears and linen's ``nn.scan`` lower
    to ``scan``: ``jc.trace_module`` compresses both with the stack kept stacked, and
    ``small.module`` (the rebuilt module) computes the compressed function."""
    nnx = pytest.importorskip("flax.nnx")
    nn = pytest.importorskip("flax.linen")
    pts = error_points(BALL, dtype=jnp.float32)
    x = jnp.zeros((4, 2), jnp.float32)

    class Block(nnx.Module):
        def __init__(self, w, rngs):
            self.lin = nnx.Linear(w, w, rngs=rngs)

    class Net(nnx.Module):
        def __init__(self, rngs, w=16, depth=2):
            self.inp = nnx.Linear(2, w, rngs=rngs)

            @nnx.split_rngs(splits=depth)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def make(rngs):
                return Block(w, rngs)

            self.blocks = make(rngs)
            self.out = nnx.Linear(w, 1, rngs=rngs)

        def __call__(self, x):
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def step(h, block):
                return jnp.tanh(block.lin(h))

            return self.out(step(jnp.tanh(self.inp(x)), self.blocks))

    class Layer(nn.Module):
        w: int

        @nn.compact
        def __call__(self, h, _):
            return jnp.tanh(nn.Dense(self.w)(h)), None

    class LinenNet(nn.Module):
        w: int = 16

        @nn.compact
        def __call__(self, x):
            stack = nn.scan(Layer, variable_axes={"params": 0}, split_rngs={"params": True},
                            length=2)
            h, _ = stack(self.w)(jnp.tanh(nn.Dense(self.w)(x)), None)
            return nn.Dense(1)(h)

    model = Net(nnx.Rngs(0))
    small, info = jc.compress(jc.trace_module(model, x), jc.collocation(3), domain=BALL)
    assert small.params["blocks"]["lin"]["kernel"].shape == (2, 10, 10)
    call = nnx.jit(lambda m, x: m(x))       # the modules evaluated as one program each
    np.testing.assert_allclose(
        float(np.max(np.abs(np.asarray(call(small.module, pts)) - np.asarray(call(model, pts))))),
        info.error_estimate, rtol=1e-3)
    linen = LinenNet()
    variables = jax.jit(linen.init)(jax.random.PRNGKey(0), x)
    small, info = jc.compress(jc.trace_module(linen, x, variables=variables),
                              jc.collocation(3), domain=BALL)
    assert small.params["params"]["ScanLayer_0"]["Dense_0"]["kernel"].shape == (2, 10, 10)
    assert small.module.w == 10
    np.testing.assert_allclose(float(np.max(np.abs(
        np.asarray(jax.jit(small.module.apply)(small.params, pts))
        - np.asarray(jax.jit(linen.apply)(variables, pts))))),
        info.error_estimate, rtol=1e-3)
