"""``jaxcompress.verification``: a proven bracket on ``sup |F_a - F_b|``.

What is checked: exactness on a bias shift (the bracket closes on ``delta``), soundness against
dense grids over random small networks of several activations on boxes and balls, every bound
rule against samples of its inputs (each output inside its Taylor model), the eps statuses, the
timeout's bracket, a primitive without a rule refused with its name and line, a user-registered
rule, input validation, the user's JAX configuration left as it was, one compiled program per
structure, the queue, the result type, and the accuracy assumed of the platform's functions.

The networks are written with ``jnp`` (small, ``[d, 8..16, 8..16, 1]``) and share shapes where
they can, so that the compiled programs are reused across tests.
"""

from __future__ import annotations

import functools
import math

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from programs import programs_compiled

from jaxcompress.domains import Ball, Box, Points
from jaxcompress.verification import (
    RuleContext,
    TaylorModel,
    UnsupportedPrimitiveError,
    Verification,
    bound_rules,
    register_rule,
)
from jaxcompress.verification import interpret as interp
from jaxcompress.verification import search as bnb
from jaxcompress.verification import smooth as sm
from jaxcompress.verification import taylor as tm
from jaxcompress.verification import verify as _verify

ACTIVATIONS = {
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "gelu": jax.nn.gelu,
    "gelu_erf": lambda x: jax.nn.gelu(x, approximate=False),
    "silu": jax.nn.silu,
    "relu": jax.nn.relu,
    "sin": jnp.sin,
}

def verify(*args, **kwargs):
    """``jc.verify`` run to its end unless a test gives a budget: no check here depends on a
    time budget being enough (the machines that run the tests are slow and shared)."""
    kwargs.setdefault("max_seconds", math.inf)
    return _verify(*args, **kwargs)


BOX2 = Box(jnp.array([-1.0, -1.0]), jnp.array([1.0, 1.0]))


def init(key, sizes, scale=1.0):
    """PyTorch-default uniform init, float64."""
    params = []
    for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:],
                                                                      strict=True),
                         strict=True):
        kw, kb = jax.random.split(k)
        lim = scale / math.sqrt(m)
        params.append((draws.uniform(kw, (m, n), jnp.float64, -lim, lim),
                       draws.uniform(kb, (n,), jnp.float64, -lim, lim)))
    return params


