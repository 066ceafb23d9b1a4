"""Derivative features of every hidden neuron: three interchangeable backends.

For hidden layer ``l`` the feature matrix is ``Z_l in R^{D_k x d_l}``,

.. math:: (Z_l)_{\\alpha i} = \\frac{1}{\\alpha!}\\,\\partial_x^{\\alpha} h^{(l)}_i(x_0),
          \\qquad |\\alpha| \\le k,

rows ordered as :func:`jaxcompress.monomials` (DESIGN section 1: ``Phi(w_i)`` stacked over the
neurons, written with Taylor coefficients). Backends:

``"taylor"`` (default)
    Multivariate truncated-Taylor propagation (:mod:`jaxcompress.taylor`): one forward pass for
    all layers, cost ``O(C(2d+k, 2d) * width)`` per activation.
``"jet"``
    :func:`jax.experimental.jet.jet` under :func:`jax.vmap` over directions ``v``: the univariate
    series of ``t -> h(x_0 + t v)`` has degree-``j`` coefficient
    ``sum_{|alpha|=j} Z_alpha v^alpha``; the ``Z_alpha`` are recovered per degree by least
    squares on a fixed, well-conditioned set of directions (interpolation of homogeneous
    polynomials).
``"jacfwd"``
    Nested :func:`jax.jacfwd`, ``k`` deep. Obviously right, slow to compile: the reference.

Beyond derivatives at one point (the feature kinds of ``compress(features=...)``,
:data:`FEATURE_KINDS`):

``"taylor_multi"`` (:func:`multi_center_features`)
    Taylor coefficients at several expansion centres ``c_1..c_J`` stacked, ``J D_k`` rows:
    ``Z[(j, alpha), i] = d^alpha h_i(c_j) / alpha!``. Matching them by least squares is a
    Hermite-type fit that does not need holomorphy on a ball around a single centre.
``"collocation"`` / ``"data"`` (:func:`point_features`)
    Activations at points: ``Z[p, i] = h_i^(l)(x_p)``, one row per point. ``"collocation"`` uses
    ``N = oversample * D_k`` quasi-random nodes of the (known) domain, no data needed;
    ``"data"`` uses user inputs (the interpolative decomposition of Chee et al. 2022). Selecting
    columns of ``Z`` and solving ``Z_K C ~= Z`` by least squares minimises the discrete
    ``L^2`` error of the next layer's pre-activation over the points, which stays meaningful
    when the network is not holomorphic on a ball around the domain (trained teachers,
    DESIGN section 3).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import jet as _jet

from jaxcompress.activations import Activation, get_activation
from jaxcompress.mlp import (
    HIGHEST,
    Params,
    _dense,
    hidden_activations,
    require_single_network,
    validate_params,
)
from jaxcompress.taylor import (
    check_feature_budget,
    compose,
    monomials,
    num_monomials,
    taylor_features,
)

__all__ = [
    "BACKENDS",
    "FEATURE_KINDS",
    "POINT_FEATURES",
    "bottleneck_sources",
    "default_centers",
    "derivative_features",
    "multi_center_features",
    "parameterization_polynomial",
    "point_features",
    "propagate_polynomial",
]

BACKENDS = ("taylor", "jet", "jacfwd")
#: Feature kinds evaluated at points (one row per point; no radius row scaling).
POINT_FEATURES = ("collocation", "data")
#: Everything ``compress(features=...)`` accepts: derivative backends, multi-centre Taylor
#: features, and point features.
FEATURE_KINDS = BACKENDS + ("taylor_multi",) + POINT_FEATURES


def _hidden_map(params: Params, act: Activation, n_hidden: int, *, use_jet_fn: bool = False):
    fn = act.jet_fn if use_jet_fn else act.fn

    def f(x):
        outs = []
        h = x
        for layer in params[:n_hidden]:
            h = fn(_dense(h, layer))
            outs.append(h)
        return tuple(outs)

    return f


@functools.cache
def _directions(d: int, k: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Directions ``V`` (n_dir, d) and, per degree j, the least-squares solver ``(N_j, n_dir)``.

    ``d = 1``: the single direction 1. ``d = 2``: angles ``pi m / n_dir`` (half circle; a
    homogeneous polynomial of degree j is a trigonometric polynomial there, so equispaced angles
    are optimal). ``d >= 3``: a fixed Gaussian sample normalised to the sphere, oversampled 2x.
    """
    mons = monomials(d, k)
    deg = mons.sum(axis=1)
    n_max = max(int(np.sum(deg == j)) for j in range(k + 1))
    if d == 1:
        v = np.ones((1, 1))
    elif d == 2:
        n_dir = k + 1
        theta = np.pi * np.arange(n_dir) / n_dir
        v = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    else:
        n_dir = 2 * n_max
        rng = np.random.default_rng(12345)
        v = rng.standard_normal((n_dir, d))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
    solvers = []
    for j in range(k + 1):
        alphas = mons[deg == j]
        vand = np.prod(v[:, None, :] ** alphas[None, :, :], axis=2)  # (n_dir, N_j)
        solvers.append(np.linalg.pinv(vand))
    return v, tuple(solvers)


