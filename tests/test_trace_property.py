"""A property test of the trace: random architectures and random broken
functions.

**Architectures.** Drawn: the input width, the depth, the activation of each layer (tanh, sin,
the logistic sigmoid, softplus, GELU), an input skip into a later layer, a gate (two groups
multiplied elementwise: a tied set), a stack of layers under ``jax.lax.scan`` (stacked
parameters, kept stacked: one width), a residual block ``h + tanh(h W_i) W_o`` (a stream tied
across it), one or two output heads (a tuple), and the network called twice inside ``fn``
(``f(x) + f(-x)``, or ``f(x) - f(x0)`` at a fixed point: every group computed at two sites,
each reader fitted to both) or differentiated inside it (``jax.grad`` of the summed outputs by
``x``: every group read through its cotangent too, the heads only through the derivative; drawn
without residual streams and scans), or ``jax.vmap``-ed over two members' stacked
parameters (an ensemble, summed: one width, each member its own neurons). Every hidden neuron
is written twice (its producer columns repeated), so each layer has rank ``r`` at width
``2 r``: compressed by collocation at widths ``r`` per set, the result must equal the teacher
to rounding (float64), whatever the graph's readers, layouts, ties and stacks. A wrong row or
column anywhere in the front end's bookkeeping breaks the equality.

**Broken functions.** Drawn: Python control flow on values, a mean over the batch, dropout with
a fixed key, an ``x`` of the wrong width. Each must end in a jaxcompress error that names the
verb (``trace: ...``), never a raw JAX error and never a returned network.

Seeded (``derandomize=True``); the default profile runs in the default suite, ``-m slow`` a
larger one.
"""

from __future__ import annotations

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import jaxcompress as jc  # noqa: E402

jax.config.update("jax_enable_x64", True)
pytestmark = pytest.mark.usefixtures("user_broadcasting")   # users' code broadcasts biases

ACTIVATIONS = {"tanh": jnp.tanh, "sin": jnp.sin, "sigmoid": jax.nn.sigmoid,
               "softplus": jax.nn.softplus,
               "gelu": lambda u: jax.nn.gelu(u, approximate=True)}


@st.composite
def architectures(draw):
    d_in = draw(st.integers(1, 3))
    depth = draw(st.integers(1, 3))
    r = draw(st.integers(2, 3))
    acts = draw(st.lists(st.sampled_from(sorted(ACTIVATIONS)), min_size=depth,
                         max_size=depth))
    skip = depth > 1 and draw(st.booleans())      # x concatenated into the last hidden layer
    gate = draw(st.booleans())                    # the first layer: act(u) * tanh(v)
    scan = draw(st.integers(0, 2))                # layers under scan after the hidden ones
    residual = draw(st.booleans())                # a residual block before the heads
    heads = draw(st.integers(1, 2))
    # the network called twice, or differentiated inside fn
    twice = draw(st.sampled_from(["", "even", "anchored", "grad", "members"]))
    if twice == "grad":           # (under jax.grad: no residual stream, no scan)
        scan, residual = 0, False
    if twice == "members":        # (a vmapped ensemble: no scan inside the members)
        scan = 0
    seed = draw(st.integers(0, 2**16))
    return {"d_in": d_in, "depth": depth, "r": r, "acts": acts, "skip": skip, "gate": gate,
            "scan": scan, "residual": residual, "heads": heads, "twice": twice, "seed": seed}


def _doubled(key, fan_in, r):
    """A kernel and bias of ``2 r`` neurons, neuron ``j + r`` a copy of neuron ``j``."""
    k1, k2 = jax.random.split(key)
    w = np.asarray(draws.normal(k1, (fan_in, r)) / np.sqrt(fan_in))
    b = 0.3 * np.asarray(draws.normal(k2, (r,)))
    # the copies made on the host: on the device they compiled a program per shape
    return {"w": jax.device_put(np.concatenate([w, w], 1)),
            "b": jax.device_put(np.concatenate([b, b]))}