def mlp(params, act):
    def f(x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b[None]
            if i < len(params) - 1:
                x = act(x)
        return x

    return f


def perturbed(params, key, eps):
    """Every weight moved by a relative ``eps`` (a stand-in for a compressed network)."""
    out = []
    for k, (w, b) in zip(jax.random.split(key, len(params)), params, strict=True):
        kw, kb = jax.random.split(k)
        # on the host (the same IEEE products): on the device, a program per shape
        out.append(tuple(jax.device_put(np.asarray(a) * (1 + eps * np.asarray(
            draws.normal(kk, a.shape, jnp.float64)))) for a, kk in ((w, kw), (b, kb))))
    return out


def shifted(params, delta):
    *rest, (w, b) = params
    return [*rest, (w, jax.device_put(np.asarray(b) + delta))]  # on the host: no program


def grid_max(fa, fb, domain, n=201):
    """``max |F_a - F_b|`` over a dense grid of the domain (a ball's grid: its points inside
    and many on its boundary)."""
    if isinstance(domain, Box):
        lo, hi = np.asarray(domain.lo), np.asarray(domain.hi)
        axes = [np.linspace(a, b, n) for a, b in zip(lo, hi, strict=True)]
        pts = np.stack([g.reshape(-1) for g in np.meshgrid(*axes)], axis=1)
    else:
        d, r = domain.dim, float(domain.radius)
        c = np.zeros(d) if domain.center is None else np.asarray(domain.center)
        axes = [np.linspace(-r, r, n)] * d
        pts = np.stack([g.reshape(-1) for g in np.meshgrid(*axes)], axis=1)
        pts = pts[np.sum(pts**2, axis=1) <= r * r] + c
        if d == 2:
            th = np.linspace(0, 2 * np.pi, 4 * n, endpoint=False)
            pts = np.concatenate([pts, c + r * (1 - 1e-12) * np.stack([np.cos(th),
                                                                       np.sin(th)], 1)])
    ya, yb = both(fa, fb, pts)
    return float(np.max(np.abs(ya - yb)))


def value_at(fa, fb, x):
    ya, yb = both(fa, fb, np.asarray(x)[None])
    return float(np.max(np.abs(ya - yb)))


def both(fa, fb, x):
    """``F_a(x)`` and ``F_b(x)`` (NumPy) from one compiled program (run op by op, the networks
    would compile a program per operation and shape)."""
    ya, yb = jax.jit(lambda x: (fa(x), fb(x)))(x)
    return np.asarray(ya), np.asarray(yb)


def inside(domain, x):
    x = np.asarray(x)
    if isinstance(domain, Box):
        return bool(np.all(x >= np.asarray(domain.lo)) and np.all(x <= np.asarray(domain.hi)))
    c = np.zeros(domain.dim) if domain.center is None else np.asarray(domain.center)
    return bool(np.linalg.norm(x - c) <= float(domain.radius))


@pytest.fixture(scope="module")
def tanh_pair():
    a = init(jax.random.PRNGKey(0), [2, 16, 16, 1])
    return a, mlp(a, jnp.tanh)


# ------------------------------------------------------------------------------------------
# exactness and soundness of the whole verification


@pytest.mark.parametrize("domain", [BOX2, Ball(2, 1.0)], ids=["box", "ball"])
def test_bias_shift_is_exact(tanh_pair, domain):
    params, fa = tanh_pair
    delta = 1e-3
    fb = mlp(shifted(params, delta), jnp.tanh)
    res = verify(fb, fa, domain=domain, order=3)
    assert res.status == "converged"
    assert abs(res.lower - delta) <= 1e-12
    assert delta <= res.upper <= 1.05 * delta
    assert inside(domain, res.argmax)


def test_softplus_is_recognised_smooth():
    """``jax.nn.softplus`` (``logaddexp``: ``max``, ``abs``, ``select_n`` pieces) is bounded
    as the smooth function it is: a bias shift closes to 1.05 as for tanh."""
    params = init(jax.random.PRNGKey(1), [2, 8, 1], scale=3.0)
    fa = mlp(params, jax.nn.softplus)
    fb = mlp(shifted(params, 1e-3), jax.nn.softplus)
    res = verify(fa, fb, domain=BOX2, order=2, tol=0.04, batch_size=64)
    assert res.status == "converged" and res.upper <= 1.05e-3 and res.boxes < 10_000


MIXED = ("relu", "sin", "softplus")


def mixed_mlp(params):
    """A network whose first hidden layer has three neurons of each activation of
    :data:`MIXED` (one structure: one compiled program covers them), the second tanh. (Every
    rule is checked on its own by ``test_unary_rules_are_sound``.)"""
    acts = [ACTIVATIONS[n] for n in MIXED]

    def f(x):
        (w1, b1), (w2, b2), (w3, b3) = params
        z = x @ w1 + b1[None]
        h = jnp.concatenate([act(z[:, 3 * i:3 * i + 3]) for i, act in enumerate(acts)], axis=1)
        return jnp.tanh(h @ w2 + b2[None]) @ w3 + b3[None]

    return f


@pytest.mark.parametrize("d,kind", [(2, "box"), (1, "ball")])
def test_sound_against_dense_grid(d, kind):
    """Random networks against their perturbed copies: ``upper`` is at least the largest
    difference on a dense grid, ``lower`` is attained in the domain."""
    key = jax.random.PRNGKey(d)
    params = init(key, [d, 3 * len(MIXED), 8, 1], scale=2.0)
    fa = mixed_mlp(params)
    fb = mixed_mlp(perturbed(params, jax.random.fold_in(key, 1), 0.05))
    if kind == "box":
        domain = Box(jax.device_put(-1.5 * np.ones(d)), jax.device_put(np.linspace(1.0, 2.0, d)))
    else:
        domain = Ball(d, 1.5, center=jax.device_put(0.25 * np.ones(d)))
    res = verify(fa, fb, domain=domain, order=2, tol=0.05)
    truth = grid_max(fa, fb, domain, n=4001 if d == 1 else 201)
    assert res.status == "converged"
    assert res.upper >= truth, (res.upper, truth)
    assert res.lower <= res.upper
    assert inside(domain, res.argmax)
    assert value_at(fa, fb, res.argmax) >= res.lower * (1 - 1e-12)
    assert res.lower >= 0.95 * truth  # the local search finds the grid's maximum, or better


def test_ball_inside_its_box(tanh_pair):
    params, fa = tanh_pair
    fb = mlp(perturbed(params, jax.random.PRNGKey(3), 0.02), jnp.tanh)
    ball = verify(fa, fb, domain=Ball(2, 1.0), order=3, tol=0.05)
    box = verify(fa, fb, domain=BOX2, order=3, tol=0.05)
    assert ball.status == box.status == "converged"
    assert ball.lower <= box.upper  # sup over the ball <= sup over the box around it
    assert np.linalg.norm(ball.argmax) <= 1.0
    assert ball.upper >= grid_max(fa, fb, Ball(2, 1.0))


# ------------------------------------------------------------------------------------------
# stopping rules


def test_eps_statuses(tanh_pair):
    params, fa = tanh_pair
    fb = mlp(perturbed(params, jax.random.PRNGKey(3), 0.02), jnp.tanh)
    full = verify(fa, fb, domain=BOX2, order=3)
    sup = full.lower
    certified = verify(fa, fb, domain=BOX2, order=3, eps=10 * sup)
    assert certified.status == "certified" and certified.upper <= 10 * sup
    assert certified.boxes <= full.boxes
    refuted = verify(fa, fb, domain=BOX2, order=3, eps=0.5 * sup)
    assert refuted.status == "refuted" and refuted.lower > 0.5 * sup
    assert value_at(fa, fb, refuted.argmax) > 0.5 * sup


# ------------------------------------------------------------------------------------------
# programs with sub-programs, order 0, undefined differences, non-finite weights


def _loop_net(params, steps, unrolled=False, shift=0.0):
    """``steps`` iterations of ``h <- tanh(h W + b)`` on a width-2 state, then a linear head:
    written with ``jax.lax.fori_loop`` (a scan: a static trip count) or unrolled."""
    (w, b), (v, c) = params

    def f(x):
        def step(_, h):
            return jnp.tanh(h @ w + b[None])

        if unrolled:
            h = x
            for i in range(steps):
                h = step(i, h)
        else:
            h = jax.lax.fori_loop(0, steps, step, x)
        return h @ v + c[None] + shift

    return f


@pytest.fixture(scope="module")
def loop_params():
    return init(jax.random.PRNGKey(11), [2, 2, 1], scale=3.0)[:1] + init(
        jax.random.PRNGKey(12), [2, 1])


def test_loops_are_bounded_iteration_by_iteration(loop_params):
    """A fori_loop of three steps against the same steps unrolled and shifted by delta: the
    bracket closes on delta (read as one iteration, the loop's bound is another function's)."""
    fa = _loop_net(loop_params, 3)
    fb = _loop_net(loop_params, 3, unrolled=True, shift=1e-3)
    res = verify(fa, fb, domain=BOX2, order=2, tol=0.05)
    assert res.status == "converged"
    assert abs(res.lower - 1e-3) <= 1e-12 and res.upper <= 1e-3 / 0.95 + 1e-12


def test_cond_is_bounded_by_its_branches(loop_params):
    """``cond`` chosen by a weight (a traced constant): the selected branch exactly; chosen by
    the input (a function of each row): the union of the branches where the box does not
    decide, sound on either side of the switch."""
    (w, b), (v, c) = loop_params
    flag = jax.device_put(np.array(-1.0))

    def by_weight(x):
        h = jax.lax.cond(flag > 0, lambda h: jnp.tanh(h @ w + b[None]),
                         lambda h: jnp.sin(h @ w + b[None]), x)
        return h @ v + c[None]

    def plain(x):
        return jnp.sin(x @ w + b[None]) @ v + c[None] + 1e-3

    res = verify(by_weight, plain, domain=BOX2, order=2, tol=0.05)
    assert res.status == "converged" and abs(res.lower - 1e-3) <= 1e-12

    def by_input(x):  # one row (how the verifier bounds a box): cond's index is one number
        h = jax.lax.cond(x[0, 0] > 0.1, lambda h: jnp.tanh(h @ w + b[None]),
                         lambda h: jnp.sin(h @ w + b[None]), x)
        return h @ v + c[None]

    def by_rows(x):  # the same function of every row, for the samples
        u = x @ w + b[None]
        return jnp.where(x[:, :1] > 0.1, jnp.tanh(u), jnp.sin(u)) @ v + c[None]

    from jaxcompress.verification import program as prog

    def branch(act):
        return lambda x: act(x @ w + b[None]) @ v + c[None]

    centres = np.array([[0.1, 0.0], [0.5, 0.5], [-0.5, 0.2]])  # the switch, tanh, sin
    half = np.full((3, 2), 0.05)

    def bounds(f):
        with jax.enable_x64(True):
            program = prog.trace(f, plain, 2)
            return jax.jit(jax.vmap(functools.partial(prog.box_bound, program, 2),
                                    in_axes=(None, 0, 0)))(program.consts, centres, half)

    ub, lb = bounds(by_input)
    t = np.asarray(draws.uniform(jax.random.PRNGKey(7), (400, 2), jnp.float64, -1, 1))
    for i, (cen, hw) in enumerate(zip(centres, half, strict=True)):
        ya, yb = both(by_rows, plain, cen + hw * t)
        assert float(ub[i]) >= float(np.max(np.abs(ya - yb))) >= float(lb[i]), i
    # where the box decides the index: exactly the bound of that branch alone
    assert float(ub[1]) == float(bounds(branch(jnp.tanh))[0][1])
    assert float(ub[2]) == float(bounds(branch(jnp.sin))[0][2])


def test_a_loop_without_a_static_trip_count_is_refused(loop_params):
    (w, b), (v, c) = loop_params

    def f(x):
        _, h = jax.lax.while_loop(lambda s: s[0] < 3,
                                  lambda s: (s[0] + 1, jnp.tanh(s[1] @ w + b[None])), (0, x))
        return h @ v + c[None]

    with pytest.raises(UnsupportedPrimitiveError, match=r"'while'.*test_verify\.py.*static "
                                                        r"trip count"):
        verify(f, _loop_net(loop_params, 3), domain=BOX2, order=2)


def test_order_zero_is_interval_arithmetic_and_sound(tanh_pair):
    params, fa = tanh_pair
    fb = mlp(perturbed(params, jax.random.PRNGKey(3), 0.02), jnp.tanh)
    res = verify(fa, fb, domain=BOX2, order=0, max_seconds=0.5)
    assert res.upper >= grid_max(fa, fb, BOX2, n=101)
    assert value_at(fa, fb, res.argmax) >= res.lower * (1 - 1e-12)


def _deep_chain(key, width=12, depth=6, d=2):
    """A random ``[d, width x depth, 1]`` tanh chain (kernels ``N(0, 1.2^2 / fan_in)``)."""
    sizes = [d] + [width] * depth + [1]
    keys = jax.random.split(key, len(sizes))
    return [(1.2 / math.sqrt(m) * jax.random.normal(k, (m, n), jnp.float64),
             0.1 * jax.random.normal(jax.random.fold_in(k, 1), (n,), jnp.float64))
            for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=False)]


