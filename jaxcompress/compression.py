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
host.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress import sharding
from jaxcompress.activations import get_activation
from jaxcompress.domains import Ball, check_domain, check_radius
from jaxcompress.evaluate import ERROR_POINTS, error_estimate
from jaxcompress.features import LayerFeatures, _FeatureMap
from jaxcompress.methods import BestOf, Method, derivative_matching
from jaxcompress.mlp import HIGHEST, Params, require_single_network, validate_params
from jaxcompress.select import default_rtol, lstsq_coefficients, reduce_rows

__all__ = ["CompressInfo", "LayerInfo", "compress", "compress_layer", "memory_estimate",
           "rewire", "trim"]


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
    selector,
    *,
    target: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, LayerInfo]:
    """Select ``width`` neurons of one hidden layer and re-weight the next: a pure function.

    Args:
      features: the layer's :class:`~jaxcompress.features.LayerFeatures` (``z``, the row
        scaling, the layer's description).
      out_kernel: ``K_{l+1}`` (``d_l x d_{l+1}``), the next layer's kernel.
      width: neurons to keep (static), ``1 <= width <= d_l``.
      selector: a selector object (:mod:`jaxcompress.select`).
      target: ``(rows, d_{l+1})``: what the kept neurons must reproduce instead of the layer's
        own next pre-activation features ``z K_{l+1}``; the new kernel is then the least-squares
        solution of ``Z_K K~ ~= target`` (forward order re-fits point features to the teacher).

    Returns:
      ``(kept, new_out_kernel, info)``: the kept indices ``(width,)`` in pivot order, the new
      next-layer kernel ``(width, d_{l+1})`` and the complete :class:`LayerInfo`.
    """
    if sharding.active() is not None:
        return sharding.tournament_step(features, out_kernel, width, selector, target=target)
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
        rtol = getattr(selector, "rtol", None)
        rtol = default_rtol(z.dtype) if rtol is None else rtol
        new_kernel, _ = lstsq_coefficients(z[:, kept], jnp.arange(width, dtype=jnp.int32),
                                           width, rtol, rhs=target)
        before = target
    after = jnp.matmul(z[:, kept], new_kernel, precision=HIGHEST)
    # QR selectors: rows past the rank are zero; baselines (SVD least squares): all rows count
    live = ((jnp.arange(width, dtype=jnp.int32) < sel.rank)
            | bool(getattr(selector, "baseline", False)))
    info = LayerInfo(
        kept=kept, rank=sel.rank, residual=jnp.max(jnp.abs(after - before)),
        max_coef=jnp.max(jnp.where(live[:, None], jnp.abs(sel.coef), 0)), swaps=sel.swaps,
        layer=features.layer, order=features.order, num_features=features.num_features,
        width_in=z.shape[1], width_out=width, num_rows=z.shape[0], coord_dim=features.coord_dim)
    return kept, new_kernel, info


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


def _coordinates_name(method: Method, domain) -> str:
    from jaxcompress.domains import Parameterization

    if isinstance(domain, Parameterization):
        return "parameterization"
    return getattr(method.features, "coordinates", "input")


def _skipped_layers(method: Method, sizes: Sequence[int], domain,
                    widths: Sequence[int]) -> tuple[bool, ...]:
    """Per hidden layer: kept whole with nothing computed (see ``LayerInfo.skipped``).

    A layer is skipped when it keeps all its ``d_l`` neurons and has ``D_k >= d_l`` features
    (selection would keep every neuron with ``C = I``). In forward order with re-fitting, a
    layer after a compressed one is not skipped: its re-fit compensates the upstream change.
    """
    d_ks = method.features.num_features(list(sizes), domain)
    whole = [w == h <= dk for w, h, dk in zip(widths, sizes[1:-1], d_ks, strict=True)]
    if method.layer_order == "forward" and bool(getattr(method.features, "refit", False)):
        whole = [w and all(whole[:i]) for i, w in enumerate(whole)]
    return tuple(whole)


def _skipped_info(method: Method, sizes: Sequence[int], domain, l: int, dtype) -> LayerInfo:
    """The :class:`LayerInfo` of hidden layer ``l`` kept whole (nothing computed)."""
    fmap, n_hidden, width = method.features, len(sizes) - 2, sizes[l]
    if isinstance(fmap, _FeatureMap):
        order = fmap.orders(n_hidden, prefix=True)[l - 1]
        coord_dim = fmap.coord_dims(list(sizes), domain)[l - 1]
    else:  # a user-written feature map declares D_k only
        order = coord_dim = -1
    return LayerInfo(
        kept=jnp.arange(width, dtype=jnp.int32), rank=jnp.asarray(width, jnp.int32),
        residual=jnp.zeros((), dtype), max_coef=jnp.ones((), dtype),
        swaps=jnp.zeros((), jnp.int32), layer=l, order=order,
        num_features=fmap.num_features(list(sizes), domain)[l - 1], width_in=width,
        width_out=width, num_rows=0, coord_dim=coord_dim, skipped=True)