def build(arch):
    """``(fn, params)`` of the drawn architecture (a vmapped ensemble: two members of it,
    summed)."""
    if arch.get("twice") == "members":
        one = dict(arch, twice="")
        fn, first = build(one)
        _, second = build(dict(one, seed=one["seed"] + 1))

        def members(p, x):
            return jax.tree.map(lambda y: y.sum(0), jax.vmap(fn, in_axes=(0, None))(p, x))

        return members, jax.tree.map(lambda *a: jax.device_put(np.stack(a)), first, second)
    d_in, r, depth = arch["d_in"], arch["r"], arch["depth"]
    keys = iter(jax.random.split(jax.random.PRNGKey(arch["seed"]), 2 * depth + 8))
    params = {"hidden": [], "heads": []}
    fan_in = d_in
    for i in range(depth):
        extra = d_in if (arch["skip"] and i == depth - 1) else 0
        params["hidden"].append(_doubled(next(keys), fan_in + extra, r))
        if i == 0 and arch["gate"]:
            params["gate"] = _doubled(next(keys), fan_in, r)
        fan_in = 2 * r
    if arch["scan"]:
        layers = [_doubled(next(keys), 2 * r, r) for _ in range(arch["scan"])]
        params["stack"] = jax.tree.map(lambda *a: jax.device_put(np.stack(a)), *layers)
    if arch["residual"]:
        params["block"] = {"inner": _doubled(next(keys), 2 * r, r),
                           "outer": _doubled(next(keys), 2 * r, r)}
    for h in range(arch["heads"]):
        w = draws.normal(next(keys), (2 * r, h + 1)) / np.sqrt(2 * r)
        params["heads"].append({"w": w, "b": jnp.full((h + 1,), 0.1)})

    def fn(p, x):
        h = x
        for i, layer in enumerate(p["hidden"]):
            if arch["skip"] and i == arch["depth"] - 1:
                h = jnp.concatenate([h, x], -1)
            u = h @ layer["w"] + layer["b"]
            out = ACTIVATIONS[arch["acts"][i]](u)
            if i == 0 and arch["gate"]:
                out = out * jnp.tanh(h @ p["gate"]["w"] + p["gate"]["b"])
            h = out
        if arch["scan"]:
            def layer(h, w):
                return jnp.tanh(h @ w["w"] + w["b"]), None
            h, _ = jax.lax.scan(layer, h, p["stack"])
        if arch["residual"]:
            blk = p["block"]
            inner = jnp.tanh(h @ blk["inner"]["w"] + blk["inner"]["b"])
            h = h + 0.5 * (inner @ blk["outer"]["w"] + blk["outer"]["b"])
        ys = tuple(h @ head["w"] + head["b"] for head in p["heads"])
        return ys if len(ys) > 1 else ys[0]

    if not arch.get("twice"):
        return fn, params
    x0 = jnp.linspace(-0.5, 0.5, d_in)[None, :]

    def gradient(p, x):
        return jax.grad(lambda x: sum(jnp.sum(y) for y in jax.tree.leaves(fn(p, x))))(x)

    if arch["twice"] == "grad":
        return gradient, params

    def twice(p, x):
        other = fn(p, -x) if arch["twice"] == "even" else jax.tree.map(
            lambda y: -y, fn(p, x0))
        return jax.tree.map(jnp.add, fn(p, x), other)

    return twice, params


def _check_architecture(arch):
    note(repr(arch))
    fn, params = build(arch)
    x = jnp.zeros((4, arch["d_in"]))
    net = jc.trace(fn, params, x)
    sets = len(net.plan().sets)
    # the gate is tied to its layer, the scanned layers keep the last hidden layer's width
    # (one stack), the residual stream ties the block's output to it: the inner layer is new
    assert sets == arch["depth"] + arch["residual"], str(net)
    ball = jc.Ball(arch["d_in"], 1.0)
    small, _ = jc.compress(net, jc.collocation(4, widths=(arch["r"],) * sets), domain=ball)
    assert jc.layer_sizes(small)[1:1 + sets] == [arch["r"]] * sets
    pts = ball.sobol(64, skip=7)
    want, got = jax.jit(fn)(params, pts), small(pts)     # the teacher: one program
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                    strict=True):
        a, b = np.asarray(a), np.asarray(b)
        scale = 1.0 + float(np.max(np.abs(b)))
        assert float(np.max(np.abs(a - b))) <= 1e-7 * scale, (arch, float(np.max(
            np.abs(a - b))))


BROKEN = ("branch", "batch_mean", "dropout", "wrong_width")


def _broken(kind, params):
    def base(p, x):
        return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]

    if kind == "branch":
        return lambda p, x: base(p, x) if jnp.sum(x) > 0 else -base(p, x), 2
    if kind == "batch_mean":
        return lambda p, x: base(p, x - jnp.mean(x, 0)), 2
    if kind == "dropout":
        def drop(p, x):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            keep = jax.random.bernoulli(jax.random.PRNGKey(0), 0.8, h.shape)
            return jnp.where(keep, h, 0.0) @ p["w2"]
        return drop, 2
    return base, 3                                   # x of 3 columns for a 2-input kernel


def _check_broken(kind, width, seed):
    note(f"{kind}, width {width}, seed {seed}")
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    params = {"w1": draws.normal(k1, (2, width)), "b1": jax.device_put(np.zeros(width)),
              "w2": draws.normal(k2, (width, 1))}
    fn, d_in = _broken(kind, params)
    with pytest.raises((ValueError, TypeError)) as err:
        net = jc.trace(fn, params, jnp.zeros((4, d_in)))
        jc.compress(net, jc.collocation(2), domain=jc.Ball(d_in, 1.0))
    assert str(err.value).startswith("trace: "), (kind, str(err.value)[:200])


def _profile(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(hypothesis.HealthCheck))


@_profile(3)
@given(architectures())
def test_random_architectures_compress_to_the_teacher_at_their_rank(arch):
    _check_architecture(arch)


@_profile(8)
@given(st.sampled_from(BROKEN), st.integers(2, 8), st.integers(0, 2**16))
def test_random_broken_functions_end_in_a_jaxcompress_error(kind, width, seed):
    _check_broken(kind, width, seed)


@pytest.mark.slow
@_profile(60)
@given(architectures())
def test_random_architectures_large(arch):
    _check_architecture(arch)


@pytest.mark.slow
@_profile(40)
@given(st.sampled_from(BROKEN), st.integers(2, 16), st.integers(0, 2**16))
def test_random_broken_functions_large(kind, width, seed):
    _check_broken(kind, width, seed)
