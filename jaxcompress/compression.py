"""Compression: a pure per-layer step, the backward / forward drivers, and ``compress``.

For hidden layer ``l`` with features ``Z_l`` (one column per neuron; a feature map of
:mod:`jaxcompress.features`) a selector (:mod:`jaxcompress.select`) keeps ``n_l`` neurons ``K``
with coefficients ``C = Z_K^+ Z`` (Algorithm 1), and the layer is rewired as

.. math::
   \\tilde K_l = K_l[:, K], \\quad \\tilde b_l = b_l[K], \\quad \\tilde K_{l+1} = C\\,K_{l+1},

(Flax layout; in the paper's ``(out, in)`` layout ``W~^{(l+1)} = W^{(l+1)} C^T``, Algorithm 1
line 12), so every feature of the next layer's pre-activation is unchanged:
``Z_K \\tilde K_{l+1} = Z K_{l+1}`` (Eq. 41). With derivative features the error is the Taylor
tail (Theorems 5 and 6).

:func:`compress_layer` is that step as a pure function of ``(features, outgoing kernel, width,
selector)``; :func:`compress` runs it over every hidden layer, in backward order (deepest first:
every layer's upstream map is still the original one, so all features come from one pass of the
original network; Proposition 17) or forward order (features of the partially compressed
network), inside one ``jax.jit``. Hidden widths depend only on static configuration, so
:func:`compress` composes with ``jax.jit`` and ``jax.vmap`` (e.g. over a stack of teachers);
neurons beyond the numerical rank get zero outgoing weight and :func:`trim` removes them on the
host. ``jax.grad`` and ``jax.jvp`` through :func:`compress` give the derivative with the kept
neurons and the numerical rank held fixed (the selection is piecewise constant in the
parameters); ``tests/test_derivatives.py`` checks it against finite differences.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress import sharding
from jaxcompress._checks import check_compute_dtype, check_info_matches, describe, finite_number
from jaxcompress.activations import get_activation
from jaxcompress.domains import Ball, check_domain, check_radius
from jaxcompress.evaluate import ERROR_POINTS, error_estimate
from jaxcompress.features import DerivativeFeatures, LayerFeatures
from jaxcompress.methods import BestOf, Method, derivative_matching
from jaxcompress.mlp import (
    HIGHEST,
    Params,
    SizedNetwork,
    layer_sizes,
    param_count,
    require_single_network,
    validate_params,
)
from jaxcompress.placement import Placement
from jaxcompress.select import Selector, default_rtol, lstsq_coefficients, reduce_rows
from jaxcompress.taylor import memory_limit, num_monomials

__all__ = ["BackwardSteps", "CompressInfo", "FrontEnd", "LayerInfo", "compress", "compress_layer",
           "memory_estimate", "rewire", "trim", "trim_info"]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["kept", "rank", "residual", "max_coef", "swaps"],
    meta_fields=["layer", "order", "num_features", "width_in", "width_out", "num_rows",
                 "coord_dim", "skipped"],
)
@dataclasses.dataclass(frozen=True)
class LayerInfo:
    """What happened to one hidden layer.

    Attributes:
      kept: indices (into the original layer) of the kept neurons, in pivot order.
      rank: numerical rank of the (row-scaled) feature matrix; kept neurons past it get zero
        outgoing weight.
      residual: the matching residual of Eq. (41), ``max |Z_K K~_{l+1} - Z K_{l+1}|`` (zero in
        exact arithmetic when ``rank <= width_out``; for point features, the largest change of
        the next layer's pre-activation over the points, against the teacher's in forward
        order).
      max_coef: ``max |C_ij|`` over the basis rows (Lemma 10: ``<= 1 + delta`` for maxvol).
      swaps: number of maxvol swaps (0 for other selectors).
      layer: hidden-layer index (1-based, as in the paper).
      order: the truncation order k of this layer.
      num_features: ``D_k = C(m + k, m)`` with ``m = coord_dim``.
      width_in, width_out: the width before and after.
      num_rows: rows of the feature matrix (``D_k``, ``J D_k`` with ``J`` centres, or the number
        of points); ``-1`` for a :func:`best_of <jaxcompress.best_of>` result whose candidates
        differ in it.
      coord_dim: ``m``, the number of coordinates the features are taken in.
      skipped: ``True`` for a layer kept whole without computing anything: its width is
        ``d_l <= D_k`` (every neuron stays, and ``D_k >= d_l`` features could not remove one
        without losing a matched coefficient), so its features, selection and re-weighting are
        skipped and the layer is the teacher's. Then ``kept = arange(d_l)``, ``rank = d_l``
        (every kept neuron keeps its outgoing weight; the features' numerical rank was not
        computed), ``residual = 0``, ``max_coef = 1`` (``C = I``), ``swaps = 0`` and
        ``num_rows = 0`` (no feature matrix). For a :func:`best_of <jaxcompress.best_of>`
        result, ``True`` only when every candidate skipped the layer.
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
    num_rows: int
    coord_dim: int
    skipped: bool = False

    @classmethod
    def of(cls, features: LayerFeatures, width: int, *, kept, rank, residual, max_coef,
           swaps) -> LayerInfo:
        """The record of one compressed layer: the outcome arrays and the features' description
        (the one constructor, used by :func:`compress_layer`)."""
        return cls(kept=kept, rank=rank, residual=residual, max_coef=max_coef, swaps=swaps,
                   layer=features.layer, order=features.order,
                   num_features=features.num_features, width_in=features.z.shape[1],
                   width_out=width, num_rows=features.z.shape[0], coord_dim=features.coord_dim)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (lists, numbers); batched fields become nested lists."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = np.asarray(v).tolist() if isinstance(v, (jax.Array, np.ndarray)) else v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerInfo:
        arrays = {"kept": np.int32, "rank": np.int32, "swaps": np.int32, "residual": None,
                  "max_coef": None}
        kw = {k: (np.asarray(d[k], arrays[k]) if k in arrays else d[k])
              for k in (f.name for f in dataclasses.fields(cls)) if k in d}
        kw.setdefault("swaps", np.int32(0))
        kw.setdefault("num_rows", -1)
        kw.setdefault("coord_dim", -1)
        return cls(**kw)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["layers", "error_estimate", "choice"],
    meta_fields=["activation", "layer_order", "features", "selector", "coordinates", "method",
                 "candidates"],
)
@dataclasses.dataclass(frozen=True)
class CompressInfo:
    """Per-layer :class:`LayerInfo` (``layers[l - 1]`` is hidden layer ``l``) and the settings.

    Attributes:
      layers: the per-layer records.
      activation, layer_order: as used.
      features, selector: the feature map's and selector's names (``"a|b"`` for a best-of).
      coordinates: ``"input"``, ``"bottleneck"`` or ``"parameterization"``.
      method: a description of the method.
      error_estimate: ``max |F - F~|`` over the :data:`~jaxcompress.evaluate.ERROR_POINTS` fixed
        Sobol points of the domain (:func:`jaxcompress.evaluate.error_points`), computed inside
        the compression's jit (one value per teacher under ``jax.vmap``): a lower bound on the
        sup error, measured on points no method was fitted on (ours, not the paper's).
      choice: for :func:`~jaxcompress.best_of`, the index of the winning candidate (per teacher
        under ``vmap``), else ``None``.
      candidates: for :func:`~jaxcompress.best_of`, the candidates' descriptions.

    Under ``jax.vmap`` every array field gains a leading batch axis; :meth:`summary` then shows
    the range over the batch.
    """

    layers: tuple[LayerInfo, ...]
    activation: str
    layer_order: str
    features: str
    selector: str
    coordinates: str = "input"
    method: str = ""
    error_estimate: jax.Array | None = None
    choice: jax.Array | None = None
    candidates: tuple[str, ...] = ()

    @classmethod
    def for_method(cls, method: Method, domain, layers: Sequence[LayerInfo], *,
                   activation: str, error_estimate: jax.Array | None) -> CompressInfo:
        """The record of ``method`` applied to one network (the one constructor of a
        compression's record; :func:`jaxcompress.best_of` combines such records)."""
        coordinates = (domain.coordinates if domain.coordinates != "input"
                       else method.features.coordinates)
        return cls(layers=tuple(layers), activation=activation,
                   layer_order=method.layer_order, features=method.features.name,
                   selector=method.selector.name, coordinates=coordinates,
                   method=method.describe(), error_estimate=error_estimate)

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
                f"{f'{li.width_in} -> {li.width_out}':>13} "
                f"{'whole' if li.skipped else _span(li.rank, 'd'):>9} "
                f"{float(np.max(li.residual)):>10.2e} {float(np.max(li.max_coef)):>8.3f}"
            )
        if self.error_estimate is not None:
            est = np.asarray(self.error_estimate)
            batch = f" ({est.size} teachers)" if est.ndim else ""
            lines.append(f"error estimate {_span(est, '.2e')}{batch}: max |F - F~| on "
                         f"{ERROR_POINTS} Sobol points of the domain (a lower bound on the sup "
                         "error)")
        if self.choice is not None:
            wins = np.bincount(np.asarray(self.choice).reshape(-1),
                               minlength=len(self.candidates))
            lines.append("best of: " + "; ".join(
                f"{c} [won {w}]" for c, w in zip(self.candidates, wins, strict=True)))
        elif self.method:
            lines.append(f"method: {self.method}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the settings, the error estimate and every layer's record."""
        def plain(v):
            return None if v is None else np.asarray(v).tolist()

        return {"activation": self.activation, "layer_order": self.layer_order,
                "features": self.features, "selector": self.selector,
                "coordinates": self.coordinates, "method": self.method,
                "error_estimate": plain(self.error_estimate), "choice": plain(self.choice),
                "candidates": list(self.candidates),
                "layers": [li.to_dict() for li in self.layers]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompressInfo:
        """The inverse of :meth:`to_dict` (arrays as NumPy arrays)."""
        def arr(v):
            return None if v is None else np.asarray(v)

        return cls(layers=tuple(LayerInfo.from_dict(li) for li in d["layers"]),
                   activation=d["activation"], layer_order=d["layer_order"],
                   features=d["features"], selector=d["selector"],
                   coordinates=d.get("coordinates", "input"), method=d.get("method", ""),
                   error_estimate=arr(d.get("error_estimate")), choice=arr(d.get("choice")),
                   candidates=tuple(d.get("candidates", ())))


def _span(values, fmt: str) -> str:
    """``v`` or ``lo..hi`` (a batch's range) of an array, formatted with ``fmt``."""
    arr = np.asarray(values)
    lo, hi = arr.min(), arr.max()
    cast = int if fmt == "d" else float
    if lo == hi:
        return format(cast(lo), fmt)
    return f"{format(cast(lo), fmt)}..{format(cast(hi), fmt)}"


# ------------------------------------------------------------------------------------------------
# The per-layer step
# ------------------------------------------------------------------------------------------------


def compress_layer(
    features: LayerFeatures,
    out_kernel: jax.Array,
    width: int,
    selector: Selector,
    *,
    target: jax.Array | None = None,
    placement: Placement | None = None,
) -> tuple[jax.Array, jax.Array, LayerInfo]:
    """Select ``width`` neurons of one hidden layer and re-weight the next: a pure function.

    Args:
      features: the layer's :class:`~jaxcompress.features.LayerFeatures` (``z``, the row
        scaling, the layer's description).
      out_kernel: ``K_{l+1}`` (``d_l x d_{l+1}``), the next layer's kernel.
      width: neurons to keep (static), ``1 <= width <= d_l``.
      selector: a :class:`~jaxcompress.Selector`.
      target: ``(rows, d_{l+1})``: what the kept neurons must reproduce instead of the layer's
        own next pre-activation features ``z K_{l+1}``; the new kernel is then the least-squares
        solution of ``Z_K K~ ~= target`` (forward order re-fits point features to the teacher).
      placement: where the layer's neurons live (``None``: one device); with a
        :class:`~jaxcompress.placement.Placement` the selection and re-weighting run in
        :func:`jaxcompress.sharding.sharded_step` (the selector's
        :meth:`~jaxcompress.Selector.distributed_select`: for the QR, maxvol, OMP and weight-norm
        selectors the same neurons as on one device) and every array stays split by neurons.

    Returns:
      ``(kept, new_out_kernel, info)``: the kept indices ``(width,)`` in pivot order, the new
      next-layer kernel ``(width, d_{l+1})`` and the complete :class:`LayerInfo`.
    """
    if not isinstance(features, LayerFeatures):
        raise TypeError("compress_layer: features must be a jaxcompress.features.LayerFeatures "
                        f"(the matrix with its row scaling and description), got "
                        f"{describe(features)}; wrap a matrix Z as LayerFeatures(z=Z, scale=None, "
                        "layer=1, order=k, num_features=Z.shape[0], coord_dim=d_in)")
    rtol = default_rtol(features.z.dtype) if selector.rtol is None else selector.rtol
    if placement is not None:
        kept, new_kernel, rank, residual, max_coef, swaps = sharding.sharded_step(
            features, out_kernel, width, selector, placement, rtol=rtol, target=target)
    else:
        kept, new_kernel, rank, residual, max_coef, swaps = _select_and_reweight(
            features, out_kernel, width, selector, rtol=rtol, target=target)
    return kept, new_kernel, LayerInfo.of(features, width, kept=kept, rank=rank,
                                          residual=residual, max_coef=max_coef, swaps=swaps)


def _select_and_reweight(features: LayerFeatures, out_kernel, width: int, selector: Selector,
                         *, rtol, target):
    """Algorithm 1 on one device: ``(kept, new kernel, rank, residual, max|C|, swaps)``."""
    z, scale = features.z, features.scale
    zs = z if scale is None else z * scale[:, None]
    ts = target if (target is None or scale is None) else target * scale[:, None]
    zr, tr = reduce_rows(zs, ts)
    sel = selector(zr, width, out_kernel=out_kernel, target=tr, layer=features.layer)
    kept = sel.perm[:width]
    if target is None:
        new_kernel = jnp.matmul(sel.coef, out_kernel[sel.perm], precision=HIGHEST)
        before = jnp.matmul(z, out_kernel, precision=HIGHEST)
    else:
        new_kernel, _ = lstsq_coefficients(z[:, kept], jnp.arange(width, dtype=jnp.int32),
                                           width, rtol, rhs=target)
        before = target
    after = jnp.matmul(z[:, kept], new_kernel, precision=HIGHEST)
    # QR selectors: rows past the rank are zero; baselines (SVD least squares): all rows count
    live = (jnp.arange(width, dtype=jnp.int32) < sel.rank) | selector.baseline
    max_coef = jnp.max(jnp.where(live[:, None], jnp.abs(sel.coef), 0))
    return kept, new_kernel, sel.rank, jnp.max(jnp.abs(after - before)), max_coef, sel.swaps


def rewire(params: Params, layer: int, kept: jax.Array, out_kernel: jax.Array) -> Params:
    """Params with hidden layer ``layer`` (1-based) cut to ``kept`` and the next kernel replaced.

    ``K~_l = K_l[:, kept]``, ``b~_l = b_l[kept]``, ``K~_{l+1} = out_kernel`` (Algorithm 1,
    lines 12-13).
    """
    new = list(params)
    inc, out = params[layer - 1], params[layer]
    new[layer - 1] = {"kernel": inc["kernel"][:, kept], "bias": inc["bias"][kept]}
    new[layer] = {"kernel": out_kernel, "bias": out["bias"]}
    return new


# ------------------------------------------------------------------------------------------------
# Drivers
# ------------------------------------------------------------------------------------------------


def resolve_widths(method: Method, sizes: Sequence[int], domain) -> tuple[int, ...]:
    """The hidden widths of ``method`` on a network of ``sizes``: given, or ``min(D_k, d_l)``."""
    if method.widths is not None:
        return method.widths
    d_ks = method.features.num_features(list(sizes), domain)
    return tuple(min(dk, w) for dk, w in zip(d_ks, sizes[1:-1], strict=True))


def _skipped_layers(method: Method, sizes: Sequence[int], domain,
                    widths: Sequence[int]) -> tuple[bool, ...]:
    """Per hidden layer: kept whole with nothing computed (see ``LayerInfo.skipped``).

    A layer is skipped when it keeps all its ``d_l`` neurons and has ``D_k >= d_l`` features
    (selection would keep every neuron with ``C = I``). In forward order with re-fitting, a
    layer after a compressed one is not skipped: its re-fit compensates the upstream change.
    """
    d_ks = method.features.num_features(list(sizes), domain)
    whole = [w == h <= dk for w, h, dk in zip(widths, sizes[1:-1], d_ks, strict=True)]
    if method.layer_order == "forward" and method.features.refit:
        whole = [w and all(whole[:i]) for i, w in enumerate(whole)]
    return tuple(whole)


def _skipped_info(method: Method, sizes: Sequence[int], domain, l: int, dtype) -> LayerInfo:
    """The :class:`LayerInfo` of hidden layer ``l`` kept whole (nothing computed)."""
    fmap, width = method.features, sizes[l]
    order, coord_dim = fmap.layer_description(list(sizes), domain, l)
    return LayerInfo(
        kept=jnp.arange(width, dtype=jnp.int32), rank=jnp.asarray(width, jnp.int32),
        residual=jnp.zeros((), dtype), max_coef=jnp.ones((), dtype),
        swaps=jnp.zeros((), jnp.int32), layer=l, order=order,
        num_features=fmap.num_features(list(sizes), domain)[l - 1], width_in=width,
        width_out=width, num_rows=0, coord_dim=coord_dim, skipped=True)


def _backward(params: Params, method: Method, domain, act: str, widths, needed, infos,
              placement) -> Params:
    """Deepest hidden layer first; every layer's features from one pass of the original network
    (Proposition 17), only for the layers ``needed`` (their depth and orders, no more)."""
    feats = method.features(params, needed, activation=act, domain=domain,
                            placement=placement) if needed else {}
    for l in reversed(needed):
        kept, kernel, infos[l - 1] = compress_layer(feats[l], params[l]["kernel"], widths[l - 1],
                                                     method.selector, placement=placement)
        params = rewire(params, l, kept, kernel)
    return params


def _forward(params: Params, method: Method, domain, act: str, widths, needed, infos,
             placement) -> Params:
    """First hidden layer first; features of the partially compressed network (each layer
    re-fitted to the teacher when the feature map says ``refit``)."""
    fmap, teacher = method.features, params
    if fmap.refit and needed:
        # forward order re-fits each layer to the teacher at the same rows
        ref = fmap(teacher, needed, activation=act, domain=domain, placement=placement)
    for l in needed:
        # only the first l layers matter: the upstream map of layer l and the layer itself
        feat = fmap(params[:l] + [params[l]], [l], activation=act, domain=domain,
                    placement=placement)[l]
        target = (jnp.matmul(ref[l].z, teacher[l]["kernel"], precision=HIGHEST)
                  if fmap.refit else None)
        kept, kernel, infos[l - 1] = compress_layer(feat, params[l]["kernel"], widths[l - 1],
                                                    method.selector, target=target,
                                                    placement=placement)
        params = rewire(params, l, kept, kernel)
    return params


def _run_method(params: Params, method: Method, domain, act: str,
                placement: Placement | None = None) -> tuple[Params, CompressInfo]:
    """One method on one network (pure; traced inside :func:`compress`'s jit)."""
    sizes = layer_sizes(params)
    widths = resolve_widths(method, sizes, domain)
    skipped = _skipped_layers(method, sizes, domain, widths)
    needed = [l for l, skip in enumerate(skipped, start=1) if not skip]
    dtype = jnp.result_type(params[0]["kernel"])
    infos = [_skipped_info(method, sizes, domain, l, dtype) if skip else None
             for l, skip in enumerate(skipped, start=1)]
    drive = _backward if method.layer_order == "backward" else _forward
    small = drive(params, method, domain, act, widths, needed, infos, placement)
    estimate = error_estimate(params, small, activation=act, domain=domain, placement=placement)
    return small, CompressInfo.for_method(method, domain, infos, activation=act,
                                          error_estimate=estimate)


def _best(results: list[tuple[Params, CompressInfo]], method: BestOf) -> tuple[Params,
                                                                                 CompressInfo]:
    """Per teacher, the candidate with the smallest error estimate (same shapes throughout).

    A non-finite estimate (a NaN result, e.g. from non-finite traced data) never wins; when
    every candidate's is non-finite the first is kept and the estimate is NaN.
    """
    estimates = jnp.stack([info.error_estimate for _, info in results])
    finite = jnp.isfinite(estimates)
    choice = jnp.argmin(jnp.where(finite, estimates, jnp.inf)).astype(jnp.int32)
    best_estimate = jnp.where(jnp.any(finite), estimates[choice], jnp.nan)

    def pick(*xs):
        return jnp.stack(xs)[choice]

    params = jax.tree.map(pick, *[p for p, _ in results])
    first = results[0][1]
    layers = []
    for i, li in enumerate(first.layers):
        cands = [info.layers[i] for _, info in results]
        arrays = {f: pick(*[getattr(c, f) for c in cands])
                  for f in ("kept", "rank", "residual", "max_coef", "swaps")}
        rows = {c.num_rows for c in cands}
        layers.append(dataclasses.replace(li, **arrays,
                                          num_rows=rows.pop() if len(rows) == 1 else -1,
                                          skipped=all(c.skipped for c in cands)))

    def joined(field):
        return "|".join(dict.fromkeys(getattr(info, field) for _, info in results))

    info = dataclasses.replace(
        first, layers=tuple(layers), layer_order=joined("layer_order"),
        features=joined("features"), selector=joined("selector"),
        coordinates=joined("coordinates"), method=method.describe(),
        error_estimate=best_estimate, choice=choice,
        candidates=tuple(m.describe() for m in method.methods))
    return params, info


def _compress_impl(params, method, domain, *, activation, placement=None):
    if isinstance(method, BestOf):
        out = _best([_run_method(params, m, domain, activation, placement)
                     for m in method.methods], method)
    else:
        out = _run_method(params, method, domain, activation, placement)
    if placement is not None:  # the compressed network is D_k wide: replicated on the mesh
        replicated = placement.replicated()
        out = (jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, replicated), out[0]),
               out[1])
    return out


