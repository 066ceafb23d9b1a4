"""Tied neuron groups: gates shared by several layers (jaxpi's modified MLP and
PirateNet), weight-factorised kernels ``g * v``, Fourier embeddings with a trained ``B``,
residual streams and a DeepONet's latent dimension, through ``jc.trace``.

The exact property used throughout: a network whose every compressible group has only
``distinct`` different neurons (each repeated: every producer leaf's slice copied) has features
of rank ``<= distinct`` in every consumed tensor of every tied set, *jointly*, so the joint step
(one kept set, each consumer re-weighted from its own tensor) reproduces it to rounding.
"""

import sys
from pathlib import Path

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.measure import error_points

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import zoo_models as Z  # noqa: E402

X2 = jnp.zeros((4, 2), jnp.float32)
BALL = jc.Ball(2, 1.0)


pytestmark = pytest.mark.usefixtures("user_broadcasting")   # x @ w + b, as users write it


def _rank_deficient(net: jc.Network, params, distinct: int):
    """``params`` with neuron ``j`` of every compressible group a copy of ``j mod distinct``
    (every producer leaf: kernel columns, biases, per-neuron scales ``g``)."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    for g in net.compressible:
        idx = np.arange(g.width) % distinct
        for leaf, axis in g.producers():    # (on the host: no program per leaf shape)
            leaves[leaf] = jax.device_put(np.take(np.asarray(leaves[leaf]), idx, axis=axis))
    return jax.tree_util.tree_unflatten(tree, leaves)


def _exact(fn, teacher, small, info, domain):
    """The user's fn on small.params is small(x), equal to the teacher to rounding, and the
    reported error estimate is the error measured."""
    pts = error_points(domain, dtype=jnp.float32)
    y_user = np.asarray(jax.jit(fn)(small.params, pts))     # one program, not op by op
    np.testing.assert_allclose(y_user, np.asarray(small(pts)), rtol=1e-6, atol=1e-6)
    y = np.asarray(jax.jit(fn)(teacher, pts))
    err = float(np.max(np.abs(y - y_user)))
    assert err <= 1e-5 * (1 + float(np.max(np.abs(y)))), err
    np.testing.assert_allclose(err, float(info.error_estimate), rtol=1e-3, atol=2e-6)


def _dense(key, a, b):
    k1, k2 = jax.random.split(key)
    return {"kernel": draws.normal(k1, (a, b), jnp.float32) / np.float32(np.sqrt(a)),
            "bias": 0.1 * draws.normal(k2, (b,), jnp.float32)}


def _gated(p, x):
    """Gates shared by three layers: ``h <- tanh(h W + b); h <- h U + (1 - h) V``."""
    u = jnp.tanh(x @ p["u"]["kernel"] + p["u"]["bias"])
    v = jnp.tanh(x @ p["v"]["kernel"] + p["v"]["bias"])
    h = x
    for layer in p["layers"]:
        h = jnp.tanh(h @ layer["kernel"] + layer["bias"])
        h = h * u + (1 - h) * v
    return h @ p["out"]["kernel"] + p["out"]["bias"]


def _gated_params(width=24):
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    return {"u": _dense(k[0], 2, width), "v": _dense(k[1], 2, width),
            "layers": [_dense(k[2], 2, width), _dense(k[3], width, width),
                       _dense(k[4], width, width)], "out": _dense(k[5], width, 1)}


def test_gated_layers_form_one_tied_set_compressed_exactly():
    """U, V and the three gated layers are one set; the middle kernels are sliced in their
    columns and re-weighted in their rows; a rank-6 set is reproduced to rounding by both
    feature maps and both layer orders."""
    params = _gated_params()
    net = jc.trace(_gated, params, X2)
    assert [g.tied for g in net.groups[:5]] == [(1, 2, 3, 4, 5)] * 5
    assert "tied: groups 1, 2, 3, 4, 5" in str(net) and "tied by products" in str(net)
    assert len(net.sets()) == 1 and not net.groups[5].tied
    teacher = _rank_deficient(net, params, 6)
    net = jc.trace(_gated, teacher, X2)
    for method in (jc.collocation(3), jc.derivative_matching(3)):
        small, info = jc.compress(net, method, domain=BALL)
        shapes = jax.tree.map(jnp.shape, small.params)
        assert shapes["layers"][1]["kernel"] == (10, 10) and shapes["u"]["bias"] == (10,)
        assert shapes["out"]["kernel"] == (10, 1)
        assert float(info.layers[0].residual) < 1e-5
        _exact(_gated, teacher, small, info, BALL)


def test_tied_set_not_exact_reports_its_error():
    """A full-rank gated network: the joint step's error is what the estimate says."""
    params = _gated_params()
    net = jc.trace(_gated, params, X2)
    small, info = jc.compress(net, jc.collocation(4), domain=BALL)
    pts = error_points(BALL, dtype=jnp.float32)
    gated = jax.jit(_gated)         # one program, not op by op
    y, ys = np.asarray(gated(params, pts)), np.asarray(gated(small.params, pts))
    err = float(np.max(np.abs(y - ys)))
    np.testing.assert_allclose(err, float(info.error_estimate), rtol=1e-3)
    assert 0 < err < 1.0


def test_widths_are_one_per_set():
    """widths= counts a tied set once; a wrong count or size names the sets."""
    net = jc.trace(_gated, _gated_params(), X2)
    with pytest.raises(ValueError, match=r"gives 5 widths; this traced network has 1 "
                                         r"compressible sets .*: groups 1, 2, 3, 4, 5"):
        jc.compress(net, jc.collocation(3, widths=(8, 8, 8, 8, 8)), domain=BALL)
    with pytest.raises(ValueError, match=r"width 30 for groups 1, 2, 3, 4, 5 must be in \[1, 24\]"):
        jc.compressor(net, jc.collocation(3, widths=(30,)))