def _jet_features(params: Params, act: Activation, order: int, center: jax.Array) -> list:
    n_hidden = len(params) - 1
    d = center.shape[0]
    f = _hidden_map(params, act, n_hidden, use_jet_fn=True)
    v_np, solvers = _directions(d, order)
    v = jnp.asarray(v_np, center.dtype)

    def along(direction):
        y0 = f(center)
        if order == 0:
            return [y[None] for y in y0]
        terms = (direction,) + (jnp.zeros_like(direction),) * (order - 1)
        y, ys = _jet.jet(f, (center,), (terms,))
        # jet returns derivatives in t; the Taylor coefficient of t^j is the j-th term / j!.
        return [
            jnp.stack([y[i]] + [ys[i][j] / math.factorial(j + 1) for j in range(order)])
            for i in range(n_hidden)
        ]

    series = jax.vmap(along)(v)  # per layer: (n_dir, k + 1, d_l)
    feats = []
    for s in series:
        rows = [jnp.matmul(jnp.asarray(solvers[j], s.dtype), s[:, j, :],
                           precision=jax.lax.Precision.HIGHEST) for j in range(order + 1)]
        feats.append(jnp.concatenate(rows, axis=0))
    return feats


def _jacfwd_features(params: Params, act: Activation, order: int, center: jax.Array) -> list:
    n_hidden = len(params) - 1
    d = center.shape[0]
    mons = monomials(d, order)
    deg = mons.sum(axis=1)
    fact = np.prod([[math.factorial(int(a)) for a in m] for m in mons], axis=1)
    g = _hidden_map(params, act, n_hidden)
    derivs = [g(center)]
    h = g
    for _ in range(order):
        h = jax.jacfwd(h)
        derivs.append(h(center))  # tuple over layers of (d_l, d, ..., d)
    feats = []
    for layer in range(n_hidden):
        rows = []
        for alpha, j, fa in zip(mons, deg, fact, strict=True):
            # the index (i_1, ..., i_j) with i's sorted and multiplicities alpha
            idx = tuple(np.repeat(np.arange(d), alpha))
            rows.append(derivs[j][layer][(slice(None),) + idx] / fa)
        feats.append(jnp.stack(rows, axis=0))
    return feats


def _check_order(order: int, where: str) -> int:
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"{where}: order must be a non-negative int, got {order!r}")
    if order < 0:
        raise ValueError(f"{where}: order must be >= 0, got {order}")
    return int(order)