def test_remainder_symbols_are_sound_and_cancel_through_depth():
    """Remainders as symbols (``remainders="symbolic"``): each box's bound holds on a dense
    sample of the box, and on a six-layer chain it is tighter than radii widened by every
    layer's ``|W|`` (the wrapping that kept deep networks from converging)."""
    from jaxcompress.verification import program as vprog

    params = _deep_chain(jax.random.PRNGKey(11))
    fa = mlp(params, jnp.tanh)
    fb = mlp(perturbed(params, jax.random.PRNGKey(12), 0.02), jnp.tanh)
    program = vprog.trace(fa, fb, 2)
    rng = np.random.default_rng(0)
    c, h = jnp.array([0.3, -0.2]), jnp.array([0.05, 0.05])
    x = jnp.asarray(np.asarray(c) + np.asarray(h) * rng.uniform(-1, 1, (4096, 2)))
    sampled = float(jnp.max(jnp.abs(fa(x) - fb(x))))
    ubs = {}
    with jax.enable_x64(True):
        for symbolic in (False, True):  # eager: one box, no compilation
            ub, lb = vprog.box_bound(program, 2, program.consts, c, h, symbolic=symbolic)
            ubs[symbolic] = float(ub)
            assert float(ub) >= sampled
    assert ubs[True] < 0.25 * ubs[False], ubs  # measured: 0.051 against 0.44


def test_remainders_are_validated(tanh_pair):
    _, fa = tanh_pair
    with pytest.raises(ValueError, match="remainders must be 'radius', 'symbolic' or None"):
        verify(fa, fa, domain=BOX2, remainders="zonotope")


def test_a_difference_undefined_somewhere_is_an_error_naming_a_point(loop_params):
    """sqrt of a coordinate that goes negative on a sliver of the box: a point where the
    difference is NaN is named (a bound on the rest of the box would read as a proof)."""
    _, fa = loop_params[0], _loop_net(loop_params, 1)

    def fb(x):
        return fa(x) + jnp.sqrt(x[:, :1] + 0.999)

    with pytest.raises(ValueError, match=r"F_a - F_b is nan at x = \[-0\.99"):
        verify(fa, fb, domain=BOX2, order=2)


def test_non_finite_parameters_name_the_leaf():
    import jaxcompress as jc

    teacher = jc.init_mlp(jax.random.PRNGKey(4), [2, 16, 16, 1], dtype=jnp.float64)
    bad = [dict(layer) for layer in teacher]
    bad[1]["kernel"] = jax.device_put(np.asarray(bad[1]["kernel"]).copy())
    bad[1]["kernel"] = bad[1]["kernel"].at[3, 2].set(jnp.inf)
    with pytest.raises(ValueError, match=r"network b .*leaf \[1\]\['kernel'\] of shape "
                                         r"\(16, 16\) holds inf at index \(3, 2\)"):
        verify(teacher, bad, activation="tanh", domain=BOX2)


