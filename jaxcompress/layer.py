"""The records of a compression and the pure per-layer step (Algorithm 1 of Wang, Wang & Ziyin).

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
selector)`` returning the complete :class:`LayerInfo`; the one driver
(:mod:`jaxcompress.driver`) runs it over every compressible set of neurons of any network and
writes the result back. :class:`CompressInfo` is the record of a whole compression.
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
from jaxcompress._checks import describe
from jaxcompress.domains import ERROR_POINTS
from jaxcompress.features import LayerFeatures
from jaxcompress.methods import Method
from jaxcompress.mlp import HIGHEST
from jaxcompress.placement import Placement
from jaxcompress.select import Selector, default_rtol, lstsq_coefficients, reduce_rows

__all__ = ["CompressInfo", "LayerInfo", "compress_layer"]


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
                 "candidates", "estimated_on"],
)
@dataclasses.dataclass(frozen=True)
class CompressInfo:
    """Per-layer :class:`LayerInfo` (``layers[l - 1]`` is hidden layer ``l``) and the settings.

    Attributes:
      layers: the per-layer records.
      activation: the activation's name, as used.
      layer_order: ``"backward"`` or ``"forward"``, as used.
      features, selector: the feature map's and selector's names (``"a|b"`` for a best-of).
      coordinates: ``"input"``, ``"bottleneck"`` or ``"parameterization"``.
      method: a description of the method.
      error_estimate: ``max |F - F~|`` over the :data:`~jaxcompress.measure.ERROR_POINTS` fixed
        Sobol points of the domain (:func:`jaxcompress.measure.error_points`), computed inside
        the compression's jit (one value per teacher under ``jax.vmap``): a lower bound on the
        sup error, measured on points no method was fitted on (ours, not the paper's).
      choice: for :func:`~jaxcompress.best_of`, the index of the winning candidate (per teacher
        under ``vmap``), else ``None``.
      candidates: for :func:`~jaxcompress.best_of`, the candidates' descriptions.
      estimated_on: the points of ``error_estimate``, in words (``"256 Sobol points of the
        domain"``, ``"500 held-out data points"``).

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
    estimated_on: str = f"{ERROR_POINTS} Sobol points of the domain"

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
                   method=method.describe(), error_estimate=error_estimate,
                   estimated_on=domain.estimate_description())

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
                f"{li.layer:>5} {li.order if li.order >= 0 else '-':>3} {li.num_features:>6} "
                f"{f'{li.width_in} -> {li.width_out}':>13} "
                f"{'whole' if li.skipped else format_span(li.rank, 'd'):>9} "
                f"{float(np.max(li.residual)):>10.2e} {float(np.max(li.max_coef)):>8.3f}"
            )
        if self.error_estimate is not None:
            est = np.asarray(self.error_estimate)
            batch = f" ({est.size} teachers)" if est.ndim else ""
            lines.append(f"error estimate {format_span(est, '.2e')}{batch}: max |F - F~| on "
                         f"{self.estimated_on} (a lower bound on the sup error)")
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
                "candidates": list(self.candidates), "estimated_on": self.estimated_on,
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
                   candidates=tuple(d.get("candidates", ())),
                   **({"estimated_on": d["estimated_on"]} if "estimated_on" in d else {}))


def format_span(values, fmt: str = ".3e") -> str:
    """``v`` or ``lo..hi`` (a batch's range: a record under ``jax.vmap``) of an array, formatted
    with ``fmt``."""
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
    live: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, LayerInfo]:
    """Select ``width`` neurons of one hidden layer and re-weight the next: a pure function.

    Args:
      features: the layer's :class:`~jaxcompress.features.LayerFeatures` (``z``, the row
        scaling, the layer's description).
      out_kernel: ``K_{l+1}`` (``d_l x d_{l+1}``), the next layer's kernel.
      width: neurons to keep (static), ``1 <= width <= d_l``.
      selector: a :class:`~jaxcompress.select.Selector`.
      target: ``(rows, d_{l+1})``: what the kept neurons must reproduce instead of the layer's
        own next pre-activation features ``z K_{l+1}``; the new kernel is then the least-squares
        solution of ``Z_K K~ ~= target`` (forward order re-fits point features to the teacher).
      placement: where the layer's neurons live (``None``: one device); with a
        :class:`~jaxcompress.placement.Placement` the selection and re-weighting run in
        :func:`jaxcompress.sharding.sharded_step` (the selector's
        :meth:`~jaxcompress.select.Selector.distributed_select`: for the QR, maxvol, OMP and
        weight-norm
        selectors the same neurons as on one device) and every array stays split by neurons.
      live: a traced width ``<= width`` (ours): only the first ``live`` kept neurons are
        re-weighted, the others get zero rows in the new kernel. With a greedy-prefix selector
        (:attr:`~jaxcompress.select.Selector.greedy_prefix`) this is the network compressed to
        ``live`` neurons, padded with dead ones: one compiled program for every width
        ``<= width`` (the searches' masked candidates). One device only.

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
        if live is not None:
            raise ValueError("compress_layer: a traced width (live=) runs on one device")
        kept, new_kernel, rank, residual, max_coef, swaps = sharding.sharded_step(
            features, out_kernel, width, selector, placement, rtol=rtol, target=target)
    else:
        kept, new_kernel, rank, residual, max_coef, swaps = _select_and_reweight(
            features, out_kernel, width, selector, rtol=rtol, target=target, live=live)
    return kept, new_kernel, LayerInfo.of(features, width, kept=kept, rank=rank,
                                          residual=residual, max_coef=max_coef, swaps=swaps)


def _select_and_reweight(features: LayerFeatures, out_kernel, width: int, selector: Selector,
                         *, rtol, target, live=None):
    """Algorithm 1 on one device: ``(kept, new kernel, rank, residual, max|C|, swaps)``."""
    z, scale = features.z, features.scale
    zs = z if scale is None else z * scale[:, None]
    ts = target if (target is None or scale is None) else target * scale[:, None]
    zr, tr = reduce_rows(zs, ts)
    sel = selector(zr, width, out_kernel=out_kernel, target=tr, layer=features.layer)
    if live is not None:   # the first ``live`` pivots re-weighted, the rest dead
        coef, _ = lstsq_coefficients(zr, sel.perm, width, rtol, live=live)
        sel = sel._replace(coef=coef, rank=jnp.minimum(sel.rank, live).astype(jnp.int32))
    kept = sel.perm[:width]
    if target is None:
        new_kernel = jnp.matmul(sel.coef, out_kernel[sel.perm], precision=HIGHEST)
        before = jnp.matmul(z, out_kernel, precision=HIGHEST)
    else:
        new_kernel, _ = lstsq_coefficients(z[:, kept], jnp.arange(width, dtype=jnp.int32),
                                           width, rtol, rhs=target, live=live)
        before = target
    after = jnp.matmul(z[:, kept], new_kernel, precision=HIGHEST)
    # QR selectors: rows past the rank are zero; baselines (SVD least squares): all rows count
    live = (jnp.arange(width, dtype=jnp.int32) < sel.rank) | selector.baseline
    max_coef = jnp.max(jnp.where(live[:, None], jnp.abs(sel.coef), 0))
    return kept, new_kernel, sel.rank, jnp.max(jnp.abs(after - before)), max_coef, sel.swaps

