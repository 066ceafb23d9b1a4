"""The zoo of real coordinate-network architectures through ``jc.trace``.

Every model of ``benchmarks/zoo_models.py`` (nnx with a custom ``__call__``, linen
``@nn.compact``, ``eqx.nn.MLP`` under ``vmap``, SIREN, Fourier-feature tanh / ReLU MLPs, the
IGR-style SDF network, the PINN's tanh MLP) is traced, printed and compressed on a small
instance, and the user's own function is checked on ``small.params``.

The compression test uses an exact property: a teacher whose every hidden layer has only
``m = 6`` distinct neurons (each repeated) has features of rank ``<= 6`` in every layer, so
collocation at order 3 (``D_3 >= 10`` kept neurons) reproduces it to rounding, whatever the
architecture and activation (ReLU included).

The chains (nnx_custom, linen_compact, eqx_mlp, siren, pinn_tanh) go through the one driver; the
Fourier-feature nets and the SDF network (the input concatenated to a layer) are compressed
group by group.
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from programs import programs_compiled

import jaxcompress as jc
from jaxcompress.measure import error_points

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import zoo_models as Z  # noqa: E402

pytest.importorskip("flax.nnx")

DISTINCT = 6
ORDER = 3


#: The default run: a traced activation (SIREN's sin(30 u)) and a non-analytic network
#: compressed group by group (Fourier features, ReLU); the other six run with -m slow (their
#: mechanisms have fast tests of their own: Equinox, the IGR SDF net and the Fourier tanh net in
#: test_trace_graphs.py, nnx / linen chains in test_trace.py and test_trace_module.py).
DEFAULT = ("siren", "fourier_relu")


def _param(name):
    return pytest.param(name, id=name, marks=() if name in DEFAULT else (pytest.mark.slow,))


pytestmark = pytest.mark.usefixtures("user_broadcasting")   # x @ w + b, as users write it


def _build(name) -> Z.ZooModel:
    if name == "eqx_mlp":
        pytest.importorskip("equinox")
    return Z.build(name, "small")


def _rank_deficient(model: Z.ZooModel, distinct: int):
    """``model.params`` with hidden neuron ``j`` of every hidden layer a copy of neuron
    ``j mod distinct`` (its kernel column, or row for Equinox's ``(out, in)`` weights, and bias
    entry): the same architecture, features of rank ``<= distinct`` in every hidden layer."""
    axis = 0 if model.name == "eqx_mlp" else 1
    leaves, tree = jax.tree_util.tree_flatten(model.params)
    arrays = [i for i, leaf in enumerate(leaves) if hasattr(leaf, "ndim")]
    kernels = [i for i in arrays if leaves[i].ndim == 2]
    biases = [i for i in arrays if leaves[i].ndim == 1]
    assert len(kernels) == len(biases) == len(model.hidden) + 1
    for k, b in list(zip(kernels, biases, strict=True))[:-1]:
        idx = np.arange(leaves[b].shape[0]) % distinct
        leaves[k] = jax.device_put(np.take(np.asarray(leaves[k]), idx, axis=axis))
        leaves[b] = jax.device_put(np.asarray(leaves[b])[idx])
    return jax.tree_util.tree_unflatten(tree, leaves)


def _user_fn_on(model: Z.ZooModel, small_params):
    """The user's own function on the compressed params. linen's ``Dense`` checks its kernel
    against its ``features`` field, so for linen the user's module is cloned with the new
    widths (the module rebuilt); every other model takes the smaller leaves as they are."""
    if model.name == "linen_compact":
        widths = model.hidden_widths(small_params)
        module = model.module.clone(features=(*widths, model.d_out))
        return jax.jit(lambda x: module.apply(small_params, x))
    return jax.jit(lambda x: model.fn(small_params, x))


def _traced(model: Z.ZooModel, params) -> jc.Network:
    """``jc.trace`` of the model, checked to build a Network that prints its table."""
    x = jax.device_put(np.zeros((5, model.d_in), np.float32))
    assert jax.eval_shape(lambda x: model.fn(params, x), x).shape == (5, model.d_out)
    assert model.hidden_widths(params) == list(model.hidden)
    net = jc.trace(model.fn, params, x)
    assert isinstance(net, jc.Network)
    text = str(net)
    assert text.startswith("jc.trace:") and f"float32{[5, model.d_in]}" in text
    return net


@pytest.mark.parametrize("name", [_param(n) for n in Z.MODELS])
def test_compress_rank_deficient(name):
    """Collocation keeps ``min(D_3, width)`` neurons per hidden layer; the user's function on
    ``small.params`` is ``small(x)``; both equal the (rank-deficient) teacher to rounding, and
    the reported error estimate is the error measured."""
    model = _build(name)
    teacher = _rank_deficient(model, DISTINCT)
    net = _traced(model, teacher)
    domain = jc.Ball(model.d_in, 1.0)
    small, info = jc.compress(net, jc.collocation(ORDER), domain=domain)
    d_k = jc.taylor.num_monomials(model.d_in, ORDER)
    assert model.hidden_widths(small.params) == [min(d_k, w) for w in model.hidden]
    assert jax.tree.structure(small.params) == jax.tree.structure(teacher)
    pts = error_points(domain, dtype=jnp.float32)
    y_small = np.asarray(small(pts))
    y_user = np.asarray(_user_fn_on(model, small.params)(pts))
    np.testing.assert_allclose(y_user, y_small, rtol=1e-5, atol=1e-6)
    y_teacher = np.asarray(jax.jit(model.fn)(teacher, pts))
    scale = 1.0 + float(np.max(np.abs(y_teacher)))
    err = float(np.max(np.abs(y_teacher - y_small)))
    assert np.isfinite(err) and err <= 1e-5 * scale, (err, scale)
    np.testing.assert_allclose(err, float(info.error_estimate), rtol=1e-3, atol=1e-7)


def test_zoo_models_are_what_they_say():
    """SIREN's initialisation bounds, the Fourier matrix fixed (not a parameter), the SDF's
    geometric initialisation (near the SDF of a sphere) and skip width."""
    s = Z.build("siren", "small", hidden=[64, 64])
    first, second = np.asarray(s.params[0]["kernel"]), np.asarray(s.params[1]["kernel"])
    assert float(np.max(np.abs(first))) <= 1 / 2 and float(np.max(np.abs(first))) > 0.45
    bound = float(np.sqrt(6 / 64)) / Z.OMEGA_0
    assert bound * 0.9 < float(np.max(np.abs(second))) <= bound
    f = Z.build("fourier_tanh", "small")
    assert f.params[0]["kernel"].shape == (2 * Z.SIZES["fourier_tanh"]["small"]["features"], 24)
    assert len(jax.tree_util.tree_leaves(f.params)) == 2 * (len(f.hidden) + 1)
    assert Z.build("sdf_igr", "small").params[2]["kernel"].shape == (29 + 3, 32)
    sdf = Z.build("sdf_igr", "small", hidden=[128, 125, 128])    # wide enough to look like one
    assert sdf.params[2]["kernel"].shape == (125 + 3, 128)
    pts = np.random.default_rng(0).uniform(-1, 1, (1024, 3)).astype(np.float32)
    sphere = np.linalg.norm(pts, axis=-1) - np.float32(Z.SDF_RADIUS)
    got = np.asarray(jax.jit(sdf.fn)(sdf.params, pts))[:, 0]
    assert float(np.corrcoef(got, sphere)[0, 1]) > 0.9
    assert float(np.mean(np.abs(got - sphere))) < 0.15


@pytest.mark.parametrize("name", ["pinn_tanh", "modified_mlp", "sdf_igr"])
def test_a_compiled_draw_is_the_eager_draw_bit_for_bit(name):
    """``Z.build`` draws a float32 model's parameters in one compiled program: the same bits
    as the builder run eagerly (a division by a constant, a log-normal, a geometric init), and
    a second build compiles nothing."""
    model = Z.build(name, "small")
    cfg = dict(Z.SIZES[name]["small"])
    hidden = list(cfg.pop("hidden"))
    task = Z.TASKS[name]
    eager = Z._BUILDERS[name](jax.random.PRNGKey(0), Z.D_IN[task], hidden, Z.D_OUT[task],
                              jnp.float32, **cfg)[1]
    a, b = jax.tree_util.tree_leaves(model.params), jax.tree_util.tree_leaves(eager)
    assert len(a) == len(b) and name in Z._JITTED
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    again, compiled = programs_compiled(lambda: Z.build(name, "small"))
    assert compiled == [] and again.fn is model.fn