def test_residual_add_of_two_groups_ties_them():
    """A gate multiplies, a residual stream adds: both tie the groups into one set."""
    params = _gated_params(12)

    def fn(p, x):
        u = jnp.tanh(x @ p["u"]["kernel"] + p["u"]["bias"])
        h = jnp.tanh(x @ p["layers"][0]["kernel"] + p["layers"][0]["bias"])
        h = h + u
        return h @ p["out"]["kernel"] + p["out"]["bias"]

    net = jc.trace(fn, params, X2)
    assert not net.groups[0].pinned and net.groups[0].tied == (1, 2)


def _model(name, distinct):
    model = Z.build(name, "small")
    x = jnp.zeros((4, model.d_in), jnp.float32)
    net = jc.trace(model.fn, model.params, x)
    teacher = _rank_deficient(net, model.params, distinct)
    return model, teacher, jc.trace(model.fn, teacher, x)


def test_modified_mlp_weight_factorisation_and_fourier_parameter():
    """jaxpi's ModifiedMlp: g * v kernels re-weighted through v (g kept, sliced with the
    neurons), the gates' set compressed jointly, the trained Fourier matrix a group whose
    cos and sin blocks are two tensors of one set."""
    model, teacher, net = _model("modified_mlp", 6)
    fourier, *rest = net.groups
    assert fourier.compressible and len(fourier.consumers) == 6     # 3 kernels x (cos, sin)
    assert [g.tied for g in rest[:4]] == [(2, 3, 4, 5)] * 4
    assert net.paths[rest[0].scales[0]] == "['u']['g']"
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    assert model.hidden_widths(small.params) == [10, 10]
    p = small.params
    assert p["u"]["g"].shape == (10,) and p["layers"][1]["v"].shape == (10, 10)
    assert p["fourier"].shape == (2, 8)          # width 8 <= D_3: kept whole
    _exact(model.fn, teacher, small, info, BALL)
    # the Fourier group itself compressed jointly (cos and sin of one column of B)
    small, info = jc.compress(net, jc.collocation(3, widths=(6, 10)), domain=BALL)
    assert small.params["fourier"].shape == (2, 6) and small.params["u"]["v"].shape == (12, 10)
    _exact(model.fn, teacher, small, info, BALL)


def test_pirate_net_stream_pinned_inner_units_compressed():
    model, teacher, net = _model("pirate_net", 6)
    text = str(net)
    assert net.groups[0].pinned and net.groups[5].pinned            # the stream
    assert [g.index for g in net.compressible] == [2, 3, 4, 5] and "tied" in text
    for method in (jc.collocation(3), jc.derivative_matching(3)):
        small, info = jc.compress(net, method, domain=BALL)
        assert model.hidden_widths(small.params) == [10, 10]
        assert small.params["blocks"][0]["d3"]["v"].shape == (10, 16)
        _exact(model.fn, teacher, small, info, BALL)


def test_residual_mlp_stream_and_inner_layers_compressed():
    """The stream (16 wide, 6 distinct channels) is one tied set across the blocks: at width
    10 it is reproduced with the inner layers."""
    model, teacher, net = _model("residual_mlp", 6)
    assert [g.index for g in net.compressible] == [1, 2, 3, 4, 5]
    assert net.groups[0].tied == (1, 3, 5)
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    assert model.hidden_widths(small.params) == [10, 10]
    assert small.params["inp"]["kernel"].shape == (2, 10)
    _exact(model.fn, teacher, small, info, BALL)


def test_deeponet_trunk_and_latent_dimension():
    """branch(u) . trunk(y): the latent dimension p is the trunk's last group, consumed through
    the branch's last kernel (its columns) and bias; the branch (fixed input functions, no
    dependence on y) is pinned, named."""
    model, teacher, net = _model("deeponet", 3)
    assert [g.index for g in net.compressible] == [1, 2]
    assert "does not depend on the input x" in str(net)
    line = jc.Box([0.0], [1.0])
    small, info = jc.compress(net, jc.collocation(3), domain=line)
    assert model.hidden_widths(small.params) == [4, 4]
    assert small.params["branch"][1]["kernel"].shape == (24, 4)
    assert small.params["branch"][1]["bias"].shape == (4,)
    _exact(model.fn, teacher, small, info, line)


def test_weight_norm_is_pinned_with_the_reason():
    """v / ||v||: no leaf is linear in the kernel's rows, so the group it reads is pinned."""
    k = jax.random.split(jax.random.PRNGKey(3), 3)
    params = {"l1": _dense(k[0], 2, 12),
              "l2": {"v": draws.normal(k[1], (12, 12), jnp.float32),
                     "g": jnp.ones((12,), jnp.float32)},
              "out": _dense(k[2], 12, 1)}

    def fn(p, x):
        h = jnp.tanh(x @ p["l1"]["kernel"] + p["l1"]["bias"])
        w = p["l2"]["g"] * p["l2"]["v"] / jnp.linalg.norm(p["l2"]["v"], axis=0)
        h = jnp.tanh(h @ w)
        return h @ p["out"]["kernel"] + p["out"]["bias"]

    net = jc.trace(fn, params, X2)
    assert net.groups[0].pinned and "no leaf is linear in its rows" in str(net)