def test_timeout_returns_the_bracket(tanh_pair):
    params, fa = tanh_pair
    fb = mlp(perturbed(params, jax.random.PRNGKey(3), 0.02), jnp.tanh)
    res = verify(fa, fb, domain=BOX2, order=3, tol=1e-12, max_seconds=0.5)
    assert res.status == "timeout"
    assert 0 < res.lower <= res.upper < math.inf
    assert res.upper >= grid_max(fa, fb, BOX2)
    times = [h[0] for h in res.history]
    uppers = [h[2] for h in res.history[:-1]]
    assert times == sorted(times) and uppers == sorted(uppers, reverse=True)


# ------------------------------------------------------------------------------------------
# rules: refused, registered, and each one sound


def test_unknown_primitive_is_refused_with_its_name_and_line(tanh_pair):
    _, fa = tanh_pair

    def fb(x):
        return fa(x) + jax.lax.lgamma(x[:, :1] + 3.0)

    with pytest.raises(UnsupportedPrimitiveError, match=r"'lgamma'.*test_verify\.py"):
        verify(fa, fb, domain=BOX2, order=2)


def test_user_registered_rule():
    params = init(jax.random.PRNGKey(4), [2, 8, 1])
    (w, b), (v, c) = params

    def fa(x):
        return jnp.arctan(x @ w + b[None]) @ v + c[None]

    def fb(x):
        return jnp.tanh(x @ w + b[None]) @ v + c[None]

    saved = bound_rules.pop(jax.lax.atan_p, None)  # docs/verify.md registers one too
    with pytest.raises(UnsupportedPrimitiveError, match="'atan'"):
        verify(fa, fb, domain=BOX2, order=2)

    def atan_rule(ctx: RuleContext, x):
        lo, hi = ctx.interval(x)  # atan is increasing: an interval rule, widened for rounding
        return ctx.from_interval(jnp.arctan(lo) - 1e-14, jnp.arctan(hi) + 1e-14)

    register_rule(jax.lax.atan_p, atan_rule)
    try:
        with pytest.raises(ValueError, match="overwrite=True"):
            register_rule(jax.lax.atan_p, atan_rule)
        res = verify(fa, fb, domain=BOX2, order=2, tol=0.05)
        assert res.upper >= grid_max(fa, fb, BOX2, n=101)
        assert res.lower <= res.upper and res.status == "converged"
    finally:
        bound_rules.pop(jax.lax.atan_p)
        if saved is not None:
            bound_rules[jax.lax.atan_p] = saved


def _random_model(key, mono, shape, center, spread, rad):
    k1, k2, k3 = jax.random.split(key, 3)
    # built on the host (the same IEEE operations; on the device, a program per operation)
    coef = spread * np.asarray(draws.normal(k1, (mono.size, *shape), jnp.float64))
    coef = coef / (1.0 + np.asarray(mono.degree, np.float64).reshape((-1,) + (1,) * len(shape)))
    coef[0] = center + np.asarray(draws.uniform(k2, shape, jnp.float64, -1, 1))
    return TaylorModel(jax.device_put(coef),
                       jax.device_put(rad * np.asarray(draws.uniform(k3, shape, jnp.float64))))


def _evaluate(model: TaylorModel, mono, t, rho):
    """The values a Taylor model allows at box coordinates ``t`` (``(n, d)``) with remainders
    ``rho`` in ``[-1, 1]`` (``(n, *shape)``)."""
    mons = jnp.prod(t[:, None, :] ** jnp.asarray(mono.exps, jnp.float64)[None], axis=2)
    poly = jnp.tensordot(mons, model.coef, axes=1)
    return poly + rho * model.rad[None]


UNARY = {  # name: (function, the shift of its input, whose centre is in [-1, 1])
    "tanh": (jnp.tanh, 0.0), "sigmoid": (jax.nn.sigmoid, 1.0),
    "softplus": (jax.nn.softplus, 0.0), "exp": (jnp.exp, 0.5), "expm1": (jnp.expm1, -0.5),
    "log": (jnp.log, 3.0), "log1p": (jnp.log1p, 2.0), "sin": (jnp.sin, 1.0),
    "cos": (jnp.cos, -2.0), "erf": (jax.lax.erf, 0.3), "erfc": (jax.lax.erfc, 1.0),
    "sqrt": (jnp.sqrt, 3.0), "rsqrt": (jax.lax.rsqrt, 3.0),
    "reciprocal": (lambda x: 1.0 / x, -3.0), "cube": (lambda x: x**3, 0.5),
    "pow": (lambda x: x**2.5, 3.0), "square": (jnp.square, 0.0), "relu": (jax.nn.relu, 0.0),
    "abs": (jnp.abs, 0.0), "gelu": (jax.nn.gelu, 0.0), "elu": (jax.nn.elu, 0.0),
    "sign": (jnp.sign, 0.0),
    "max_reduce": (lambda x: jnp.max(x, axis=0, keepdims=True) + 0 * x, 0.0),
    "sum_reshape": (lambda x: jnp.sum(x.reshape(2, 3), axis=1).repeat(3) + x[::-1], 0.0),
}
BINARY = {
    "mul": lambda x, y: x * y, "div": lambda x, y: x / (3.0 + y), "max": jnp.maximum,
    "min": jnp.minimum, "sub": lambda x, y: x - 2.0 * y,
    "clip": lambda x, y: jnp.clip(x, -0.5, 1.0) + 0 * y,
    "concat_dot": lambda x, y: jnp.concatenate([x, y]) @ jnp.linspace(-1, 1, 12).reshape(12, 1)
    + 0 * x,
    "logaddexp": jnp.logaddexp, "where": lambda x, y: jnp.where(x > y, x * y, y),
}