def _run_method(params: Params, method: Method, domain, act: str) -> tuple[Params, CompressInfo]:
    """One method on one network (pure; traced inside :func:`compress`'s jit)."""
    n_hidden = len(params) - 1
    sizes = [params[0]["kernel"].shape[0]] + [p["kernel"].shape[1] for p in params]
    widths = resolve_widths(method, sizes, domain)
    fmap, sel = method.features, method.selector
    teacher = params
    infos: list[LayerInfo] = [None] * n_hidden  # type: ignore[list-item]
    skipped = _skipped_layers(method, sizes, domain, widths)
    needed = [l for l in range(1, n_hidden + 1) if not skipped[l - 1]]
    for l in range(1, n_hidden + 1):
        if skipped[l - 1]:
            infos[l - 1] = _skipped_info(method, sizes, domain, l, params[0]["kernel"].dtype)
    if method.layer_order == "backward":
        # features only of the layers that are compressed (their depth and orders, no more)
        feats = fmap(params, needed, activation=act, domain=domain) if needed else {}
        for l in reversed(needed):
            kept, kernel, infos[l - 1] = compress_layer(feats[l], params[l]["kernel"],
                                                         widths[l - 1], sel)
            params = rewire(params, l, kept, kernel)
    else:
        refit = bool(getattr(fmap, "refit", False))
        if refit and needed:
            # forward order re-fits each layer to the teacher at the same rows
            ref = fmap(teacher, needed, activation=act, domain=domain)
        for l in needed:
            # only the first l layers matter: the upstream map of layer l and the layer itself
            feat = fmap(params[:l] + [params[l]], [l], activation=act, domain=domain)[l]
            target = (jnp.matmul(ref[l].z, teacher[l]["kernel"], precision=HIGHEST)
                      if refit else None)
            kept, kernel, infos[l - 1] = compress_layer(feat, params[l]["kernel"],
                                                        widths[l - 1], sel, target=target)
            params = rewire(params, l, kept, kernel)
    info = CompressInfo(
        layers=tuple(infos), activation=act, layer_order=method.layer_order,
        features=fmap.name, selector=getattr(sel, "name", type(sel).__name__),
        coordinates=_coordinates_name(method, domain), method=method.describe(),
        error_estimate=error_estimate(teacher, params, activation=act, domain=domain))
    return params, info


def _best(results: list[tuple[Params, CompressInfo]], method: BestOf) -> tuple[Params,
                                                                                 CompressInfo]:
    """Per teacher, the candidate with the smallest error estimate (same shapes throughout)."""
    estimates = jnp.stack([info.error_estimate for _, info in results])
    choice = jnp.argmin(estimates).astype(jnp.int32)

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

    info = CompressInfo(
        layers=tuple(layers), activation=first.activation, layer_order=joined("layer_order"),
        features=joined("features"), selector=joined("selector"),
        coordinates=joined("coordinates"), method=method.describe(),
        error_estimate=jnp.min(estimates), choice=choice,
        candidates=tuple(m.describe() for m in method.methods))
    return params, info


def _compress_impl(params, method, domain, *, activation, mesh=None):
    with sharding.neuron_sharding(mesh):
        if isinstance(method, BestOf):
            out = _best([_run_method(params, m, domain, activation) for m in method.methods],
                        method)
        else:
            out = _run_method(params, method, domain, activation)
    if mesh is not None:  # the compressed network is D_k wide: replicated on the mesh
        replicated = jax.sharding.NamedSharding(mesh[0], jax.sharding.PartitionSpec())
        out = (jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, replicated), out[0]),
               out[1])
    return out


_compress_jit = jax.jit(_compress_impl, static_argnames=("activation", "mesh"))


