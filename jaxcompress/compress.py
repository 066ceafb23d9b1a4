"""Derivative-matching compression: a pure, jit-compiled ``params -> params`` transform.

For hidden layer ``l`` with features ``Z_l`` (``D_k x d_l``, :func:`derivative_features`) a
selector (:mod:`jaxcompress.select`) picks ``n_l = min(D_k, d_l)`` neurons ``K`` and
coefficients ``C`` with ``Z_K C = Z`` (Algorithm 1). The layer is rewired as

.. math::
   \\tilde K_l = K_l[:, K], \\quad \\tilde b_l = b_l[K], \\quad \\tilde K_{l+1} = C\\,K_{l+1},

(Flax layout; in the paper's ``(out, in)`` layout ``W~^{(l+1)} = W^{(l+1)} C^T``), so every
Taylor coefficient of order ``<= k`` of the next layer's pre-activation is unchanged:
``Z_K \\tilde K_{l+1} = Z K_{l+1}``. The error is the Taylor tail (Theorems 5 and 6).

``layer_order="backward"`` compresses the deepest hidden layer first; the upstream map of every
layer is then still the original one, so all ``Z_l`` come from one Taylor pass of the original
network. ``"forward"`` compresses layer 1 first and recomputes the features of the partially
compressed network before each later layer.

Hidden widths ``n_l`` depend only on static configuration, so :func:`compress` runs under
``jax.jit`` and ``jax.vmap``; neurons beyond the numerical rank get zero outgoing weight and can be
removed afterwards by :func:`trim` (host side).

Beyond derivative matching the same call offers (see :func:`compress`): other feature kinds
(``"taylor_multi"``, ``"collocation"``, ``"data"``; :mod:`jaxcompress.features`), baseline
selectors (``"weight_norm"``, ``"random"``; :mod:`jaxcompress.select`), non-centred domains
(``domain=Ball(..., center=...)`` or ``Box(lo, hi)``: derivative features are expanded at the
domain's centre and scaled by its radius) and the effective input dimension
(``coordinates="bottleneck"`` or ``coordinates=Parameterization(iota, U)``). In every case the
re-weighting is the least-squares solution ``C = Z_K^+ Z`` on the chosen features, which is exact
matching when ``rank Z <= n_l``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import get_activation
from jaxcompress.domains import (
    NODE_KINDS,
    Ball,
    Box,
    Parameterization,
    check_radius,
    domain_center,
)
from jaxcompress.evaluate import ERROR_POINTS, error_estimate
from jaxcompress.features import (
    BACKENDS,
    FEATURE_KINDS,
    POINT_FEATURES,
    _check_order,
    bottleneck_sources,
    default_centers,
    derivative_features,
    parameterization_polynomial,
    point_features,
    propagate_polynomial,
)
from jaxcompress.mlp import (
    HIGHEST,
    Params,
    hidden_activations,
    require_single_network,
    validate_params,
)
from jaxcompress.select import (
    MAX_EXHAUSTIVE_SUBSETS,
    SELECTORS,
    default_rtol,
    lstsq_coefficients,
    select_columns,
)
from jaxcompress.taylor import (
    MAX_FEATURE_BYTES,
    check_feature_budget,
    input_polynomial,
    monomials,
    num_monomials,
)

__all__ = ["CompressInfo", "LayerInfo", "compress", "compress_layer", "trim"]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["kept", "rank", "residual", "max_coef", "swaps"],
    meta_fields=["layer", "order", "num_features", "width_in", "width_out", "num_rows",
                 "coord_dim"],
)
@dataclasses.dataclass(frozen=True)
class LayerInfo:
    """What happened to one hidden layer.

    Attributes:
      kept: indices (into the original layer) of the kept neurons, in pivot order.
      rank: numerical rank of the (radius-scaled) feature matrix; kept neurons past it get zero
        outgoing weight.
      residual: the matching residual of Eq. (41), ``max |Z_K K~_{l+1} - Z K_{l+1}|`` (zero in
        exact arithmetic when ``rank <= width_out``; for point features, the largest change of
        the next layer's pre-activation over the points).
      max_coef: ``max |C_ij|`` over the basis rows (Lemma 10: ``<= 1 + delta`` for maxvol).
      swaps: number of maxvol swaps (0 for other selectors).
      layer: hidden-layer index (1-based, as in the paper).
      order: the truncation order k of this layer.
      num_features: ``D_k = C(m + k, m)`` with ``m = coord_dim`` (``d_in`` unless an effective
        input dimension is used).
      width_in, width_out: the width before and after.
      num_rows: rows of the feature matrix: ``D_k`` (derivative features), ``J D_k``
        (``"taylor_multi"`` with ``J`` centres) or the number of points (``"collocation"``,
        ``"data"``); ``-1`` when unknown (a bare :func:`compress_layer` call).
      coord_dim: ``m``, the number of coordinates the features are taken in (``-1`` when
        unknown).
    """

    kept: jax.Array
    rank: jax.Array
    residual: jax.Array
    max_coef: jax.Array
    swaps: jax.Array
    layer: int
    order: int
    num_features: int
    width_in: int
    width_out: int
    num_rows: int = -1
    coord_dim: int = -1


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["layers", "error_estimate"],
    meta_fields=["activation", "layer_order", "features", "selector", "coordinates"],
)
@dataclasses.dataclass(frozen=True)
class CompressInfo:
    """Per-layer :class:`LayerInfo` (``layers[l - 1]`` is hidden layer ``l``) and the settings.

    ``features`` and ``selector`` name the feature kind and selector used; ``coordinates`` is
    ``"input"``, ``"bottleneck"`` or ``"parameterization"``. ``error_estimate`` is
    ``max |F - F~|`` over the :data:`~jaxcompress.evaluate.ERROR_POINTS` fixed Sobol points of the
    domain (:func:`jaxcompress.evaluate.error_points`), computed inside the compression's jit
    (one value per teacher under ``jax.vmap``): a lower bound on the sup error, measured on
    points no method was fitted on. It is ours, not the paper's; ``None`` for records built by
    hand.

    Under ``jax.vmap`` every array field gains a leading batch axis; :meth:`summary` then shows
    the range over the batch.
    """

    layers: tuple[LayerInfo, ...]
    activation: str
    layer_order: str
    features: str
    selector: str
    coordinates: str = "input"
    error_estimate: jax.Array | None = None

    def summary(self) -> str:
        """A table of the per-layer record and the error estimate (host side).

        For a batch of teachers (``jax.vmap``) the rank column shows ``min..max`` over the batch
        (a rank-deficient teacher is not hidden behind the others), the residual and ``max|C|``
        their maxima, and the error estimate its range.
        """
        head = f"{'layer':>5} {'k':>3} {'D_k':>6} {'width':>13} {'rank':>9} {'residual':>10} "
        head += f"{'max|C|':>8}"
        lines = [head]
        for li in self.layers:
            lines.append(
                f"{li.layer:>5} {li.order:>3} {li.num_features:>6} "
                f"{f'{li.width_in} -> {li.width_out}':>13} {_span(li.rank, 'd'):>9} "
                f"{float(np.max(li.residual)):>10.2e} {float(np.max(li.max_coef)):>8.3f}"
            )
        if self.error_estimate is not None:
            est = np.asarray(self.error_estimate)
            batch = f" ({est.size} teachers)" if est.ndim else ""
            lines.append(f"error estimate {_span(est, '.2e')}{batch}: max |F - F~| on "
                         f"{ERROR_POINTS} Sobol points of the domain (a lower bound on the sup "
                         "error)")
        return "\n".join(lines)


def _span(values, fmt: str) -> str:
    """``v`` or ``lo..hi`` (a batch's range) of an array, formatted with ``fmt``."""
    arr = np.asarray(values)
    lo, hi = arr.min(), arr.max()
    cast = int if fmt == "d" else float
    if lo == hi:
        return format(cast(lo), fmt)
    return f"{format(cast(lo), fmt)}..{format(cast(hi), fmt)}"


LAYER_ORDERS = ("backward", "forward")


def compress_layer(
    params: Params,
    layer: int,
    z: jax.Array,
    *,
    width: int,
    selector: str = "pivoted_qr",
    radius=1.0,
    degrees: np.ndarray | None = None,
    target: jax.Array | None = None,
    **select_kwargs: Any,
) -> tuple[Params, LayerInfo]:
    """Compress hidden layer ``layer`` (1-based) given its features ``z`` (``D x d_l``).

    Keeps ``width`` neurons; returns the new params and the :class:`LayerInfo` (its ``order`` is
    set by :func:`compress`; here it is ``-1``). ``z`` may hold derivative features (rows scaled
    by ``radius^degrees`` for selection) or point features (``degrees=None``: no scaling). For
    ``selector="weight_norm"`` the scores default to the outgoing-weight norms of the layer;
    ``selector="random"`` needs ``key=``.

    ``target`` (``D x d_{l+1}``, optional) replaces what the re-weighting reproduces: by default
    the next layer's own pre-activation features ``z @ K_{l+1}`` (``K~_{l+1} = C K_{l+1}``); with
    ``target`` the new kernel is the least-squares solution of ``Z_K K~_{l+1} ~= target`` (used by
    forward order with point features to re-fit each layer to the teacher).
    """
    inc, out = params[layer - 1], params[layer]
    if selector == "omp" and select_kwargs.get("out_kernel") is None:
        select_kwargs = {**select_kwargs, "out_kernel": out["kernel"]}
        if target is not None and degrees is None:
            select_kwargs["target"] = target
    if selector == "weight_norm" and select_kwargs.get("scores") is None:
        # magnitude pruning: the outgoing-weight norm ||K_{l+1}[i, :]|| of each neuron
        select_kwargs = {**select_kwargs,
                         "scores": jnp.sqrt(jnp.sum(out["kernel"] * out["kernel"], axis=1))}
    sel, diag = select_columns(z, width, selector=selector, radius=radius, degrees=degrees,
                               **select_kwargs)
    kept = sel.perm[:width]
    if target is None:
        new_out_kernel = jnp.matmul(sel.coef, out["kernel"][sel.perm], precision=HIGHEST)
        before = jnp.matmul(z, out["kernel"], precision=HIGHEST)
    else:
        rtol = select_kwargs.get("rtol")
        rtol = default_rtol(z.dtype) if rtol is None else rtol
        new_out_kernel, _ = lstsq_coefficients(z[:, kept], jnp.arange(width), width, rtol,
                                               rhs=target)
        before = target
    new_params = list(params)
    new_params[layer - 1] = {"kernel": inc["kernel"][:, kept], "bias": inc["bias"][kept]}
    new_params[layer] = {"kernel": new_out_kernel, "bias": out["bias"]}
    after = jnp.matmul(z[:, kept], new_out_kernel, precision=HIGHEST)
    # QR selectors: rows past the rank are zero; baselines (SVD least squares): all rows count
    live = (jnp.arange(width) < sel.rank) | (selector in ("weight_norm", "random"))
    info = LayerInfo(
        kept=kept,
        rank=sel.rank,
        residual=jnp.max(jnp.abs(after - before)),
        max_coef=jnp.max(jnp.where(live[:, None], jnp.abs(sel.coef), 0)),
        swaps=diag.get("swaps", jnp.int32(0)),
        layer=layer,
        order=-1,
        num_features=z.shape[0],
        width_in=z.shape[1],
        width_out=width,
    )
    return new_params, info


def _orders(order, n_hidden: int, where: str) -> tuple[int, ...]:
    if isinstance(order, (list, tuple)):
        if len(order) != n_hidden:
            raise ValueError(
                f"{where}: order has {len(order)} entries; expected one per hidden layer "
                f"({n_hidden})"
            )
        return tuple(_check_order(o, where) for o in order)
    return (_check_order(order, where),) * n_hidden


#: Points used to estimate the radius of an earlier layer's image (the bottleneck corollary).
_BOTTLENECK_RADIUS_POINTS = 1024


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Static, hashable description of the features of every hidden layer."""

    features: str
    orders: tuple[int, ...]
    sources: tuple[int, ...]  # per hidden layer: 0 input, j >= 1 hidden layer j, -1 iota(u)
    coord_dims: tuple[int, ...]  # per hidden layer: m of D_k = C(m + k, m)
    n_points: tuple[int, ...]  # per hidden layer: collocation points (0 when unused)
    nodes: str


def _layer_features(params, needed, plan: _Plan, act, *, radius, center, domain, data, centers,
                    param_map):
    """``{l: (Z_l, degrees or None, scaling radius)}`` for the hidden layers ``needed``."""
    if plan.features in POINT_FEATURES:
        return _point_layer_features(params, needed, plan, act, domain=domain, data=data,
                                     param_map=param_map)
    return _taylor_layer_features(params, needed, plan, act, radius=radius, center=center,
                                  domain=domain, centers=centers, param_map=param_map)


def _point_layer_features(params, needed, plan: _Plan, act, *, domain, data, param_map):
    """Activations at points: the user's ``data``, or collocation nodes of the domain (or of
    ``U`` mapped through ``iota``); every layer uses a prefix of one point set."""
    dtype = jnp.result_type(params[0]["kernel"])
    if plan.features == "data":
        x = jnp.asarray(data, dtype)
    else:
        n = max(plan.n_points[l - 1] for l in needed)
        if param_map is not None:
            x = jax.vmap(param_map.fn)(param_map.domain.nodes(n, plan.nodes, dtype))
        else:
            x = domain.nodes(n, plan.nodes, dtype)
    hs = point_features(params, x, activation=act, upto=max(needed))
    out = {}
    for l in needed:
        z = hs[l - 1]
        if plan.features == "collocation" and plan.nodes != "chebyshev_grid":
            z = z[: plan.n_points[l - 1]]  # Sobol prefixes are the smaller point sets
        out[l] = (z, None, 1.0)
    return out


def _taylor_layer_features(params, needed, plan: _Plan, act, *, radius, center, domain, centers,
                           param_map):
    """Taylor coefficients, grouped by coordinate source (the input, a bottleneck layer or
    ``u`` of a parameterisation) and stacked over the expansion centres (``taylor_multi``)."""
    dtype = jnp.result_type(params[0]["kernel"])
    out = {}
    groups: dict[int, list[int]] = {}
    for l in needed:
        groups.setdefault(plan.sources[l - 1], []).append(l)
    for src, layers in groups.items():
        k = max(plan.orders[l - 1] for l in layers)
        top = max(layers)
        m = plan.coord_dims[layers[0] - 1]
        sub = list(params[:top]) + [params[top]]
        if src == 0 and plan.features in BACKENDS:
            # plain derivative matching: the original code path
            feats = derivative_features(sub, activation=act, order=k, backend=plan.features,
                                        center=center)
            for l in layers:
                z = feats[l - 1][: num_monomials(m, plan.orders[l - 1])]
                out[l] = (z, monomials(m, plan.orders[l - 1]).sum(axis=1), radius)
            continue
        pts = centers if plan.features == "taylor_multi" else center[None]
        n_c = pts.shape[0]
        if src > 0:
            # coordinates z = h^(src)(x): the sub-network from layer src + 1 on is an MLP in z
            def to_z(x, src=src):
                return hidden_activations(params[:src] + [params[src]], x, activation=act)[-1]

            z0 = to_z(center[None])[0]
            zr = to_z(domain.nodes(_BOTTLENECK_RADIUS_POINTS, "sobol", dtype))
            r_src = jnp.max(jnp.sqrt(jnp.sum((zr - z0[None]) ** 2, axis=1)))
            pts_c = to_z(pts)
            body = params[src:top]
        else:
            r_src = radius
            pts_c = pts
            body = params[:top]
        if plan.features in ("jet", "jacfwd"):
            # only src > 0 reaches here (iota needs the taylor pass; validated in compress)
            feats = derivative_features(list(params[src:top]) + [params[top]], activation=act,
                                        order=k, backend=plan.features, center=pts_c[0])
            feats = [f[None] for f in feats]
        else:
            def start(c, src=src, k=k):
                if src == -1:
                    return parameterization_polynomial(param_map.fn, c, k)
                return input_polynomial(c, k)

            feats = jax.vmap(lambda c, start=start, body=body, k=k, m=m: propagate_polynomial(
                start(c), body, activation=act, order=k, num_vars=m))(pts_c)
        first = max(src, 0)
        # J well-spread centres each cover a region of radius ~ r J^(-1/m): scale rows to it
        r_eff = r_src * (float(n_c) ** (-1.0 / m) if plan.features == "taylor_multi" else 1.0)
        for l in layers:
            d_k = num_monomials(m, plan.orders[l - 1])
            z = feats[l - first - 1][:, :d_k]
            deg = np.tile(monomials(m, plan.orders[l - 1]).sum(axis=1), z.shape[0])
            out[l] = (z.reshape(-1, z.shape[-1]), deg, r_eff)
    return out


def _compress_impl(params, radius, center=None, domain=None, data=None, centers=None, key=None,
                   param_map=None, *, act_name, orders, layer_order, features, selector, widths,
                   select_kwargs, plan=None, coordinates="input"):
    n_hidden = len(params) - 1
    d = params[0]["kernel"].shape[0]
    if plan is None:
        plan = _Plan(features, orders, (0,) * n_hidden, (d,) * n_hidden, (0,) * n_hidden, "sobol")
    teacher_params = params
    # the error estimate's domain: the parameterisation, the given domain, or the ball
    est_domain = param_map if param_map is not None else (
        domain if domain is not None else Ball(d, radius))
    if center is None:
        center = jnp.zeros((d,), jnp.result_type(params[0]["kernel"]))
    infos: list[LayerInfo | None] = [None] * n_hidden
    traced = {"radius": radius, "center": center, "domain": domain, "data": data,
              "centers": centers, "param_map": param_map}

    def one(params, l, feat, target=None):
        z, degrees, r = feat
        k = orders[l - 1]
        kwargs = dict(select_kwargs)
        if selector == "random":
            kwargs["key"] = jax.random.fold_in(key, l)
        new, info = compress_layer(params, l, z, width=widths[l - 1], selector=selector,
                                   radius=r, degrees=degrees, target=target, **kwargs)
        m = plan.coord_dims[l - 1]
        infos[l - 1] = dataclasses.replace(info, order=k, num_features=num_monomials(m, k),
                                           num_rows=z.shape[0], coord_dim=m)
        return new

    if layer_order == "backward":
        feats = _layer_features(params, list(range(1, n_hidden + 1)), plan, act_name, **traced)
        for l in range(n_hidden, 0, -1):
            params = one(params, l, feats[l])
    else:
        teacher = None
        if plan.features in POINT_FEATURES:
            # error-correcting forward order: re-fit each layer to the teacher at the same points
            teacher = _layer_features(params, list(range(1, n_hidden + 1)), plan, act_name,
                                      **traced)
            teacher_kernels = [layer["kernel"] for layer in params]
        for l in range(1, n_hidden + 1):
            # only the first l layers matter: the upstream map of layer l and the layer itself
            sub = params[:l] + [params[l]]
            feat = _layer_features(sub, [l], plan, act_name, **traced)[l]
            target = None
            if teacher is not None:
                target = jnp.matmul(teacher[l][0], teacher_kernels[l], precision=HIGHEST)
            params = one(params, l, feat, target)
    estimate = error_estimate(teacher_params, params, activation=act_name, domain=est_domain)
    return params, CompressInfo(
        layers=tuple(infos), activation=act_name, layer_order=layer_order, features=features,
        selector=selector, coordinates=coordinates, error_estimate=estimate,
    )


_compress_jit = jax.jit(
    _compress_impl,
    static_argnames=("act_name", "orders", "layer_order", "features", "selector", "widths",
                     "select_kwargs", "plan", "coordinates"),
)


class _Default:
    """Marks an argument left at its default (to tell ``radius=1.0`` from no radius)."""

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


_DEFAULT_RADIUS = _Default(1.0)


def _is_domain(obj) -> bool:
    return all(hasattr(obj, a) for a in ("dim", "radius", "center", "nodes", "sample", "project"))


def compress(
    params: Params,
    *,
    activation: str,
    order: int | Sequence[int],
    radius=_DEFAULT_RADIUS,
    layer_order: str = "backward",
    features: str = "taylor",
    selector: str = "pivoted_qr",
    widths: Sequence[int] | None = None,
    rtol: float | None = None,
    delta: float = 1e-2,
    domain=None,
    data: jax.Array | None = None,
    oversample: int = 4,
    nodes: str = "sobol",
    centers: jax.Array | None = None,
    coordinates: str | Parameterization | None = None,
    key: jax.Array | None = None,
) -> tuple[Params, CompressInfo]:
    """Compress every hidden layer of an MLP: select neurons on features, re-weight the next layer.

    For hidden layer ``l`` a feature matrix ``Z_l`` (one column per neuron) is built, a selector
    keeps ``n_l`` columns ``K`` and the next layer is re-weighted by the least-squares
    coefficients ``C = Z_K^+ Z`` (Algorithm 1; exact matching when ``rank Z <= n_l``):
    ``K~_l = K_l[:, K]``, ``b~_l = b_l[K]``, ``K~_{l+1} = C K_{l+1}``.

    Feature kinds (``features=``):

    ``"taylor"`` (default), ``"jet"``, ``"jacfwd"``
        derivative features ``Z[alpha, i] = d^alpha h_i(x0) / alpha!`` at the domain's centre
        ``x0``, ``D_k`` rows, rows scaled by ``R^|alpha|`` for selection (the paper's derivative
        matching; three backends for the same numbers).
    ``"taylor_multi"``
        derivative features at several ``centers`` stacked (``J D_k`` rows; default: the centre
        and ``+-`` half-way to the boundary along each axis, ``J = 2 d + 1``); rows scaled by
        ``(R J^(-1/m))^|alpha|``; ``C`` is the least-squares fit of all of them.
    ``"collocation"`` (data-free)
        activations ``Z[p, i] = h_i(x_p)`` at ``N = oversample * D_k`` quasi-random ``nodes`` of
        the domain (``"sobol"``; on a :class:`Box` also ``"chebyshev"``, ``"chebyshev_grid"``);
        ``C`` minimises the next layer's pre-activation error over the nodes.
    ``"data"``
        the same on user inputs ``data`` (``(N, d_in)``; Chee et al. 2022).

    Args:
      params: the teacher, a list of ``{"kernel": (fan_in, fan_out), "bias": (fan_out,)}``.
      activation: a registered analytic activation (``"sigmoid"``, ``"tanh"``, ``"gelu"``, ...).
      order: the Taylor order ``k``, one int or one per hidden layer; fixes
        ``D_k = C(m + k, m)`` and the default widths for every feature kind.
      radius: the radius ``R`` of the input ball centred at the origin; rows of degree
        ``|alpha|`` are scaled by ``R^|alpha|`` before selection. May be a traced value. Use
        ``domain`` instead for any other domain (giving both is an error).
      layer_order: ``"backward"`` (deepest layer first, features of the original network in one
        pass; Prop. 17) or ``"forward"`` (recompute features of the partially compressed network).
        With point features (``"collocation"``, ``"data"``) forward order re-fits each layer to
        the *teacher*: the next layer's kernel solves ``Z~_K K~_{l+1} ~= Z_l K_{l+1}`` by least
        squares, ``Z~`` from the compressed upstream and ``Z_l K_{l+1}`` the original network's
        next pre-activation at the same points, so upstream errors are corrected, not compounded.
      features: the feature kind (see above): one of :data:`jaxcompress.features.FEATURE_KINDS`.
      selector: ``"pivoted_qr"``, ``"greedy_gs"``, ``"maxvol"``, ``"exhaustive"``, ``"omp"``
        (output-aware greedy selection: keeps the neurons that best reproduce the next layer's
        pre-activation ``Z K_{l+1}`` rather than every column of ``Z``), or the baselines
        ``"weight_norm"`` (largest outgoing-weight norms) and ``"random"`` (needs ``key``); every
        selector is followed by least-squares re-weighting on the selected features.
      widths: target widths per hidden layer (default ``min(D_k, d_l)``); must not exceed ``d_l``.
      rtol: relative rank threshold (default ``eps * max(rows, d_l)``, numpy's matrix-rank
        tolerance). Pivots below it get zero outgoing weight. In float32 on layers 1000-2000
        wide the default (1.2e-4 to 2.4e-4) also drops the small, high-order Taylor rows and
        leaves an error floor of 1e-5 to 3e-5; ``rtol=10 * jnp.finfo(jnp.float32).eps`` reaches
        the rounding floor there, and on the trained Table 1 teachers (width 512) it gives the
        float64 errors back (benchmarks/README.md, "The rank threshold" and Fig 3).
      delta: maxvol tolerance (``|C_ij| <= 1 + delta``).
      domain: the input domain, a :class:`Ball` (possibly with a centre) or a :class:`Box`: its
        centre is the expansion point of derivative features, its radius (a box's half-diagonal)
        scales them, and collocation nodes are drawn from it. Default ``Ball(d_in, radius)``.
      data: ``(N, d_in)`` inputs for ``features="data"`` (required there, refused elsewhere).
      oversample: collocation points per feature, ``N = oversample * D_k`` (static).
      nodes: the collocation node family (``"sobol"``, ``"chebyshev"``, ``"chebyshev_grid"``).
      centers: ``(J, d_in)`` expansion centres for ``features="taylor_multi"`` (``(J, m)`` points
        of ``U`` with a :class:`Parameterization`).
      coordinates: the effective input dimension (the paper's two corollaries). ``None``: the
        input ``x`` (``m = d_in``). ``"bottleneck"``: each hidden layer takes the activations of
        the narrowest earlier layer ``j`` (if narrower than ``d_in``) as coordinates, so
        ``m = d_j``; derivative features are expanded at ``h^(j)(x0)`` and scaled by the radius
        of the image of the domain (estimated on its Sobol points). A
        :class:`Parameterization` ``(iota, U)``: inputs are ``x = iota(u)``, ``u in U`` (``m =
        U.dim``); features are taken in ``u`` (derivative kinds: ``"taylor"`` and
        ``"taylor_multi"`` only) and collocation nodes are ``iota`` of the nodes of ``U``;
        ``domain`` and ``radius`` must then be left unset.
      key: a PRNG key for ``selector="random"`` (layer ``l`` uses ``fold_in(key, l)``).

    Returns:
      ``(new_params, info)``: the compressed network (same depth, hidden widths ``n_l``) and a
      :class:`CompressInfo` with, per layer, the kept indices, numerical rank, matching residual
      of Eq. (41), ``max |C_ij|``, ``D_k`` and the number of feature rows, plus the feature kind,
      selector and coordinates used.

    The computation is jit-compiled (configuration static; one compilation per shape) and may be
    wrapped in ``jax.jit`` or ``jax.vmap`` (e.g. over a stack of teachers of equal shapes). Radii,
    domains, data, centres and keys are traced.

    References:
      Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks",
      Algorithm 1, Theorems 5-6, Proposition 17 and the effective-dimension corollaries.
      Chee, Renz, Damle & De Sa (2022), "Model Preserving Compression for Neural Networks".
    """
    where = "compress"
    radius_given = radius is not _DEFAULT_RADIUS
    radius = 1.0 if not radius_given else radius
    check_radius(radius, where)
    if rtol is not None:
        if isinstance(rtol, bool) or np.ndim(rtol) != 0 or not (0 <= float(rtol) < 1):
            raise ValueError(f"{where}: rtol must be a number in [0, 1) (a relative rank "
                             f"threshold; default 10 eps of the dtype), got {rtol!r}")
    params = validate_params(params, where=where)
    act = get_activation(activation)
    n_hidden = len(params) - 1
    orders = _orders(order, n_hidden, where)
    if layer_order not in LAYER_ORDERS:
        raise ValueError(f"{where}: layer_order must be one of {LAYER_ORDERS}, got {layer_order!r}")
    if features not in FEATURE_KINDS:
        raise ValueError(f"{where}: features must be one of {FEATURE_KINDS}, got {features!r}")
    if selector not in SELECTORS:
        raise ValueError(f"{where}: selector must be one of {SELECTORS}, got {selector!r}")
    d, dtype = require_single_network(
        params, where=where, hint="wrap compress in jax.vmap for a stack of networks")
    hidden = [layer["kernel"].shape[1] for layer in params[:-1]]
    sizes = [d] + hidden + [params[-1]["kernel"].shape[1]]

    # --- coordinates: sources and effective dimensions per hidden layer -------------------------
    param_map = None
    if coordinates is None or (isinstance(coordinates, str) and coordinates == "input"):
        coord_name = "input"
        sources, coord_dims = (0,) * n_hidden, (d,) * n_hidden
    elif isinstance(coordinates, str) and coordinates == "bottleneck":
        coord_name = "bottleneck"
        sources = bottleneck_sources(sizes)
        coord_dims = tuple(sizes[j] for j in sources)
    elif isinstance(coordinates, Parameterization):
        coord_name = "parameterization"
        param_map = coordinates
        if domain is not None or radius_given:
            raise ValueError(
                f"{where}: with coordinates=Parameterization(iota, U) the parameter domain U "
                "sets the expansion point and radius; leave domain and radius unset"
            )
        if features in ("jet", "jacfwd"):
            raise ValueError(
                f"{where}: coordinates=Parameterization supports features 'taylor', "
                f"'taylor_multi', 'collocation' and 'data', got {features!r}"
            )
        m = param_map.dim
        try:
            out_shape = jax.eval_shape(param_map.fn, jax.ShapeDtypeStruct((m,), dtype)).shape
        except Exception as exc:  # noqa: BLE001 - report the user's function failing
            raise ValueError(
                f"{where}: the parameterization fn failed on an input of shape ({m},): {exc}"
            ) from exc
        if out_shape != (d,):
            raise ValueError(
                f"{where}: the parameterization maps ({m},) to {out_shape}; expected ({d},) to "
                "match the network's input size"
            )
        sources, coord_dims = (-1,) * n_hidden, (m,) * n_hidden
    else:
        raise ValueError(
            f"{where}: coordinates must be None, 'bottleneck' or a jaxcompress.Parameterization, "
            f"got {coordinates!r}"
        )

    # --- domain, radius, centre ------------------------------------------------------------------
    if domain is not None:
        if radius_given:
            raise ValueError(
                f"{where}: pass either radius or domain, not both (got radius={radius!r}; the "
                "domain's own radius scales the features)"
            )
        if not _is_domain(domain):
            raise TypeError(
                f"{where}: domain must be a jaxcompress.Ball or jaxcompress.Box, got "
                f"{type(domain).__name__}"
            )
        if domain.dim != d:
            raise ValueError(
                f"{where}: domain has dim {domain.dim}; the network takes inputs of size {d}"
            )
    point_domain = param_map.domain if param_map is not None else domain
    if param_map is not None:
        radius_arr = jnp.asarray(point_domain.radius, dtype)
        center = domain_center(point_domain, dtype)
    elif domain is not None:
        radius_arr = jnp.asarray(domain.radius, dtype)
        center = domain_center(domain, dtype)
    else:
        radius_arr = jnp.asarray(radius, dtype)
        center = None  # the origin
    needs_domain = (features == "collocation" or coord_name == "bottleneck"
                    or (features == "taylor_multi" and centers is None))
    if point_domain is None and needs_domain:
        point_domain = Ball(d, radius_arr)
    if center is None and coord_name == "bottleneck":
        center = jnp.zeros((d,), dtype)

    # --- feature-specific arguments --------------------------------------------------------------
    if features == "data":
        if data is None:
            raise ValueError(f"{where}: features='data' needs data=, an (N, {d}) array of inputs")
        if np.ndim(data) != 2 or np.shape(data)[1] != d or np.shape(data)[0] < 1:
            raise ValueError(
                f"{where}: data has shape {np.shape(data)}; expected (N, {d}) with N >= 1 (the "
                f"network takes inputs of size {d})"
            )
        data = jnp.asarray(data, dtype)
    elif data is not None:
        raise ValueError(f"{where}: data= is only used by features='data', got features="
                         f"{features!r}")
    if isinstance(oversample, bool) or not isinstance(oversample, (int, np.integer)) \
            or oversample < 1:
        raise ValueError(f"{where}: oversample must be a positive int, got {oversample!r}")
    if nodes not in NODE_KINDS:
        raise ValueError(f"{where}: nodes must be one of {NODE_KINDS}, got {nodes!r}")
    if features == "collocation" and nodes != "sobol" and not isinstance(point_domain, Box):
        raise ValueError(
            f"{where}: nodes={nodes!r} needs a Box domain (a ball only has Sobol nodes)"
        )
    coord_space = param_map.dim if param_map is not None else d
    if features == "taylor_multi":
        if centers is None:
            if isinstance(point_domain, Box):
                half = point_domain.half_width
            else:
                half = jnp.full((coord_space,), 1.0, dtype) * jnp.asarray(point_domain.radius,
                                                                          dtype)
            centers = default_centers(domain_center(point_domain, dtype), jnp.asarray(half, dtype))
        centers = jnp.asarray(centers, dtype)
        if centers.ndim != 2 or centers.shape[1] != coord_space or centers.shape[0] < 1:
            raise ValueError(
                f"{where}: centers has shape {centers.shape}; expected (J, {coord_space}) "
                "expansion points" + (" of the parameter domain" if param_map else "")
            )
    elif centers is not None:
        raise ValueError(f"{where}: centers= is only used by features='taylor_multi', got "
                         f"features={features!r}")
    if selector == "random":
        if key is None:
            raise ValueError(f"{where}: selector='random' needs key=, a PRNG key")
    elif key is not None:
        raise ValueError(f"{where}: key= is only used by selector='random', got selector="
                         f"{selector!r}")

    # --- sizes -----------------------------------------------------------------------------------
    itemsize = jnp.dtype(dtype).itemsize
    if coord_name == "input" and features not in POINT_FEATURES:
        check_feature_budget(d, max(orders), max(hidden), itemsize, where=where)
    elif features not in POINT_FEATURES:
        for m in sorted(set(coord_dims)):
            ks = [k for k, mm in zip(orders, coord_dims, strict=True) if mm == m]
            check_feature_budget(m, max(ks), max(hidden), itemsize, where=where)
    d_ks = tuple(num_monomials(m, k) for m, k in zip(coord_dims, orders, strict=True))
    n_points = tuple(oversample * dk if features == "collocation" else 0 for dk in d_ks)
    if features == "collocation":
        need = max(n_points) * (sum(hidden) + d) * itemsize
        if need > MAX_FEATURE_BYTES:
            raise ValueError(
                f"{where}: collocation with {max(n_points):,} points (oversample {oversample} x "
                f"D_k {max(d_ks):,}) would need about {need / 2**30:.1f} GiB (limit "
                f"jaxcompress.taylor.MAX_FEATURE_BYTES). Lower the order or the oversampling."
            )
    if widths is None:
        widths = tuple(min(dk, w) for dk, w in zip(d_ks, hidden, strict=True))
    else:
        widths = tuple(int(w) for w in widths)
        if len(widths) != n_hidden:
            raise ValueError(f"{where}: widths has {len(widths)} entries; expected {n_hidden}")
        for l, (w, h) in enumerate(zip(widths, hidden, strict=True), start=1):
            if not 1 <= w <= h:
                raise ValueError(
                    f"{where}: target width {w} for hidden layer {l} must be in [1, {h}] "
                    f"(the layer's width)"
                )
    if selector == "exhaustive":
        # fail eagerly, outside jit, with the size of the enumeration
        for l, (w, h) in enumerate(zip(widths, hidden, strict=True), start=1):
            if math.comb(h, w) > MAX_EXHAUSTIVE_SUBSETS:
                raise ValueError(
                    f"{where}: selector='exhaustive' would enumerate C({h}, {w}) = "
                    f"{math.comb(h, w):,} subsets in hidden layer {l} (limit "
                    f"{MAX_EXHAUSTIVE_SUBSETS:,}); it is for tiny problems only - use 'maxvol'."
                )
    select_kwargs = (("delta", float(delta)),) + (
        (("rtol", float(rtol)),) if rtol is not None else ())
    if coord_name == "input" and features in BACKENDS and domain is None:
        # the original derivative-matching call: unchanged arguments and compilation cache
        return _compress_jit(
            params, radius_arr, act_name=act.name, orders=orders, layer_order=layer_order,
            features=features, selector=selector, widths=widths, select_kwargs=select_kwargs,
            **({"key": key} if key is not None else {}),
        )
    plan = _Plan(features, orders, sources, coord_dims, n_points, nodes)
    return _compress_jit(
        params, radius_arr, center, point_domain, data, centers, key, param_map,
        act_name=act.name, orders=orders, layer_order=layer_order, features=features,
        selector=selector, widths=widths, select_kwargs=select_kwargs, plan=plan,
        coordinates=coord_name,
    )


def trim(params: Params, info: CompressInfo | None = None, *, atol: float = 0.0) -> Params:
    """Drop hidden neurons whose outgoing weights are all zero (host side, not jit-able).

    Such neurons are the surplus ones past the numerical rank (their incoming weights are kept by
    :func:`compress` so widths stay static). The function computed is unchanged; widths shrink.
    ``info`` is accepted for symmetry with :func:`compress` and is not required.
    """
    del info
    params = [{k: np.asarray(v) for k, v in layer.items()} for layer in
              validate_params(params, where="trim")]
    if params[0]["kernel"].ndim != 2:
        raise ValueError("trim: expected one network (2-D kernels); trim each network separately")
    out = [dict(layer) for layer in params]
    for l in range(1, len(out)):
        keep = np.any(np.abs(out[l]["kernel"]) > atol, axis=1)
        if not keep.any():
            keep[0] = True  # keep one neuron so the layer stays well-formed
        out[l - 1] = {"kernel": out[l - 1]["kernel"][:, keep], "bias": out[l - 1]["bias"][keep]}
        out[l] = {"kernel": out[l]["kernel"][keep], "bias": out[l]["bias"]}
    return [{k: jnp.asarray(v) for k, v in layer.items()} for layer in out]