def _check_all(fns: dict, nargs: int, seed: int, order: int = 2) -> None:
    """Each function of ``fns`` (of ``nargs`` vectors of 6) interpreted on random Taylor models
    of 2 variables, from small to large; its values at sampled points (box coordinates and
    remainders) must lie in the result's bound. All functions go through one jaxpr and one
    compiled check."""
    names = sorted(fns)
    mono = tm.Monomials.of(2, order)
    ctx = RuleContext(mono)
    shape = (6,)

    def stacked(*xs):
        return jnp.stack([fns[n](*xs) for n in names])

    closed = jax.make_jaxpr(stacked)(*[jax.ShapeDtypeStruct(shape, jnp.float64)] * nargs)

    @jax.jit
    def check(ins, rhos, t):
        (out,) = interp.interpret(closed.jaxpr, closed.consts, ins, ctx)
        out = ctx.lift(out)
        xs = [_evaluate(m, mono, t, r) for m, r in zip(ins, rhos, strict=True)]
        y = jax.vmap(stacked)(*xs)  # (samples, functions, 6)
        claimed = jnp.isfinite(out.rad) & jnp.all(jnp.isfinite(out.coef), axis=0)
        undefined = jnp.any(~jnp.isfinite(y), axis=0)
        mons = jnp.prod(t[:, None, :] ** jnp.asarray(mono.exps, jnp.float64)[None], axis=2)
        poly = jnp.einsum("sm,m...->s...", mons, out.coef)
        excess = jnp.abs(y - poly) - out.rad[None] - 1e-13 * (jnp.abs(y) + 1.0)
        ok = claimed & ~undefined
        return claimed, undefined, jnp.max(jnp.where(ok[None], excess, -jnp.inf), axis=0)

    key = jax.random.PRNGKey(seed)
    t = np.asarray(draws.uniform(jax.random.fold_in(key, 99), (300, 2), jnp.float64, -1, 1))
    t = np.concatenate([t, np.array([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])])
    for spread, rad in ((0.02, 1e-4), (0.3, 1e-2), (2.0, 0.5)):
        # the keys as host arrays: indexing a device array compiles a program
        keys = np.asarray(jax.random.split(jax.random.fold_in(key, int(spread * 100)), 2 * nargs))
        ins = [_random_model(keys[i], mono, shape, 0.0, spread, rad) for i in range(nargs)]
        rhos = [draws.uniform(keys[nargs + i], (len(t), *shape), jnp.float64, -1, 1)
                for i in range(nargs)]
        claimed, undefined, worst = (np.asarray(v) for v in check(ins, rhos, t))
        for i, n in enumerate(names):
            # where the function is undefined at a sample (log or sqrt of a negative, 1 / 0)
            # the bound must not claim a finite value
            assert not np.any(claimed[i] & undefined[i]), (n, spread)
            if spread < 1:  # small models inside the function's domain: finite bounds
                assert np.all(claimed[i]), (n, spread)
            assert np.all(worst[i] <= 0), f"{n} (spread {spread}): outside by {worst[i].max()}"


def test_unary_rules_are_sound():
    _check_all({n: (lambda x, f=f, s=s: f(x + s)) for n, (f, s) in UNARY.items()}, 1, 0)


def test_binary_rules_are_sound():
    _check_all({n: (lambda x, y, f=f: f(x + 0.3, y - 0.2)) for n, f in BINARY.items()}, 2, 1)


@pytest.mark.parametrize("order", [3, 7])
def test_chebyshev_composition_encloses_and_beats_the_lagrange_remainder(order):
    """``f(c + w t)`` composed at order ``K`` for every smooth function on wide and tiny
    intervals: every sampled value lies in the polynomial plus the remainder, and on a wide
    interval of ``sin`` the remainder is the Chebyshev one, ``2^K`` below Lagrange's."""
    mono = tm.Monomials.of(1, order)
    centres = {"log": 3.0, "log1p": 2.0, "sqrt": 3.0, "rsqrt": 3.0, "reciprocal": -3.0,
               "logistic": 1.0, "pow 2.5": 3.0}
    fns = dict(sm.SMOOTH_FUNCTIONS, **{"pow 2.5": sm.power_function(2.5)})
    special = {"pow 2.5": lambda x: x**2.5, "reciprocal": lambda x: 1.0 / x,
               "logistic": jax.nn.sigmoid, "softplus": jax.nn.softplus,
               "erf": jax.lax.erf, "erfc": jax.lax.erfc, "rsqrt": jax.lax.rsqrt}
    widths = np.array([1e-9, 1e-3, 0.1, 0.7, 1.5])
    t = np.linspace(-1.0, 1.0, 2001)
    x = {name: centres.get(name, 0.4) + widths[None] * t[:, None] for name in fns}
    coef = np.zeros(mono.size)
    coef[0], coef[1] = 3.0, 1.5  # sin on [1.5, 4.5], where |sin^(K+1)| reaches 1

    @jax.jit
    def composed(xs):  # every function's models, its values and the wide sin, one program
        def model(name):
            co = jnp.zeros((mono.size, len(widths))).at[0].set(centres.get(name, 0.4))
            return TaylorModel(co.at[1].set(jnp.asarray(widths)), jnp.zeros(len(widths)))
        out = {name: sm.compose_series(f, model(name), mono, fallback=False)
               for name, f in fns.items()}
        ys = {name: (special.get(name) or getattr(jnp, name))(v) for name, v in xs.items()}
        return out, ys, sm.compose_series(sm.SIN, TaylorModel(jnp.asarray(coef), jnp.zeros(())),
                                          mono, fallback=False)

    outs, ys, wide = composed(x)
    for name, out in outs.items():
        poly = np.polynomial.polynomial.polyval(t[:, None], np.asarray(out.coef), tensor=False)
        y = np.asarray(ys[name])
        excess = np.abs(y - poly) - np.asarray(out.rad)[None] - 1e-15 * (1.0 + np.abs(y))
        assert np.all(excess <= 0), (name, order, excess.max(axis=0))
    lagrange = 1.5 ** (order + 1) / math.factorial(order + 1)
    assert float(wide.rad) <= 1.01 * lagrange / 2.0**order + 1e-14


def test_every_smooth_function_has_a_rule():
    prims = {p.name for p in bound_rules}
    for name in ("tanh", "logistic", "exp", "expm1", "log", "log1p", "sin", "cos", "erf",
                 "erfc", "sqrt", "rsqrt", "dot_general", "max", "select_n", "concatenate"):
        assert name in prims, name


