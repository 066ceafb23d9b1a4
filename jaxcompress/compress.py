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
from jaxcompress.features import BACKENDS, _check_order, derivative_features
from jaxcompress.mlp import HIGHEST, Params, validate_params
from jaxcompress.select import MAX_EXHAUSTIVE_SUBSETS, SELECTORS, select_columns
from jaxcompress.taylor import check_feature_budget, monomials, num_monomials

__all__ = ["CompressInfo", "LayerInfo", "compress", "compress_layer", "trim"]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["kept", "rank", "residual", "max_coef", "swaps"],
    meta_fields=["layer", "order", "num_features", "width_in", "width_out"],
)
@dataclasses.dataclass(frozen=True)
class LayerInfo:
    """What happened to one hidden layer.

    Attributes:
      kept: indices (into the original layer) of the kept neurons, in pivot order.
      rank: numerical rank of the (radius-scaled) feature matrix; kept neurons past it get zero
        outgoing weight.
      residual: the matching residual of Eq. (41), ``max |Z_K K~_{l+1} - Z K_{l+1}|`` (zero in
        exact arithmetic when ``rank <= width_out``).
      max_coef: ``max |C_ij|`` over the basis rows (Lemma 10: ``<= 1 + delta`` for maxvol).
      swaps: number of maxvol swaps (0 for other selectors).
      layer: hidden-layer index (1-based, as in the paper).
      order: the truncation order k of this layer.
      num_features: ``D_k = C(d_in + k, d_in)``.
      width_in, width_out: the width before and after.
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


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["layers"],
    meta_fields=["activation", "layer_order", "features", "selector"],
)
@dataclasses.dataclass(frozen=True)
class CompressInfo:
    """Per-layer :class:`LayerInfo` (``layers[l - 1]`` is hidden layer ``l``) and the settings."""

    layers: tuple[LayerInfo, ...]
    activation: str
    layer_order: str
    features: str
    selector: str

    def summary(self) -> str:
        """A table of the per-layer record (host side)."""
        head = f"{'layer':>5} {'k':>3} {'D_k':>6} {'width':>13} {'rank':>5} {'residual':>10} "
        head += f"{'max|C|':>8}"
        lines = [head]
        for li in self.layers:
            lines.append(
                f"{li.layer:>5} {li.order:>3} {li.num_features:>6} "
                f"{f'{li.width_in} -> {li.width_out}':>13} {int(np.max(li.rank)):>5} "
                f"{float(np.max(li.residual)):>10.2e} {float(np.max(li.max_coef)):>8.3f}"
            )
        return "\n".join(lines)


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
    **select_kwargs: Any,
) -> tuple[Params, LayerInfo]:
    """Compress hidden layer ``layer`` (1-based) given its features ``z`` (``D x d_l``).

    Keeps ``width`` neurons; returns the new params and the :class:`LayerInfo` (its ``order`` is
    set by :func:`compress`; here it is ``-1``).
    """
    inc, out = params[layer - 1], params[layer]
    sel, diag = select_columns(z, width, selector=selector, radius=radius, degrees=degrees,
                               **select_kwargs)
    kept = sel.perm[:width]
    new_out_kernel = jnp.matmul(sel.coef, out["kernel"][sel.perm], precision=HIGHEST)
    new_params = list(params)
    new_params[layer - 1] = {"kernel": inc["kernel"][:, kept], "bias": inc["bias"][kept]}
    new_params[layer] = {"kernel": new_out_kernel, "bias": out["bias"]}
    before = jnp.matmul(z, out["kernel"], precision=HIGHEST)
    after = jnp.matmul(z[:, kept], new_out_kernel, precision=HIGHEST)
    live = jnp.arange(width) < sel.rank
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


def _compress_impl(params, radius, *, act_name, orders, layer_order, features, selector, widths,
                   select_kwargs):
    n_hidden = len(params) - 1
    d = params[0]["kernel"].shape[0]
    k_max = max(orders)
    degrees_all = monomials(d, k_max).sum(axis=1)
    infos: list[LayerInfo | None] = [None] * n_hidden

    def one(params, l, z):
        k = orders[l - 1]
        z = z[: num_monomials(d, k)]
        new, info = compress_layer(params, l, z, width=widths[l - 1], selector=selector,
                                   radius=radius, degrees=degrees_all[: z.shape[0]],
                                   **dict(select_kwargs))
        infos[l - 1] = dataclasses.replace(info, order=k)
        return new

    if layer_order == "backward":
        feats = derivative_features(params, activation=act_name, order=k_max, backend=features)
        for l in range(n_hidden, 0, -1):
            params = one(params, l, feats[l - 1])
    else:
        for l in range(1, n_hidden + 1):
            k = orders[l - 1]
            # only the first l layers matter: the upstream map of layer l and the layer itself
            sub = params[:l] + [params[l]]
            z = derivative_features(sub, activation=act_name, order=k, backend=features)[l - 1]
            params = one(params, l, z)
    return params, CompressInfo(
        layers=tuple(infos), activation=act_name, layer_order=layer_order, features=features,
        selector=selector,
    )


_compress_jit = jax.jit(
    _compress_impl,
    static_argnames=("act_name", "orders", "layer_order", "features", "selector", "widths",
                     "select_kwargs"),
)


def compress(
    params: Params,
    *,
    activation: str,
    order: int | Sequence[int],
    radius=1.0,
    layer_order: str = "backward",
    features: str = "taylor",
    selector: str = "pivoted_qr",
    widths: Sequence[int] | None = None,
    rtol: float | None = None,
    delta: float = 1e-2,
) -> tuple[Params, CompressInfo]:
    """Compress every hidden layer of an MLP by derivative matching.

    Args:
      params: the teacher, a list of ``{"kernel": (fan_in, fan_out), "bias": (fan_out,)}``.
      activation: a registered analytic activation (``"sigmoid"``, ``"tanh"``, ``"gelu"``, ...).
      order: the Taylor order ``k``, one int or one per hidden layer.
      radius: the radius ``R`` of the input ball; rows of degree ``|alpha|`` are scaled by
        ``R^|alpha|`` before selection. May be a traced value.
      layer_order: ``"backward"`` (deepest layer first, features of the original network in one
        pass; Prop. 17) or ``"forward"`` (recompute features of the partially compressed network).
      features: the feature backend, ``"taylor"`` (default), ``"jet"`` or ``"jacfwd"``.
      selector: ``"pivoted_qr"``, ``"greedy_gs"``, ``"maxvol"`` or ``"exhaustive"``.
      widths: target widths per hidden layer (default ``min(D_k, d_l)``); must not exceed ``d_l``.
      rtol: relative rank threshold (default ``eps * max(D_k, d_l)``).
      delta: maxvol tolerance (``|C_ij| <= 1 + delta``).

    Returns:
      ``(new_params, info)``: the compressed network (same depth, hidden widths ``n_l``) and a
      :class:`CompressInfo` with, per layer, the kept indices, numerical rank, matching residual
      of Eq. (41), ``max |C_ij|`` and ``D_k``.

    The computation is jit-compiled (configuration static; one compilation per shape) and may be
    wrapped in ``jax.jit`` or ``jax.vmap`` (e.g. over a stack of teachers of equal shapes).

    References:
      Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks",
      Algorithm 1, Theorems 5-6 and Proposition 17.
    """
    where = "compress"
    params = validate_params(params, where=where)
    act = get_activation(activation)
    n_hidden = len(params) - 1
    orders = _orders(order, n_hidden, where)
    if layer_order not in LAYER_ORDERS:
        raise ValueError(f"{where}: layer_order must be one of {LAYER_ORDERS}, got {layer_order!r}")
    if features not in BACKENDS:
        raise ValueError(f"{where}: features must be one of {BACKENDS}, got {features!r}")
    if selector not in SELECTORS:
        raise ValueError(f"{where}: selector must be one of {SELECTORS}, got {selector!r}")
    kernel0 = params[0]["kernel"]
    if kernel0.ndim != 2:
        raise ValueError(
            f"{where}: expected one network (2-D kernels), got kernel shape {kernel0.shape}; "
            "wrap compress in jax.vmap for a stack of networks"
        )
    d = kernel0.shape[0]
    hidden = [layer["kernel"].shape[1] for layer in params[:-1]]
    check_feature_budget(d, max(orders), max(hidden), jnp.dtype(kernel0.dtype).itemsize,
                         where=where)
    if widths is None:
        widths = tuple(min(num_monomials(d, k), w) for k, w in zip(orders, hidden, strict=True))
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
    select_kwargs = (("delta", float(delta)),) + ((("rtol", float(rtol)),) if rtol else ())
    return _compress_jit(
        params, jnp.asarray(radius, kernel0.dtype), act_name=act.name, orders=orders,
        layer_order=layer_order, features=features, selector=selector, widths=widths,
        select_kwargs=select_kwargs,
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