def derivative_features(
    params: Params,
    *,
    activation: str | Activation,
    order: int,
    backend: str = "taylor",
    center: jax.Array | Sequence[float] | None = None,
) -> list[jax.Array]:
    """Taylor-coefficient features of every hidden layer at the expansion point.

    Args:
      params: the MLP (list of ``{"kernel", "bias"}``).
      activation: a registered activation name (see :func:`register_activation`).
      order: the truncation order ``k >= 0``.
      backend: ``"taylor"`` (default), ``"jet"`` or ``"jacfwd"`` (slow reference).
      center: the expansion point ``x_0`` (default: the origin).

    Returns:
      A list over hidden layers ``l = 1..L`` of ``Z_l`` with shape ``(D_k, d_l)``:
      ``Z_l[a, i]`` is ``d^alpha h_i^(l)(x_0) / alpha!`` for ``alpha = monomials(d_in, k)[a]``.

    Works under ``jax.jit`` with ``activation``, ``order`` and ``backend`` static.
    """
    where = "derivative_features"
    params = validate_params(params, where=where)
    order = _check_order(order, where)
    if backend not in BACKENDS:
        raise ValueError(f"{where}: backend must be one of {BACKENDS}, got {backend!r}")
    act = get_activation(activation)
    d, dtype = require_single_network(params, where=where,
                                      hint="use jax.vmap for a stack of networks")
    widths = [layer["kernel"].shape[1] for layer in params[:-1]]
    check_feature_budget(d, order, max(widths), jnp.dtype(dtype).itemsize, where=where)
    if center is None:
        center = jnp.zeros((d,), dtype)
    center = jnp.asarray(center, dtype)
    if center.shape != (d,):
        raise ValueError(f"{where}: center has shape {center.shape}; expected ({d},)")
    if backend == "taylor":
        feats = taylor_features(params, activation=act, order=order, center=center)
    elif backend == "jet":
        feats = _jet_features(params, act, order, center)
    else:
        feats = _jacfwd_features(params, act, order, center)
    n_mon = num_monomials(d, order)
    assert all(z.shape == (n_mon, w) for z, w in zip(feats, widths, strict=True))
    return feats


def point_features(
    params: Params, x: jax.Array, *, activation: str | Activation, upto: int | None = None
) -> list[jax.Array]:
    """Activations of every hidden neuron at the points ``x``: the point feature matrices.

    .. math:: (Z_l)_{p i} = h^{(l)}_i(x_p), \\qquad Z_l \\in \\mathbb{R}^{N \\times d_l}.

    Args:
      params: the MLP.
      x: ``(N, d_in)`` points (collocation nodes of the domain, or data).
      activation: the activation.
      upto: only the first ``upto`` hidden layers (default: all).

    Returns:
      A list over hidden layers of ``(N, d_l)`` arrays. One forward pass; jit-able.
    """
    act = get_activation(activation)
    n_hidden = len(params) - 1 if upto is None else upto
    sub = list(params[:n_hidden]) + [params[n_hidden]]
    return hidden_activations(sub, x, activation=act)


def propagate_polynomial(
    p: jax.Array, layers: Params, *, activation: str | Activation, order: int, num_vars: int
) -> list[jax.Array]:
    """Push the coefficient array ``p`` through hidden ``layers`` (each ``dense -> activation``).

    ``p`` is ``(C(m + k, m), width)``: a polynomial in ``m = num_vars`` variables truncated at
    order ``k``, e.g. the input expansion ``x0 + t`` (derivative features), an earlier narrow
    layer's activations in their own coordinates (the bottleneck corollary) or an analytic
    parameterisation ``iota(u0 + t)``. Returns every layer's coefficient array: the
    generalisation of :func:`jaxcompress.taylor.taylor_features` to any starting polynomial.
    """
    act = get_activation(activation)
    feats = []
    for layer in layers:
        u = jnp.matmul(p, layer["kernel"], precision=HIGHEST).at[0].add(layer["bias"])
        p = compose(act.series(u[0], order), u, num_vars, order)
        feats.append(p)
    return feats


def _monomial_taylor_of(fn, center: jax.Array, order: int) -> jax.Array:
    """Taylor coefficients ``(D_k, n_out)`` of ``fn: (m,) -> (n_out,)`` at ``center`` (jet)."""
    m = center.shape[0]
    v_np, solvers = _directions(m, order)
    v = jnp.asarray(v_np, center.dtype)
    y0 = fn(center)

    def along(direction):
        if order == 0:
            return y0[None]
        terms = (direction,) + (jnp.zeros_like(direction),) * (order - 1)
        _, ys = _jet.jet(fn, (center,), (terms,))
        return jnp.stack([y0] + [ys[j] / math.factorial(j + 1) for j in range(order)])

    series = jax.vmap(along)(v)  # (n_dir, k + 1, n_out)
    rows = [jnp.matmul(jnp.asarray(solvers[j], series.dtype), series[:, j, :], precision=HIGHEST)
            for j in range(order + 1)]
    return jnp.concatenate(rows, axis=0)


