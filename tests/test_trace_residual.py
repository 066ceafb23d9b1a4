"""Residual streams compressed: ``s <- s + block(s)`` ties the stream's
channels into one set across every block that writes it (the input projection, each block's
output kernel and bias) and every kernel that reads it (each block's first kernel, the head).

The exact property: when every writer's output columns repeat ``distinct`` channels (each
channel ``j`` a copy of ``j mod distinct``), the stream's values are repeated alike in every
block, so the features stacked over every tensor that reads the stream have rank
``<= distinct``, and one kept set of ``distinct`` channels reproduces the network to rounding.
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


def _dense(key, a, b, *, scale=1.0, repeat=None):
    """A kernel ``(a, b)`` and bias; with ``repeat``, output ``j`` a copy of ``j mod repeat``."""
    k1, k2 = jax.random.split(key)
    cols = b if repeat is None else repeat
    # the arithmetic on the host: run on the device it compiled a program per shape
    w = scale * np.asarray(draws.normal(k1, (a, cols), jnp.float64)) / np.sqrt(a)
    bias = 0.1 * np.asarray(draws.normal(k2, (cols,), jnp.float64))
    idx = np.arange(b) % cols
    return {"kernel": jax.device_put(w[:, idx]), "bias": jax.device_put(bias[idx])}


def _params(seed, *, stream, inner, blocks, distinct=None, inner_distinct=None):
    # indexed on the host (on the device, each index compiled a slice)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(seed), 2 * blocks + 2))
    return {"inp": _dense(keys[0], 2, stream, repeat=distinct),
            "blocks": [{"inner": _dense(keys[1 + 2 * i], stream, inner, repeat=inner_distinct),
                        "outer": _dense(keys[2 + 2 * i], inner, stream, scale=0.5,
                                        repeat=distinct)}
                       for i in range(blocks)],
            "out": _dense(keys[-1], stream, 1)}


def residual_mlp(p, x):
    """A linear input projection writes the stream; blocks ``s + tanh(s W_i + b_i) W_o + b_o``;
    the head reads ``tanh(s)``."""
    s = x @ p["inp"]["kernel"] + p["inp"]["bias"]
    for blk in p["blocks"]:
        h = jnp.tanh(s @ blk["inner"]["kernel"] + blk["inner"]["bias"])
        s = s + h @ blk["outer"]["kernel"] + blk["outer"]["bias"]
    return jnp.tanh(s) @ p["out"]["kernel"] + p["out"]["bias"]


def _error(fn, teacher, small, domain=BALL):
    """``max |fn(teacher) - fn(small.params)|`` over the error points, relative to the
    teacher's largest output; the user's fn on the small params is ``small(x)``. (``fn`` in
    one jitted program and the rest on the host: op by op, each operation and shape compiled a
    program of its own.)"""
    pts = error_points(domain, dtype=jnp.float64)
    run = jax.jit(fn)
    y, ys = np.asarray(run(teacher, pts)), np.asarray(run(small.params, pts))
    np.testing.assert_allclose(ys, small(pts), rtol=1e-12, atol=1e-12)
    return float(np.max(np.abs(y - ys)) / np.max(np.abs(y)))


def test_the_stream_is_one_tied_set_of_every_writer_and_reader():
    params = _params(0, stream=16, inner=12, blocks=3)
    net = jc.trace(residual_mlp, params, X2)
    stream = net.groups[0]
    assert stream.tied == (1, 3, 5, 7) and not stream.pinned
    (s,) = [s for s in net.plan().sets if len(s.members) > 1]
    paths = {net.paths[p.leaf] for p in s.producers}
    assert paths == {"['inp']['kernel']", "['inp']['bias']"} | {
        f"['blocks'][{i}]['outer']['{n}']" for i in range(3) for n in ("kernel", "bias")}
    assert {net.paths[r.leaf] for r in s.readers} == {
        "['out']['kernel']"} | {f"['blocks'][{i}]['inner']['kernel']" for i in range(3)}
    assert len(s.tensors()) == 4          # the stream before each block and tanh(s) at the head
    assert "groups 1, 3, 5, 7 are tied by products or sums" in str(net)


@pytest.mark.parametrize("layer_order", ["forward", "backward"])
def test_rank_deficient_stream_is_reproduced_at_its_rank(layer_order):
    """16 stream channels, 5 distinct; 12 inner neurons, 4 distinct: kept at widths 5 and 4
    (every writer's columns sliced, every reader's rows re-weighted from its own tensor), the
    network is the teacher's to float64 rounding, in either layer order."""
    params = _params(1, stream=16, inner=12, blocks=3, distinct=5, inner_distinct=4)
    net = jc.trace(residual_mlp, params, X2)
    method = jc.collocation(4, widths=(5, 4, 4, 4), layer_order=layer_order)
    small, info = jc.compress(net, method, domain=BALL)
    p = small.params
    assert p["inp"]["kernel"].shape == (2, 5) and p["out"]["kernel"].shape == (5, 1)
    assert all(b["inner"]["kernel"].shape == (5, 4) and b["outer"]["kernel"].shape == (4, 5)
               and b["outer"]["bias"].shape == (5,) for b in p["blocks"])
    assert _error(residual_mlp, params, small) < 1e-11
    assert float(info.error_estimate) < 1e-10