def test_function_accuracy_assumption():
    """The platform's float64 functions are 8x more accurate than the bounds assume
    (FUNCTION_ULPS), measured against 120-bit mpmath."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 120
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1, 1, 150) * 10.0 ** rng.uniform(-8, 1.3, 150),
                        rng.uniform(-20, 20, 50)])
    pos = np.abs(x) + 1e-3
    cases = {
        "tanh": (jnp.tanh, mpmath.tanh, x), "exp": (jnp.exp, mpmath.exp, x),
        "logistic": (jax.nn.sigmoid, lambda v: 1 / (1 + mpmath.exp(-v)), x),
        "erf": (jax.lax.erf, mpmath.erf, x), "erfc": (jax.lax.erfc, mpmath.erfc, x),
        "sin": (jnp.sin, mpmath.sin, x), "cos": (jnp.cos, mpmath.cos, x),
        "log": (jnp.log, mpmath.log, pos), "log1p": (jnp.log1p, mpmath.log1p, pos - 0.99),
        "expm1": (jnp.expm1, mpmath.expm1, x), "sqrt": (jnp.sqrt, mpmath.sqrt, pos),
        "rsqrt": (jax.lax.rsqrt, lambda v: 1 / mpmath.sqrt(v), pos),
    }
    # every function compiled, all in one program (elementwise: each computed as on its own)
    values = jax.jit(lambda xs: {name: cases[name][0](v) for name, v in xs.items()})(
        {name: pts for name, (_, _, pts) in cases.items()})
    for name, (_, ref, pts) in cases.items():
        got = np.asarray(values[name])
        want = np.array([float(ref(mpmath.mpf(float(v)))) for v in pts])
        ok = np.abs(want) > 1e-290
        rel = np.max(np.abs(got[ok] - want[ok]) / np.abs(want[ok]))
        assert rel <= sm.relative_error(name) / 8, (name, rel / 2.0**-52)


# ------------------------------------------------------------------------------------------
# the API


def test_input_validation(tanh_pair):
    params, fa = tanh_pair
    with pytest.raises(TypeError, match="a must be a network .* or a callable f"):
        verify(3.0, fa, domain=BOX2)
    with pytest.raises(TypeError, match=r"activation= is required for a params list \(a\)"):
        verify(params, fa, domain=BOX2)
    with pytest.raises(TypeError, match="Box or a jaxcompress.Ball.*Points"):
        verify(fa, fa, domain=Points(jnp.ones((4, 2))))
    with pytest.raises(ValueError, match=r"a fails on an input of shape \(1, 3\).*width 2"):
        verify(fa, fa, domain=Box(-jnp.ones(3), jnp.ones(3)))
    with pytest.raises(ValueError, match=r"a returns shape \(1, 1\) and b returns shape \(1, 2\)"):
        verify(fa, lambda x: jnp.concatenate([fa(x), fa(x)], axis=1), domain=BOX2)
    with pytest.raises(ValueError, match="eps must be a positive number"):
        verify(fa, fa, domain=BOX2, eps=0.0)
    with pytest.raises(ValueError, match=r"tol must be in \(0, 1\)"):
        verify(fa, fa, domain=BOX2, tol=1.0)
    with pytest.raises(ValueError, match="max_seconds must be a positive number"):
        verify(fa, fa, domain=BOX2, max_seconds=-1)
    with pytest.raises(ValueError, match="order must be an int"):
        verify(fa, fa, domain=BOX2, order=2.5)
    with pytest.raises(ValueError, match="non-finite constant"):  # NaN weights, before tracing
        verify(mlp(shifted(params, jnp.nan), jnp.tanh), fa, domain=BOX2, order=3)


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (forced CPU) devices")
def test_boxes_sharded_over_four_devices_give_one_devices_bracket(monkeypatch):
    """With 4 host devices (conftest forces them) each batch of boxes is split over them; the
    bracket is one device's, to rounding."""
    import jaxcompress as jc
    from jaxcompress.compiling import FastFirst

    monkeypatch.setattr(bnb, "CLIMB_INTERVAL", math.inf)  # climbs at the search's fixed points
    # one program throughout: no switch to XLA's default compile (when depends on the machine)
    monkeypatch.setattr(FastFirst, "budget_s", math.inf)
    teacher = jc.init_mlp(jax.random.PRNGKey(4), [2, 8, 8, 1], dtype=jnp.float64)
    small = jc.init_mlp(jax.random.PRNGKey(5), [2, 3, 3, 1], dtype=jnp.float64)
    box = Box(jax.device_put(-jnp.ones(2)), jax.device_put(jnp.ones(2)))
    (n1, s1, lo1, up1, b1), (n4, s4, lo4, up4, b4) = (
        (len(devices), r.status, r.lower, r.upper, r.boxes)
        for devices in (jax.devices()[:1], jax.devices()[:4])
        for r in [verify(teacher, small, activation="tanh", domain=box, order=2, tol=0.05,
                         devices=devices)])
    assert (n1, n4) == (1, 4) and s1 == s4 == "converged" and b1 == b4
    assert lo4 == pytest.approx(lo1, rel=1e-12) and up4 == pytest.approx(up1, rel=1e-12)


def test_user_config_is_left_alone():
    params = init(jax.random.PRNGKey(5), [2, 4, 1])
    p32 = [(jax.device_put(np.asarray(w, np.float32)), jax.device_put(np.asarray(b, np.float32)))
           for w, b in params]
    with jax.enable_x64(False):
        fa = mlp(p32, jnp.tanh)
        fb = mlp(shifted(p32, np.float32(1e-3)), jnp.tanh)
        before = (jax.config.jax_enable_x64, jax.config.jax_numpy_rank_promotion,
                  jax.config.jax_numpy_dtype_promotion, jax.config.jax_default_matmul_precision)
        res = verify(fb, fa, domain=BOX2, order=1)
        after = (jax.config.jax_enable_x64, jax.config.jax_numpy_rank_promotion,
                 jax.config.jax_numpy_dtype_promotion, jax.config.jax_default_matmul_precision)
        assert before == after and after[0] is False
        assert jnp.zeros(1).dtype == jnp.float32
    # float32 constants, the program computed in float64: the difference of the two biases
    b0 = np.asarray(p32[-1][1])[0]
    delta = float(np.float64(b0 + np.float32(1e-3)) - np.float64(b0))
    assert abs(res.lower - delta) < 1e-12 and delta <= res.upper <= 1.05 * delta