def parameterization_polynomial(fn, center: jax.Array, order: int) -> jax.Array:
    """Coefficient array ``(C(m + k, m), d_in)`` of ``u -> iota(u0 + u)`` truncated at order k.

    ``iota = fn`` maps ``(m,)`` to ``(d_in,)``; its univariate Taylor series along fixed
    directions come from :func:`jax.experimental.jet.jet` and the multivariate coefficients are
    recovered per degree by least squares (as in the ``"jet"`` backend). Feeding this array to
    the network's Taylor pass gives the derivative features of ``h^(l)(iota(u))`` in ``u``: the
    paper's effective-input-dimension corollary (``D_k = C(m + k, m)`` instead of
    ``C(d_in + k, d_in)``).
    """
    return _monomial_taylor_of(fn, center, order)


def multi_center_features(
    params: Params,
    *,
    activation: str | Activation,
    order: int,
    centers: jax.Array,
) -> list[jax.Array]:
    """Taylor-coefficient features at several centres, stacked: ``(J D_k, d_l)`` per layer.

    Row ``j D_k + a`` of ``Z_l`` is ``d^alpha h^(l)(c_j) / alpha!`` with
    ``alpha = monomials(d_in, k)[a]``. Centres are ``(J, d_in)``; the Taylor pass is vmapped
    over them.
    """
    act = get_activation(activation)
    params = validate_params(params, where="multi_center_features")
    order = _check_order(order, "multi_center_features")
    centers = jnp.asarray(centers, jnp.result_type(params[0]["kernel"]))
    d = params[0]["kernel"].shape[0]
    if centers.ndim != 2 or centers.shape[1] != d:
        raise ValueError(
            f"multi_center_features: centers has shape {centers.shape}; expected (J, {d})"
        )
    feats = jax.vmap(lambda c: taylor_features(params, activation=act, order=order, center=c))(
        centers)
    return [z.reshape(-1, z.shape[-1]) for z in feats]


def default_centers(center: jax.Array, half_width: jax.Array) -> jax.Array:
    """The default ``taylor_multi`` centres: ``c`` and ``c +- h_i e_i / 2`` (``2 d + 1`` points).

    ``half_width`` is the per-coordinate half extent of the domain (a ball's radius in every
    coordinate, a box's half widths), so the outer centres sit half-way to the boundary.
    """
    d = center.shape[0]
    offsets = 0.5 * jnp.concatenate([jnp.eye(d, dtype=center.dtype),
                                     -jnp.eye(d, dtype=center.dtype)], axis=0)
    offsets = offsets * jnp.broadcast_to(half_width, (d,))[None, :]
    return jnp.concatenate([center[None, :], center[None, :] + offsets], axis=0)


def bottleneck_sources(sizes) -> tuple[int, ...]:
    """For each hidden layer, where its coordinates come from under the bottleneck corollary.

    ``sizes = [d_in, d_1, ..., d_L, d_out]``. Hidden layer ``l`` uses the activations of the
    narrowest *earlier* layer ``j < l`` (``j = 0``: the input) as coordinates: when
    ``h^(l) = G(h^(j))`` with ``h^(j)`` of width ``m = d_j``, its derivative features in those
    coordinates have ``D_k = C(m + k, m)`` rows. Ties keep the input, then the latest layer (the
    shortest sub-network). Returns ``j`` per hidden layer.
    """
    sizes = [int(s) for s in sizes]
    out = []
    best = 0
    for l in range(1, len(sizes) - 1):
        out.append(best)
        if sizes[l] < sizes[best] or (best != 0 and sizes[l] == sizes[best]):
            best = l
    return tuple(out)