_compress_jit = jax.jit(_compress_impl, static_argnames=("activation", "placement"))


class BackwardSteps:
    """Backward-order derivative matching, one cached per-layer step per ``(layer, order)``.

    In backward order each hidden layer's features are those of the original network, so the
    step of layer ``l`` at order ``k`` (:func:`compress_layer` against the original next-layer
    kernel) does not depend on the other layers' orders, and any choice of per-layer orders is an
    assembly of cached steps: :meth:`assemble` gives the compressed network (for selectors that
    ignore the next layer's kernel, such as :class:`~jaxcompress.PivotedQR` and
    :class:`~jaxcompress.MaxVol`, the same network as ``compress(params,
    derivative_matching(orders, selector=...), domain=...)``), :meth:`padded` the same function
    with the original shapes (dropped neurons get zero outgoing weight: one compilation of an
    error measurement for every candidate). What :func:`jaxcompress.compress_to_tolerance`
    searches over.
    """

    def __init__(self, params: Params, activation: str, domain, selector: Selector):
        self.params, self.act, self.selector, self.domain = params, activation, selector, domain
        self.widths = layer_sizes(params)[1:-1]
        self.k_feat, self.feats = -1, None
        self.step = functools.cache(self._step)

    def _features(self, k: int) -> dict[int, LayerFeatures]:
        if k > self.k_feat:
            self.k_feat = max(k, self.k_feat + 4, 4)  # few recompilations as the order grows
            self.feats = _features_of(self.params, self.domain,
                                      DerivativeFeatures(order=self.k_feat), activation=self.act)
        return self.feats

    def _step(self, l: int, k: int) -> tuple[jax.Array, jax.Array, LayerInfo]:
        full = self._features(k)[l]
        d_k = num_monomials(full.coord_dim, k)
        # monomials are ordered by degree: order k's features are the first D_k rows of order K's
        feats = dataclasses.replace(full, z=full.z[:d_k], scale=full.scale[:d_k], order=k,
                                    num_features=d_k)
        return _step_jit(feats, self.params[l]["kernel"], width=min(d_k, self.widths[l - 1]),
                         selector=self.selector)

    def padded(self, orders: dict[int, int]) -> Params:
        """The teacher with layer ``l`` compressed at ``orders[l]``, shapes unchanged."""
        out = list(self.params)
        for l, k in orders.items():
            kept, kernel, _ = self.step(l, k)
            out[l] = {"kernel": jnp.zeros_like(self.params[l]["kernel"]).at[kept].set(kernel),
                      "bias": self.params[l]["bias"]}
        return out

    def assemble(self, orders: Sequence[int]) -> tuple[Params, CompressInfo]:
        """The compressed network at per-layer ``orders`` and its record."""
        steps = [self.step(l, k) for l, k in enumerate(orders, start=1)]
        new = list(self.params)
        for l in range(len(orders), 0, -1):
            kept, kernel, _ = steps[l - 1]
            cols = steps[l][0] if l < len(orders) else slice(None)
            new = rewire(new, l, kept, kernel[:, cols])
        method = derivative_matching(tuple(orders), selector=self.selector)
        estimate = _estimate(self.params, new, activation=self.act, domain=self.domain)
        return new, CompressInfo.for_method(method, self.domain, [step[2] for step in steps],
                                            activation=self.act, error_estimate=estimate)