def test_one_compiled_program_per_structure(tanh_pair, monkeypatch):
    from jaxcompress.compiling import FastFirst

    # no switch to XLA's default compile mid-test: when it happens depends on the machine
    monkeypatch.setattr(FastFirst, "budget_s", math.inf)
    params, fa = tanh_pair
    fb = mlp(shifted(params, 1e-3), jnp.tanh)
    verify(fb, fa, domain=BOX2, order=3)
    size = len(bnb._CACHE)
    compiles = [f.bound._cache_size() for f in bnb._CACHE.values()]
    other = init(jax.random.PRNGKey(9), [2, 16, 16, 1])  # other weights, same shapes
    verify(mlp(shifted(other, 2e-3), jnp.tanh), mlp(other, jnp.tanh), domain=BOX2, order=3)
    assert len(bnb._CACHE) == size
    assert [f.bound._cache_size() for f in bnb._CACHE.values()] == compiles


def test_result_summary_and_plot(tanh_pair, tmp_path):
    params, fa = tanh_pair
    fb = mlp(shifted(params, 1e-3), jnp.tanh)
    res = verify(fb, fa, domain=BOX2, order=3, eps=1e-2)
    assert isinstance(res, Verification) and res.status == "certified"
    text = str(res)
    assert "certified" in text and "rigorous up to floating point" in text
    assert res.history[0][0] <= res.history[-1][0] and res.seconds >= res.history[-1][0]
    path = tmp_path / "bracket.png"
    res.plot(path)
    assert path.stat().st_size > 1000


@pytest.mark.parametrize("dim,order,parts", [(1, 6, 8), (2, 6, 4), (3, 7, 4), (5, 4, 2)])
def test_the_output_range_on_sub_boxes_encloses_and_is_tighter(dim, order, parts):
    mono = tm.Monomials.of(dim, order)
    rng = np.random.default_rng(dim)
    # coefficients decaying with the degree, as a box's Taylor model's do
    coef = rng.normal(size=(mono.size, 6)) / (1.0 + mono.degree[:, None]) ** 2
    coef[0, :3] += np.array([5.0, -5.0, 1e3])  # far from 0, and large (the rounding)
    t = rng.uniform(-1.0, 1.0, (30_000, dim))
    t = np.concatenate([t, np.sign(rng.uniform(-1.0, 1.0, (64, dim)))])  # corners
    mons = np.prod(t[:, None, :] ** mono.exps[None], axis=2)  # (points, M)
    vals = mons @ coef
    # the re-expansion is the same polynomial: at s, sub-box s's polynomial equals p(a + s b)
    a, colsum = tm.subbox_shifts(mono, parts)
    centre = (2.0 * np.array(next(iter(np.ndindex(*(parts,) * dim)))) + 1.0 - parts) / parts
    s = rng.uniform(-1.0, 1.0, (50, dim))
    at = np.prod((centre + s / parts)[:, None, :] ** mono.exps[None], axis=2) @ coef
    shifted = np.prod(s[:, None, :] ** mono.exps[None], axis=2) @ (a[0] @ coef)
    np.testing.assert_allclose(shifted, at, rtol=1e-12, atol=1e-9)
    assert colsum.shape == (parts**dim, mono.size)
    lo, hi = (np.asarray(v) for v in tm.refined_range(jnp.asarray(coef), mono, parts))
    lo0, hi0 = (np.asarray(v) for v in tm.poly_range(jnp.asarray(coef), mono))
    assert np.all(lo <= vals.min(axis=0)) and np.all(hi >= vals.max(axis=0))
    assert np.all(lo >= lo0) and np.all(hi <= hi0)
    # tighter: the overestimate of the width at most half the whole box's
    over, over0 = (hi - lo) - np.ptp(vals, axis=0), (hi0 - lo0) - np.ptp(vals, axis=0)
    assert np.all(over <= 0.5 * over0), (over, over0)


def test_box_queue_pops_the_largest():
    rng = np.random.default_rng(0)
    q = bnb.BoxQueue(2, capacity=4)
    ub = rng.random(50)
    q.push(rng.random((50, 2)), rng.random((50, 2)), ub)
    _, _, top = q.pop_top(7)
    assert sorted(top) == sorted(np.sort(ub)[-7:])
    assert q.n == 43 and sorted(q.ub[:43]) == sorted(np.sort(ub)[:-7])
    assert q.max() == np.sort(ub)[-8]


def test_split_covers_the_parent():
    c = np.array([[0.3, -0.2]])
    h = np.array([[0.5, 0.25]])
    cc, ch, parent = bnb.split(c, h, 3)
    assert len(cc) == 8 and np.all(parent == 0)
    pts = np.random.default_rng(1).uniform(c - h, c + h, (2000, 2))
    covered = np.any(np.all(np.abs(pts[:, None] - cc[None]) <= ch[None], axis=2), axis=1)
    assert covered.all()


# --------------------------------------------------------------------------------------------
# every network the library reads, and where the proof is used: certify, the search, the CLI


@pytest.fixture(scope="module")
def chain_pair():
    """A [2, 16, 16, 1] tanh params list and its collocation(2) compression (width 6)."""
    import jaxcompress as jc

    teacher = jc.init_mlp(jax.random.PRNGKey(4), [2, 16, 16, 1], dtype=jnp.float64)
    small, info = jc.compress(teacher, jc.collocation(2), activation="tanh",
                              domain=Ball(2, 1.0))
    return teacher, small, info


def test_every_kind_of_network_verifies_alike(chain_pair, tmp_path):
    """jc.verify takes params lists (activation=), traced networks, compressed results and
    loaded files, and proves the same bracket as for the functions they compute."""
    import jaxcompress as jc

    teacher, small, _ = chain_pair
    ball = Ball(2, 1.0)
    ref = verify(lambda x: jc.apply(teacher, x, activation="tanh"),
                 lambda x: jc.apply(small, x, activation="tanh"), domain=ball, tol=0.02)
    lists = verify(teacher, small, activation="tanh", domain=ball, tol=0.02)
    net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), teacher, jnp.zeros((4, 2)))
    tsmall, _ = jc.compress(net, jc.collocation(2), domain=ball)
    jc.save(tmp_path / "t.jcz", teacher, activation="tanh")
    jc.save(tmp_path / "s.jcz", tsmall)
    traced = verify(net, tsmall, domain=ball, tol=0.02)
    loaded = verify(jc.load(tmp_path / "t.jcz"), jc.load(tmp_path / "s.jcz"), domain=ball,
                    tol=0.02)
    sampled = float(jc.sup_error(teacher, small, activation="tanh", domain=ball,
                                 key=jax.random.PRNGKey(0), n_samples=2048))
    for res in (ref, lists, traced, loaded):
        assert res.status == "converged" and res.lower <= res.upper <= 1.02 * res.upper
        assert res.upper >= sampled and abs(res.upper - ref.upper) <= 0.03 * ref.upper
        assert res.to_dict()["status"] == "converged"