# ------------------------------------------------------------------------------------------------
# The public call
# ------------------------------------------------------------------------------------------------

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
    sizes = [int(params[0]["kernel"].shape[0])] + [int(p["kernel"].shape[1]) for p in params]
    hidden = sizes[1:-1]
    dtype = jnp.result_type(params[0]["kernel"])
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    found = []
    for m in candidates:
        check = getattr(m.features, "check", None)
        if check is not None:
            check(sizes, dtype, domain, where)
        if m.widths is not None and len(m.widths) != len(hidden):
            raise ValueError(f"{where}: widths has {len(m.widths)} entries; expected one per "
                             f"hidden layer ({len(hidden)})")
        widths = resolve_widths(m, sizes, domain)
        for l, (w, h) in enumerate(zip(widths, hidden, strict=True), start=1):
            if not 1 <= w <= h:
                raise ValueError(f"{where}: target width {w} for hidden layer {l} must be in "
                                 f"[1, {h}] (the layer's width)")
            sel_check = getattr(m.selector, "check", None)
            if sel_check is not None:
                sel_check(h, w, f"{where}: hidden layer {l}")
        found.append(widths)
    if len(set(found)) > 1:
        raise ValueError(f"{where}: best_of needs methods of equal widths (one result is kept per "
                         f"teacher); got {found}. Give them the same order or widths=.")
    check_memory(candidates, sizes, dtype, domain, where, devices=devices)
    return found[0]


def _computed_part(fmap, skipped: Sequence[bool]):
    """The feature map as the driver evaluates it when the layers ``skipped`` are kept whole:
    the pass runs to the deepest computed layer at the largest computed order, so a skipped
    layer before it is reached at that order and one after it not at all (order 0)."""
    if not isinstance(fmap, _FeatureMap) or all(skipped) or not any(skipped):
        return fmap
    orders = fmap.orders(len(skipped), prefix=True)
    needed = [i for i, skip in enumerate(skipped) if not skip]
    k_max = max(orders[i] for i in needed)
    return dataclasses.replace(fmap, order=tuple(
        orders[i] if not skip else (k_max if i < needed[-1] else 0)
        for i, skip in enumerate(skipped)))


def memory_estimate(method, sizes, dtype, domain, *, devices: int = 1) -> dict[str, int]:
    """Bytes per device one compression needs, by part (the largest method of a best-of).

    The teacher's parameters, the feature map's working set (``method.features.memory``: e.g. the
    Taylor pass's coefficient products, or the activations at the collocation points; none for
    layers kept whole, ``LayerInfo.skipped``), the selection's scaled copy of the largest
    feature matrix, and the error estimate's activations;
    all but the compressed network's own (``D_k``-wide) arrays divided over ``devices`` when the
    neurons are sharded. An estimate of the working set, not of XLA's exact peak.
    """
    itemsize = jnp.dtype(dtype).itemsize
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    best: dict[str, int] = {}
    for m in candidates:
        parts = {"teacher parameters": itemsize * sum(a * b + b for a, b in
                                                      zip(sizes[:-1], sizes[1:], strict=True))}
        skipped = _skipped_layers(m, sizes, domain, resolve_widths(m, sizes, domain))
        fmap = _computed_part(m.features, skipped)
        mem = getattr(fmap, "memory", None)
        if mem is not None and not all(skipped):
            parts.update(mem(sizes, itemsize, domain))
        d_ks = m.features.num_features(sizes, domain)
        parts["selection"] = itemsize * max(
            [dk * w for dk, w, skip in zip(d_ks, sizes[1:-1], skipped, strict=True)
             if not skip], default=0)
        parts["error estimate"] = itemsize * ERROR_POINTS * max(sizes[1:]) * 2
        parts = {k: -(-v // devices) for k, v in parts.items()}
        if sum(parts.values()) > sum(best.values()):
            best = parts
    return best


def check_memory(methods, sizes, dtype, domain, where: str, *, devices: int = 1) -> None:
    """Refuse, before allocating anything, a compression that would not fit in memory."""
    from jaxcompress.taylor import memory_limit

    for m in methods:
        parts = memory_estimate(m, sizes, dtype, domain, devices=devices)
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


def compress(
    params: Params,
    method: Method | BestOf | None = None,
    *,
    activation,
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
        (one network; wrap in ``jax.vmap`` for a stack).
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
    params = validate_params(params, where=where)
    act = get_activation(activation)
    d, dtype = require_single_network(
        params, where=where, hint="wrap compress in jax.vmap for a stack of networks")
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
        if not isinstance(method, (Method, BestOf)):
            raise TypeError(f"{where}: method must be a jc.Method or jc.best_of(...) (e.g. "
                            f"jc.derivative_matching(k)), got {type(method).__name__}")
        domain = Ball(d, 1.0) if domain is None else domain
    check_domain(domain, d, where, dtype)
    mesh = sharding.params_mesh(params)
    check_method(method, params, domain, where,
                 devices=1 if mesh is None else mesh[0].shape[mesh[1]])
    if mesh is not None:
        for m in method.methods if isinstance(method, BestOf) else (method,):
            sharding._check_selector(m.selector)
    return _compress_jit(params, method, domain, activation=act.name, mesh=mesh)


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
    return [jax.device_put(layer) for layer in out]  # jnp.asarray would compile per shape