@functools.partial(jax.jit, static_argnames=("activation",))
def _features_of(params, domain, fmap, *, activation):
    return fmap(params, list(range(1, len(params))), activation=activation, domain=domain)


@functools.partial(jax.jit, static_argnames=("width", "selector"))
def _step_jit(features, out_kernel, *, width, selector):
    return compress_layer(features, out_kernel, width, selector)


_estimate = jax.jit(error_estimate, static_argnames=("activation",))


# ------------------------------------------------------------------------------------------------
# The public call
# ------------------------------------------------------------------------------------------------

#: Method factories by name (for the message of ``compress(params, "collocation", ...)``).
_FACTORIES = ("derivative_matching", "collocation", "data_matching", "best_of")

#: Keyword arguments of the earlier ``compress(..., features=, selector=, ...)`` and where each
#: lives now (for the error message of a stale call).
_MOVED = {
    "features": "the method: jc.derivative_matching(k) / jc.collocation(k) / "
                "jc.data_matching(x, order=k)",
    "selector": "the method: e.g. jc.derivative_matching(k, selector=jc.MaxVol())",
    "layer_order": "the method: e.g. jc.derivative_matching(k, layer_order='forward')",
    "widths": "the method: e.g. jc.derivative_matching(k, widths=(10, 10))",
    "rtol": "the selector: e.g. jc.derivative_matching(k, selector=jc.PivotedQR(rtol=1e-6))",
    "delta": "the selector: jc.MaxVol(delta=...)",
    "data": "jc.data_matching(x, order=k)",
    "oversample": "jc.collocation(k, oversample=...)",
    "nodes": "jc.collocation(k, nodes=...)",
    "centers": "jc.derivative_matching(k, centers=...)",
    "coordinates": "the method: coordinates='bottleneck'; a parameterisation is a domain: "
                   "domain=jc.Parameterization(iota, U)",
    "key": "the selector: jc.RandomChoice(key)",
}