def test_certify_proves_what_the_paper_cannot(chain_pair):
    """certify of a network that is not a chain reports jc.verify's bound (it refused);
    verified=True adds it beside the paper's for a chain."""
    import jaxcompress as jc

    teacher, _, _ = chain_pair

    def skip(p, x):
        return jnp.concatenate([jnp.tanh(x @ p["w1"] + p["b1"][None]), x], axis=1) @ p["w2"]

    k = np.asarray(jax.random.split(jax.random.PRNGKey(5), 3))  # host keys: no slicing programs
    q = {"w1": draws.normal(k[0], (2, 16)),
         "b1": jax.device_put(0.1 * np.asarray(draws.normal(k[1], (16,)))),
         "w2": jax.device_put(np.asarray(draws.normal(k[2], (18, 1))) / 6)}
    net = jc.trace(skip, q, jnp.zeros((4, 2)))
    skip_small, _ = jc.compress(net, jc.collocation(3), domain=Ball(2, 1.0))
    with pytest.raises(ValueError, match="(?s)not one.*pass compressed="):
        jc.certify(net, domain=Ball(2, 1.0), eps=1e-2)
    rep = jc.certify(net, domain=Ball(2, 1.0), eps=1.0, compressed=skip_small)
    assert rep.verified.status == "certified" and rep.layers == () and rep.paper is None
    assert "proven by jc.verify" in str(rep) and rep.to_dict()["verified"]["upper"] <= 1.0
    backward, info = jc.compress(teacher, jc.collocation(2, layer_order="backward"),
                                 activation="tanh", domain=Ball(2, 1.0))   # a posteriori needs it
    chain = jc.certify(teacher, activation="tanh", domain=Ball(2, 1.0), eps=1.0,
                       compressed=backward, info=info, verified=True)
    assert chain.verified.status == "certified" and len(chain.layers) == 2
    bound = chain.a_posteriori_bound      # ours, where it exists: never below the proven one's
    assert bound is None or chain.verified.lower <= bound


def test_the_smallest_network_with_a_proven_error(chain_pair, tmp_path, capsys):
    """compress_to_tolerance with jc.Verified returns a network whose error is proven <= eps
    (the search's candidates judged by jc.verify); the command line proves or refutes."""
    import jaxcompress as jc
    from jaxcompress import cli

    teacher, small, _ = chain_pair
    ball = Ball(2, 1.0)
    res, names = programs_compiled(lambda: jc.compress_to_tolerance(
        teacher, jc.Verified(method=jc.collocation(2), shrink=False, n_samples=512),
        activation="tanh", domain=ball, eps=3e-2))
    assert res.mode == "verified" and res.verification.status == "certified"
    # the final proof is the search's own: the candidate padded to its bucket, by the program
    # the search compiled (at its own widths it compiled the proof again)
    assert names.count("jit(bound)") == 1, names
    # ... so its bracket is the one the search proved for that candidate, to the last bit
    proved = [row.error for row in res.frontier.rows if tuple(row.widths) == tuple(res.widths)]
    assert res.verification.upper in proved, (res.verification.upper, proved)
    assert res.verification.upper <= 3e-2 and res.measured_error <= res.verification.upper
    again = verify(teacher, res.params, activation="tanh", domain=ball, eps=3e-2)
    assert again.status == "certified"
    jc.save(tmp_path / "t.jcz", teacher, activation="tanh")
    jc.save(tmp_path / "s.jcz", small, activation="tanh")
    args = ["verify", str(tmp_path / "t.jcz"), str(tmp_path / "s.jcz")]
    assert cli.main(args + ["--eps", "1.0", "--json", str(tmp_path / "v.json")]) == 0
    assert "status certified" in capsys.readouterr().out and (tmp_path / "v.json").exists()
    sampled = float(jc.sup_error(teacher, small, activation="tanh", domain=ball,
                                 key=jax.random.PRNGKey(0), n_samples=1024))
    assert cli.main(args + ["--eps", str(0.5 * sampled)]) == 1
    assert "status refuted" in capsys.readouterr().out
    assert cli.main(args + ["--eps", "-1"]) == 2


def test_boxes_that_make_no_progress_are_halved_along_every_axis(tanh_pair, tmp_path,
                                                                monkeypatch):
    """A child whose bound stays near its parent's is split along every axis at once
    (``search.STALL``; here every box counts as stalled): the bracket still holds the
    sampled maximum, the proof tree records each halving, and the certificate checks."""
    import jaxcompress as jc

    params, fa = tanh_pair
    fb = mlp(perturbed(params, jax.random.PRNGKey(5), 0.02), jnp.tanh)
    monkeypatch.setattr(bnb, "STALL", 1e-9)
    res = verify(fa, fb, domain=BOX2, order=1, tol=0.05, batch_size=8)
    x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (20000, 2)))
    sampled = float(jnp.max(jnp.abs(fa(x) - fb(x))))
    assert res.status == "converged" and sampled <= res.upper * (1 + 1e-9)
    assert float(jnp.max(jnp.abs(fa(res.argmax[None]) - fb(res.argmax[None])))) >= res.lower
    tree = res.proof.tree.arrays()
    split = tree["kind"] == bnb.ProofTree.SPLIT
    # halved along both axes at once: split nodes whose parent is a split node of the same
    # step (measured at order 1: 0.28 of split nodes; 0.02 with STALL = 0.9, where
    # only the first steps, with few live boxes, split more than once to fill the batch)
    twice = tree["kind"][tree["parent"][split]] == bnb.ProofTree.SPLIT
    assert np.mean(twice) > 0.15
    assert jc.check(res.save(tmp_path / "stall.npz")).confirmed
