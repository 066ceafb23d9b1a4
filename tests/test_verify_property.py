"""A soundness property test of ``jc.verify``: random programs, random domains.

**Programs.** Drawn: the input width (1-3), two or three blocks applied to a hidden state of
width 4, each one of a dense ``tanh`` layer, ``sin`` with a frequency up to 30 (SIREN's first
layer), ReLU, a residual add ``h + tanh(h W + b)``, an input skip (``x`` concatenated back in), a
gate ``tanh(h W) * sigmoid(h V)``, a division by a positive quantity, ``log`` of ``1 + exp(.)``
and of ``2 + sin(.)`` (``exp`` / ``log`` of positive values), a ``jax.lax.fori_loop`` with a
static trip count of 2-3, a ``jax.lax.scan`` over stacked layers and a ``jax.lax.cond`` whose
branch a weight selects; then a linear head of one or two outputs. The second network is the
same program with every weight moved by a drawn relative amount. The domain is a Box or a Ball
with drawn centre and size, the Taylor order 0-3, remainders as symbols or radii, the time
budget short (the bracket is sound
at whatever status the search stops: nothing here depends on the machine's speed).

**Properties.** ``upper`` is never below the largest ``|F_a - F_b|`` found by a dense sample of
the domain followed by projected gradient ascent from its best points; ``lower`` is attained:
``|F_a - F_b|(argmax) >= lower`` with ``argmax`` in the domain. Both up to the rounding of JAX's
own float64 evaluation (the verifier bounds the programs in real arithmetic).

Seeded (``derandomize=True``); the default profile runs in the default suite, ``-m slow`` a
larger one. Before loops were read iteration by iteration and order 0 put the box's width into
the input model, both properties failed on drawn examples (a ``fori_loop`` bounded as its first
iteration; every box bounded by its centre).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from jaxcompress.domains import Ball, Box  # noqa: E402
from jaxcompress.verification import verify  # noqa: E402

WIDTH = 4
BLOCKS = ("tanh", "sin", "relu", "residual", "input_skip", "gate", "divide", "exp_log",
          "log_sin", "fori_loop", "scan", "cond")


@st.composite
def cases(draw):
    return {
        "d": draw(st.integers(1, 3)),
        "blocks": draw(st.lists(st.sampled_from(BLOCKS), min_size=2, max_size=3)),
        "frequency": draw(st.sampled_from([1.0, 6.0, 30.0])),
        "trips": draw(st.integers(2, 3)),
        "outputs": draw(st.integers(1, 2)),
        "move": draw(st.sampled_from([1e-3, 3e-2, 0.3])),
        "ball": draw(st.booleans()),
        "size": draw(st.sampled_from([0.05, 0.5, 1.0])),
        "order": draw(st.integers(0, 3)),
        "remainders": draw(st.sampled_from(["symbolic", "radius"])),
        "seed": draw(st.integers(0, 2**16)),
    }


def _weights(case, rng):
    """The weights of every block, drawn on the host (float64)."""
    d = case["d"]

    def dense(m, n, scale=1.5):
        return rng.normal(0.0, scale / np.sqrt(m), (m, n)), rng.normal(0.0, 0.1, (n,))

    params = {"in": dense(d, WIDTH)}
    for i, kind in enumerate(case["blocks"]):
        if kind == "input_skip":
            params[f"b{i}"] = dense(WIDTH + d, WIDTH)
        elif kind in ("gate", "divide"):
            params[f"b{i}"] = dense(WIDTH, WIDTH) + dense(WIDTH, WIDTH)
        elif kind == "scan":
            layers = [dense(WIDTH, WIDTH) for _ in range(case["trips"])]
            params[f"b{i}"] = (np.stack([w for w, _ in layers]), np.stack([b for _, b in layers]))
        elif kind == "cond":
            params[f"b{i}"] = dense(WIDTH, WIDTH) + (np.array(rng.choice([-1.0, 1.0])),)
        else:
            params[f"b{i}"] = dense(WIDTH, WIDTH)
    params["out"] = dense(WIDTH, case["outputs"], scale=1.0)
    return params


def _moved(params, move, rng):
    return jax.tree.map(lambda a: a * (1.0 + move * rng.normal(size=np.shape(a)))
                        if np.ndim(a) else a, params)


def _network(case, params):
    """``f(x)`` of the drawn program on a batch ``(n, d)``."""
    p = jax.tree.map(jax.device_put, params)
    freq, trips = case["frequency"], case["trips"]

    def f(x):
        w, b = p["in"]
        h = jnp.tanh(x @ w + b[None])
        for i, kind in enumerate(case["blocks"]):
            q = p[f"b{i}"]
            if kind == "tanh":
                h = jnp.tanh(h @ q[0] + q[1][None])
            elif kind == "sin":
                h = jnp.sin(freq * (h @ q[0] + q[1][None]))
            elif kind == "relu":
                h = jax.nn.relu(h @ q[0] + q[1][None])
            elif kind == "residual":
                h = h + jnp.tanh(h @ q[0] + q[1][None])
            elif kind == "input_skip":
                h = jnp.tanh(jnp.concatenate([h, x], axis=1) @ q[0] + q[1][None])
            elif kind == "gate":
                h = jnp.tanh(h @ q[0] + q[1][None]) * jax.nn.sigmoid(h @ q[2] + q[3][None])
            elif kind == "divide":
                h = (h @ q[0] + q[1][None]) / (1.5 + jnp.tanh(h @ q[2] + q[3][None]))
            elif kind == "exp_log":
                h = jnp.log(1.0 + jnp.exp(h @ q[0] + q[1][None])) - 0.7
            elif kind == "log_sin":
                h = jnp.log(2.0 + jnp.sin(h @ q[0] + q[1][None]))
            elif kind == "fori_loop":
                h = jax.lax.fori_loop(0, trips, lambda _, s, q=q: jnp.tanh(s @ q[0] + q[1][None]),
                                      h)
            elif kind == "scan":
                h = jax.lax.scan(lambda s, wb: (jnp.tanh(s @ wb[0] + wb[1][None]), None), h,
                                 q)[0]
            elif kind == "cond":
                h = jax.lax.cond(q[2] > 0, lambda s, q=q: jnp.tanh(s @ q[0] + q[1][None]),
                                 lambda s, q=q: jnp.sin(s @ q[0] + q[1][None]), h)
        w, b = p["out"]
        return h @ w + b[None]

    return f


def _domain(case, rng):
    d, size = case["d"], case["size"]
    center = rng.uniform(-0.5, 0.5, d)
    if case["ball"]:
        return Ball(d, size, center=jax.device_put(center))
    half = size * rng.uniform(0.5, 1.0, d)
    return Box(jax.device_put(center - half), jax.device_put(center + half))


def _project(domain, x):
    if isinstance(domain, Box):
        return jnp.clip(x, domain.lo[None], domain.hi[None])
    c = domain.center[None]
    v = x - c
    n = jnp.sqrt(jnp.sum(v * v, axis=1, keepdims=True))
    return c + v * jnp.minimum(1.0, domain.radius / jnp.maximum(n, 1e-300))


def _sample(domain, rng, n):
    d = domain.dim
    if isinstance(domain, Box):
        lo, hi = np.asarray(domain.lo), np.asarray(domain.hi)
        corners = np.stack(np.meshgrid(*zip(lo, hi, strict=True)), -1).reshape(-1, d)
        return np.concatenate([rng.uniform(lo, hi, (n, d)), corners])
    u = rng.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = float(domain.radius) * rng.uniform(size=(n, 1)) ** (1.0 / d)
    r[: n // 4] = float(domain.radius)  # a quarter on the sphere
    return np.asarray(domain.center) + u * r


def _reference_max(fa, fb, domain, rng):
    """The largest ``|F_a - F_b|`` of a dense sample, then of projected gradient ascent from
    its best points, with the size of the two outputs (for the rounding allowance)."""

    @jax.jit
    def search(x):
        def gap(z):
            return jnp.max(jnp.abs(fa(z) - fb(z)), axis=1)

        vals = gap(x)
        best = x[jnp.argsort(-vals)[:16]]
        step = 0.05 * jnp.max(jnp.abs(x[0] - x[-1])) + 1e-3

        def climb(_, state):
            z, s = state
            g = jax.grad(lambda z: jnp.sum(gap(z)))(z)
            g = g / jnp.maximum(jnp.sqrt(jnp.sum(g * g, axis=1, keepdims=True)), 1e-300)
            cand = _project(domain, z + s[:, None] * g)
            better = gap(cand) > gap(z)
            return (jnp.where(better[:, None], cand, z), jnp.where(better, 1.5 * s, 0.5 * s))

        z, _ = jax.lax.fori_loop(0, 60, climb, (best, jnp.full(best.shape[0], step)))
        size = jnp.maximum(jnp.max(jnp.abs(fa(x))), jnp.max(jnp.abs(fb(x))))
        return jnp.maximum(jnp.max(vals), jnp.max(gap(z))), size

    top, size = search(jax.device_put(_sample(domain, rng, 8192)))
    return float(top), float(size)


def _check(case):
    note(str(case))
    rng = np.random.default_rng(case["seed"])
    params = _weights(case, rng)
    fa = _network(case, params)
    fb = _network(case, _moved(params, case["move"], rng))
    domain = _domain(case, rng)
    res = verify(fa, fb, domain=domain, order=case["order"], tol=0.02, max_seconds=2.0,
                 remainders=case["remainders"])
    top, size = _reference_max(fa, fb, domain, rng)
    note(f"{res.status}: [{res.lower:.6e}, {res.upper:.6e}], sampled + ascent {top:.6e}")
    rounding = 1e-12 * (size + 1.0)
    assert res.upper >= top - rounding, (res.upper, top)
    x = np.asarray(res.argmax)[None]
    assert np.max(np.asarray(_project(domain, jax.device_put(x))) - x) <= 1e-12  # inside
    at = float(np.max(np.abs(np.asarray(fa(x)) - np.asarray(fb(x)))))
    assert at >= res.lower - rounding, (at, res.lower)


def _profile(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(hypothesis.HealthCheck))


@_profile(3)
@given(cases())
def test_random_programs_are_bounded_soundly(case):
    _check(case)


@pytest.mark.slow
@_profile(60)
@given(cases())
def test_random_programs_are_bounded_soundly_large(case):
    _check(case)