def check_method(method, params: Params, domain, where: str, *, devices: int = 1
                 ) -> tuple[int, ...]:
    """Eager checks of ``method`` against a network and domain (shapes, settings, memory over
    ``devices``); returns the hidden widths."""
    sizes = layer_sizes(params)
    hidden = sizes[1:-1]
    dtype = jnp.result_type(params[0]["kernel"])
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    found = []
    for m in candidates:
        m.features.check(sizes, dtype, domain, where)
        if m.widths is not None and len(m.widths) != len(hidden):
            raise ValueError(f"{where}: widths has {len(m.widths)} entries; expected one per "
                             f"hidden layer ({len(hidden)})")
        widths = resolve_widths(m, sizes, domain)
        for l, (w, h) in enumerate(zip(widths, hidden, strict=True), start=1):
            if not 1 <= w <= h:
                raise ValueError(f"{where}: target width {w} for hidden layer {l} must be in "
                                 f"[1, {h}] (the layer's width)")
            m.selector.check(h, w, f"{where}: hidden layer {l}")
        found.append(widths)
    if len(set(found)) > 1:
        raise ValueError(f"{where}: best_of needs methods of equal widths (one result is kept per "
                         f"teacher); got {found}. Give them the same order or widths=.")
    check_memory(candidates, sizes, dtype, domain, where, devices=devices)
    return found[0]