def test_a_stream_shrinks_below_its_width_within_1e_3():
    """A random residual MLP (stream 40, two blocks of 24, tanh input projection): at order 6
    the stream keeps 28 channels (D_6) and the output stays within 1e-3 relative (measured
    4.2e-4)."""
    def fn(p, x):
        s = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])
        for blk in p["blocks"]:
            h = jnp.tanh(s @ blk["inner"]["kernel"] + blk["inner"]["bias"])
            s = s + h @ blk["outer"]["kernel"] + blk["outer"]["bias"]
        return s @ p["out"]["kernel"] + p["out"]["bias"]

    params = _params(0, stream=40, inner=24, blocks=2)
    small, info = jc.compress(jc.trace(fn, params, X2), jc.collocation(6), domain=BALL)
    assert small.params["inp"]["kernel"].shape == (2, 28)
    assert small.params["blocks"][1]["outer"]["kernel"].shape == (24, 28)
    assert _error(fn, params, small) < 1e-3


def test_a_stream_scaled_by_a_parameter_expression():
    """PirateNet's update ``alpha f + (1 - alpha) s`` on a stream written by a dense input
    projection: ``1 - alpha`` is one number computed from parameters, the same function of
    every channel, so the stream is still one set (reproduced at its rank)."""
    params = _params(2, stream=12, inner=8, blocks=2, distinct=4)
    for blk, a in zip(params["blocks"], (0.3, 0.6), strict=True):
        blk["alpha"] = jnp.asarray(a, jnp.float64)

    def fn(p, x):
        s = jnp.tanh(x @ p["inp"]["kernel"] + p["inp"]["bias"])
        for blk in p["blocks"]:
            h = jnp.tanh(s @ blk["inner"]["kernel"] + blk["inner"]["bias"])
            f = jnp.tanh(h @ blk["outer"]["kernel"] + blk["outer"]["bias"])
            a = blk["alpha"]
            s = a * f + (1 - a) * s
        return s @ p["out"]["kernel"] + p["out"]["bias"]

    net = jc.trace(fn, params, X2)
    assert net.groups[0].tied and not net.groups[0].pinned
    small, _ = jc.compress(net, jc.collocation(4, widths=(4, 8, 8)), domain=BALL)
    assert small.params["inp"]["kernel"].shape == (2, 4)
    assert _error(fn, params, small) < 1e-11


def test_a_norm_over_the_channels_pins_the_stream_with_the_reason():
    """Pre-norm blocks ``s + f(LayerNorm(s))``: the norm is not linear in the channels, so the
    stream is pinned (the reduction named), and the inner layers are still compressed."""
    params = _params(3, stream=16, inner=24, blocks=2)

    def fn(p, x):
        s = x @ p["inp"]["kernel"] + p["inp"]["bias"]
        for blk in p["blocks"]:
            c = s - jnp.mean(s, axis=-1, keepdims=True)
            n = c / jnp.sqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-6)
            h = jnp.tanh(n @ blk["inner"]["kernel"] + blk["inner"]["bias"])
            s = s + h @ blk["outer"]["kernel"] + blk["outer"]["bias"]
        return s @ p["out"]["kernel"] + p["out"]["bias"]

    net = jc.trace(fn, params, X2)
    assert net.groups[0].pinned and net.groups[0].tied
    assert "feeds a reduction `reduce_sum` over its neurons" in str(net)
    assert [g.index for g in net.compressible] == [2, 4]
    small, _ = jc.compress(net, jc.collocation(4), domain=BALL)
    assert small.params["inp"]["kernel"].shape == (2, 16)
    assert small.params["blocks"][0]["inner"]["kernel"].shape == (16, 15)


def test_blocks_that_do_not_line_up_pin_with_the_reason():
    """A Fourier embedding ``[cos(xB), sin(xB)]`` (one group twice) added to one layer's
    neurons (PirateNet's stream): neuron i of the sum is not one neuron of each; pinned,
    named. (jaxpi's PirateNet writes its stream this way.)"""
    b = draws.normal(jax.random.PRNGKey(4), (2, 6), jnp.float64)
    params = {"b": b, "d": _dense(jax.random.PRNGKey(5), 12, 12),
              "out": _dense(jax.random.PRNGKey(6), 12, 1)}

    def fn(p, x):
        z = x @ p["b"]
        s = jnp.concatenate([jnp.cos(z), jnp.sin(z)], axis=-1)
        s = s + jnp.tanh(s @ p["d"]["kernel"] + p["d"]["bias"])
        return s @ p["out"]["kernel"] + p["out"]["bias"]

    text = str(jc.trace(fn, params, X2))
    assert "its operands' neuron blocks differ, 6+6 on axis 1 against 12 on axis 1" in text