#: Bytes that compiling a compression's program costs whatever its order (measured: 9 MB on
#: ``[2, 64, 64, 1]`` at k = 2, on a 2-core CPU).
COMPILE_BYTES = 16 * 2**20


def memory_estimate(method, sizes, dtype, domain, *, devices: int = 1,
                    compilation: bool = False) -> dict[str, int]:
    """Bytes per device one compression needs, by part (the largest method of a best-of).

    The teacher's parameters, the feature map's working set (``method.features.memory``: e.g. the
    Taylor pass's coefficient products, or the activations at the collocation points; none for
    layers kept whole, ``LayerInfo.skipped``), the selection's scaled copy of the largest
    feature matrix and the error estimate's activations, divided over ``devices`` when the
    neurons are sharded.

    With ``compilation`` also the host memory of compiling the program (not divided: one
    program is compiled whatever the device count): :data:`COMPILE_BYTES` and the feature map's
    compile cost (e.g. :func:`jaxcompress.features.taylor_compile_cost`). With it the sum is an
    upper bound of the growth of the process's peak resident memory during ``compress``
    (``tests/test_memory.py`` measures it on a grid of widths and orders); :func:`check_memory`
    uses it.
    """
    itemsize = jnp.dtype(dtype).itemsize
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    best: dict[str, int] = {}
    for m in candidates:
        parts = {"teacher parameters": itemsize * param_count(sizes)}
        skipped = _skipped_layers(m, sizes, domain, resolve_widths(m, sizes, domain))
        if not all(skipped):
            parts.update(m.features.with_skipped(skipped).memory(sizes, itemsize, domain))
        d_ks = m.features.num_features(sizes, domain)
        parts["selection"] = itemsize * max(
            [dk * w for dk, w, skip in zip(d_ks, sizes[1:-1], skipped, strict=True)
             if not skip], default=0)
        parts["error estimate"] = itemsize * ERROR_POINTS * max(sizes[1:]) * 2
        compiling = {k: parts.pop(k) for k in list(parts) if k.startswith("compiling")}
        parts = {k: -(-v // devices) for k, v in parts.items()}
        if compilation:
            parts.update(compiling, **{"compiling the compression": COMPILE_BYTES})
        if sum(parts.values()) > sum(best.values()):
            best = parts
    return best


def check_memory(methods, sizes, dtype, domain, where: str, *, devices: int = 1) -> None:
    """Refuse, before allocating anything, a compression that would not fit in memory."""
    for m in methods:
        parts = memory_estimate(m, sizes, dtype, domain, devices=devices, compilation=True)
        need, limit = sum(parts.values()), memory_limit()
        if need > limit:
            detail = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in
                               sorted(parts.items(), key=lambda kv: -kv[1]))
            raise ValueError(
                f"{where}: {m.describe()} on {sizes} needs about {need / 2**30:.1f} GiB per "
                f"device ({detail} GiB), over the limit of {limit / 2**30:.1f} GiB (the device's "
                "memory, or jaxcompress.taylor.MAX_FEATURE_BYTES when set). Lower the order "
                "(D_k) or the oversampling, use an effective input dimension (coordinates="
                "'bottleneck' or a Parameterization domain), or shard the neurons over more "
                "devices with jc.shard.")


class FrontEnd(SizedNetwork):
    """A network read by a front end (e.g. :class:`jaxcompress.graph.Network`, from
    :func:`jaxcompress.trace`) that :func:`compress` hands its method and domain to; it lowers
    itself to a params list and calls :func:`compress` on it (one driver)."""

    @abc.abstractmethod
    def compress(self, method, *, domain) -> tuple[Any, CompressInfo]:
        """``(compressed, info)`` of ``method`` on ``domain`` through :func:`compress`."""

    # A front end also has ``fn`` (``fn(params, x)``), ``params`` and ``x`` (the example
    # inputs' shape): what :func:`jaxcompress.polish` distils towards.


class CompressedNetwork(SizedNetwork):
    """What a front end's :meth:`FrontEnd.compress` returns: the compressed function of its
    parameters (``params``, the user's pytree with smaller leaves), which
    :func:`jaxcompress.polish` trains."""

    @abc.abstractmethod
    def apply(self, params: Any, x: jax.Array) -> jax.Array:
        """The compressed function at ``params`` (shaped like this network's)."""

    @abc.abstractmethod
    def replace(self, params: Any) -> CompressedNetwork:
        """The same compressed network with other parameters (e.g. polished ones)."""


def compress(
    params: Params,
    method: Method | BestOf | None = None,
    *,
    activation=None,
    domain=None,
    order: int | Sequence[int] | None = None,
    radius: float | None = None,
    **moved: Any,
) -> tuple[Params, CompressInfo]:
    r"""Compress every hidden layer of an MLP: select neurons on features, re-weight the next layer.

    For hidden layer :math:`l` with feature matrix :math:`Z_l` (one column per neuron; for
    derivative matching the Taylor coefficients :math:`\partial^\alpha_x h_i(x_0) / \alpha!`,
    :math:`|\alpha| \le k`, so :math:`D_k = \binom{d_{in} + k}{d_{in}}` rows, Eq. (18)), the
    method's selector keeps neurons :math:`K`, finds :math:`C` with :math:`Z_{l,K}\, C = Z_l`
    (Algorithm 1) and rewires, in Flax's ``(fan_in, fan_out)`` layout,

    .. math::
       \tilde K_l = K_l[:, K], \qquad \tilde b_l = b_l[K], \qquad
       \tilde K_{l+1} = C\, K_{l+1},
       \qquad\text{so that}\qquad
       Z_{l,K}\, \tilde K_{l+1} = Z_l\, K_{l+1}
       \quad\text{(Eq. 41)}:

    every feature of the next layer's pre-activation is unchanged. With derivative features the
    error on the ball of radius :math:`R` is then the Taylor tail, of order
    :math:`(R/\rho_0)^{k+1}` when the network is holomorphic on a complex ball of radius
    :math:`\rho_0 > R` (Theorems 5 and 6; Eq. (16) for one layer).

    Examples:
      >>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
      >>> small, info = jc.compress(params, jc.derivative_matching(4), activation="sigmoid",
      ...                           domain=jc.Ball(2, 1.0))
      >>> jc.layer_sizes(small)                        # D_4 = C(2 + 4, 2) = 15 neurons a layer
      [2, 15, 15, 1]
      >>> [int(layer.rank) for layer in info.layers]
      [15, 15]
      >>> bool(info.error_estimate < 1e-4)             # max |F - F~| on 256 Sobol points
      True

      The paper's one-liner is shorthand for the same call:

      >>> same, _ = jc.compress(params, activation="sigmoid", order=4, radius=1.0)
      >>> all(bool(jnp.array_equal(a["kernel"], b["kernel"])) for a, b in zip(small, same))
      True

    Args:
      params: the teacher, a list of ``{"kernel": (fan_in, fan_out), "bias": (fan_out,)}``
        (one network; wrap in ``jax.vmap`` for a stack), or a network from
        :func:`jaxcompress.trace` (then no ``activation=``: the traced one is used).
      method: a :class:`~jaxcompress.Method` (:func:`~jaxcompress.derivative_matching`,
        :func:`~jaxcompress.collocation`, :func:`~jaxcompress.data_matching`) or
        :func:`~jaxcompress.best_of`. Omitted: the paper's one-liner, ``order=`` (and ``radius=``)
        as shorthand for ``derivative_matching(order)`` on ``Ball(d_in, radius)``.
      activation: a registered analytic activation (``"sigmoid"``, ``"tanh"``, ``"gelu"``, ...).
      domain: the input domain: a :class:`~jaxcompress.Ball` (any centre), a
        :class:`~jaxcompress.Box` (its centre is the expansion point, its half-diagonal the
        radius) or a :class:`~jaxcompress.Parameterization` (features in ``u``; the effective
        input dimension). Default: the unit ball at the origin (``Ball(d_in, radius)`` with the
        shorthand).
      order: shorthand only: the Taylor order ``k`` (one int or one per hidden layer).
      radius: shorthand only: the radius ``R`` of the ball at the origin (default 1); may be
        traced.

    Returns:
      ``(new_params, info)``: the compressed network (same depth, hidden widths
      ``min(D_k, d_l)`` or the method's) and a :class:`CompressInfo` with, per layer, the kept
      indices, numerical rank, matching residual of Eq. (41), ``max |C_ij|``, and the error
      estimate on fixed Sobol points of the domain.

    Everything is checked eagerly (shapes, activation, domain, the method against the network,
    memory) and then runs inside one ``jax.jit``: the method's and domain's settings are static
    (one compilation per shape and setting), their arrays (radius, corners, data, centres, keys)
    traced. ``compress`` may itself be wrapped in ``jax.jit`` or ``jax.vmap``.

    References:
      Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks",
      Algorithm 1, Theorems 5-6 and 8, Proposition 17 and the effective-dimension corollaries.
      Chee, Renz, Damle & De Sa (2022), "Model Preserving Compression for Neural Networks".
    """
    where = "compress"
    if moved:
        name = next(iter(moved))
        hint = _MOVED.get(name)
        if hint is None:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        raise TypeError(f"{where}: {name}= is now part of {hint} "
                        "(methods are values; see jaxcompress.methods)")
    if isinstance(params, FrontEnd):
        if activation is not None or order is not None or radius is not None:
            raise ValueError(f"{where}: a {type(params).__name__} from jc.trace carries its own "
                             "activation; expected compress(net, method, domain=...), got "
                             f"activation={activation!r}, order={order!r}, radius={radius!r}")
        return params.compress(method, domain=domain)
    if activation is None:
        raise TypeError(f"{where}: activation= is required for a params list (a registered "
                        "name such as 'tanh'); only a network from jc.trace carries its own")
    if method is not None and not isinstance(method, (Method, BestOf)):
        hint = (f"; for the method {method!r} write jc.{method}(k)"
                if isinstance(method, str) and method in _FACTORIES else "")
        raise TypeError(f"{where}: method must be a jc.Method or jc.best_of(...) (e.g. "
                        f"jc.derivative_matching(k)), got {type(method).__name__} "
                        f"{method!r:.60}{hint}")
    params = validate_params(params, where=where)
    act = get_activation(activation)
    d, dtype = require_single_network(
        params, where=where, hint="wrap compress in jax.vmap for a stack of networks")
    check_compute_dtype(dtype, where)
    if method is None:
        if order is None:
            raise TypeError(f"{where}: give a method (e.g. jc.derivative_matching(k), "
                            "jc.collocation(k)) or the shorthand order=k")
        method = derivative_matching(order if not isinstance(order, list) else tuple(order))
        if radius is not None:
            if domain is not None:
                raise ValueError(f"{where}: pass either radius or domain, not both (got "
                                 f"radius={radius!r}; the domain's own radius scales the "
                                 "features)")
            check_radius(radius, where)
        domain = Ball(d, 1.0 if radius is None else radius) if domain is None else domain
    else:
        if order is not None or radius is not None:
            raise ValueError(f"{where}: order= and radius= are the shorthand for "
                             "derivative_matching; with a method, the order is the method's and "
                             "the ball is domain=jc.Ball(d_in, R)")
        domain = Ball(d, 1.0) if domain is None else domain
    check_domain(domain, d, where, dtype)
    placement = sharding.params_placement(params)
    check_method(method, params, domain, where,
                 devices=1 if placement is None else placement.devices)
    if placement is not None:
        for m in method.methods if isinstance(method, BestOf) else (method,):
            sharding.check_selector(m.selector, where)
    return _compress_jit(params, method, domain, activation=act.name, placement=placement)


def trim(params: Params, info: CompressInfo | None = None, *, atol: float = 0.0) -> Params:
    """Drop hidden neurons whose outgoing weights are all zero (host side, not jit-able).

    Such neurons are the surplus ones past the numerical rank (their incoming weights are kept by
    :func:`compress` so widths stay static). The function computed is unchanged; widths shrink.
    ``info`` is accepted for symmetry with :func:`compress` and is not required;
    :func:`trim_info` gives the record of the trimmed network.

    ``atol >= 0`` (finite) also drops neurons whose outgoing weights are all at most ``atol`` in
    absolute value (the function then changes by up to ``atol`` per such neuron and output). An
    ``atol`` that would drop every neuron of a layer with a nonzero outgoing weight is a
    ``ValueError`` naming the layer and its largest weight (it used to return a width-1 network
    with nothing of the function left).
    """
    del info
    params, masks = _trim_masks(params, atol, "trim")
    out = [dict(layer) for layer in params]
    for l, keep in enumerate(masks, start=1):
        out[l - 1] = {"kernel": out[l - 1]["kernel"][:, keep], "bias": out[l - 1]["bias"][keep]}
        out[l] = {"kernel": out[l]["kernel"][keep], "bias": out[l]["bias"]}
    return [jax.device_put(layer) for layer in out]  # jnp.asarray would compile per shape


def trim_info(info: CompressInfo, params: Params, *, atol: float = 0.0) -> CompressInfo:
    """The record of ``trim(params, atol=atol)``, for ``info`` the record of ``params``.

    Each layer keeps the entries of ``kept`` of the neurons that stay (neuron ``i`` of the
    compressed layer is neuron ``kept[i]`` of the teacher's), its ``width_out`` becomes the new
    width and its ``rank`` at most that; everything else is unchanged. Use it to save or print a
    trimmed network with its record:

    >>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1])
    >>> params[0] = {"kernel": jnp.tile(params[0]["kernel"][:, :2], (1, 4)),
    ...              "bias": jnp.tile(params[0]["bias"][:2], 4)}  # 2 neurons, 4 copies of each
    >>> small, info = jc.compress(params, activation="tanh", order=2)   # D_2 = 6 kept, rank 2
    >>> jc.layer_sizes(jc.trim(small))
    [2, 2, 1]
    >>> small_info = jc.trim_info(info, small)
    >>> [(layer.width_out, int(layer.rank)) for layer in small_info.layers]
    [(2, 2)]
    """
    params, masks = _trim_masks(params, atol, "trim_info")
    check_info_matches(info, layer_sizes(params), None, "trim_info")
    layers = []
    for li, keep in zip(info.layers, masks, strict=True):
        width = int(keep.sum())
        layers.append(dataclasses.replace(
            li, kept=np.asarray(li.kept)[keep], width_out=width,
            rank=np.minimum(np.asarray(li.rank), width).astype(np.int32)))
    return dataclasses.replace(info, layers=tuple(layers))


def _trim_masks(params: Params, atol, where: str) -> tuple[Params, list[np.ndarray]]:
    """The params as NumPy arrays and, per hidden layer, which neurons :func:`trim` keeps."""
    if not finite_number(atol) or float(atol) < 0:
        raise ValueError(f"{where}: atol must be one finite number >= 0, got {atol!r}")
    atol = float(atol)
    params = [{k: np.asarray(v) for k, v in layer.items()} for layer in
              validate_params(params, where=where)]
    if params[0]["kernel"].ndim != 2:
        raise ValueError(f"{where}: expected one network (2-D kernels); trim each network "
                         "separately")
    masks = []
    for l in range(1, len(params)):
        keep = np.any(np.abs(params[l]["kernel"]) > atol, axis=1)
        if not keep.any():
            largest = float(np.max(np.abs(params[l]["kernel"])))
            if largest > 0:
                raise ValueError(f"{where}: atol={atol:g} drops every neuron of hidden layer {l} "
                                 f"(its largest outgoing weight is {largest:.3g}); expected an "
                                 "atol below the weights that carry the function (atol=0 drops "
                                 "only the neurons past the rank)")
            keep[0] = True  # keep one neuron so the layer stays well-formed
        masks.append(keep)
    return params, masks
