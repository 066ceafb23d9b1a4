"""Truncated multivariate Taylor arithmetic and the one-pass derivative-feature propagation.

A polynomial in ``x in R^d`` truncated at total degree ``k`` is stored as its coefficient array
``P`` of shape ``(D_k, ...)``, ``D_k = C(d + k, d)``, one row per monomial ``x^alpha`` in the
order of :func:`monomials`. Row ``alpha`` of a neuron's column is

.. math:: Z_{\\alpha} = \\partial^\\alpha g(x_0) / \\alpha!,

the Taylor coefficient (not the raw derivative, which grows like ``alpha!``).

Dense layers act linearly on coefficient arrays; an activation is applied as

.. math:: \\sigma(u_0 + \\hat u) = \\sum_{j=0}^{k} s_j(u_0)\\, \\hat u^{\\,j},
          \\qquad s_j = \\sigma^{(j)}(u_0)/j!,

evaluated as a sum of truncated powers ``\\hat u^{\\,j}`` (``\\hat u`` has no constant term, so
the series is exact to degree ``k``, and ``\\hat u^{\\,j}`` has no terms below degree ``j``:
:func:`compose`). One pass through the network yields the feature matrix of
every hidden layer (the backward-order compression needs exactly that).

The first layer after the expansion point needs no truncated products: its pre-activation
``u_i(x_0 + t) = u_{0,i} + w_i \\cdot t`` is affine, and the multinomial theorem gives its
coefficients in closed form (:func:`affine_features`),

.. math:: \\frac{1}{\\alpha!}\\,\\partial^\\alpha \\sigma(w_i \\cdot x + b_i)\\big|_{x_0}
          = s_{|\\alpha|}(u_{0,i})\\,\\frac{|\\alpha|!}{\\alpha!}\\,w_i^{\\alpha},

``O(D_k d)`` work instead of ``O(k C(2m + k, 2m) d)`` truncated products.
"""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import Activation, get_activation
from jaxcompress.mlp import HIGHEST, Params
from jaxcompress.placement import Placement, constrain_neurons

__all__ = [
    "MAX_FEATURE_BYTES",
    "affine_features",
    "check_feature_budget",
    "memory_limit",
    "input_polynomial",
    "monomials",
    "num_monomials",
    "propagate_polynomial",
    "taylor_features",
    "taylor_pass",
]

#: A cap on the working set of one compression, in bytes per device (``None``: the device's own
#: memory, see :func:`memory_limit`). Set it to refuse earlier, or raise it on purpose.
MAX_FEATURE_BYTES: int | None = None


def memory_limit(device=None) -> int:
    """Bytes one compression may use on ``device`` (default: the first device).

    :data:`MAX_FEATURE_BYTES` when set; otherwise 90% of an accelerator's memory
    (``device.memory_stats()["bytes_limit"]``) or, on a CPU, half of the machine's physical
    memory.
    """
    if MAX_FEATURE_BYTES is not None:
        return int(MAX_FEATURE_BYTES)
    device = jax.devices()[0] if device is None else device
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - not every backend reports memory
        stats = {}
    if stats.get("bytes_limit"):
        return int(0.9 * stats["bytes_limit"])
    try:
        return int(0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def taylor_bytes(d: int, k: int, width: int, itemsize: int, *, closed_form: bool = False
                 ) -> int:
    """The Taylor pass's working set for one layer: the ``C(2d + k, 2d)`` coefficient products of
    each neuron, plus a few ``D_k x width`` arrays. ``closed_form``: the layer right after the
    expansion point (:func:`affine_features`): the powers ``w^j`` (``(k + 1) d`` per neuron) and
    a few ``D_k x width`` arrays."""
    per_neuron = ((k + 1) * d if closed_form else math.comb(2 * d + k, 2 * d))
    return (per_neuron + 3 * num_monomials(d, k)) * max(width, 1) * itemsize


def taylor_pass_bytes(d: int, k: int, widths, itemsize: int) -> int:
    """The largest per-layer working set of :func:`taylor_pass` through layers of ``widths``
    (the first in closed form)."""
    return max(_layer_bytes(d, k, widths, itemsize))


def _layer_bytes(d: int, k: int, widths, itemsize: int) -> list[int]:
    return [taylor_bytes(d, k, int(w), itemsize, closed_form=i == 0)
            for i, w in enumerate(widths)]


def num_monomials(d: int, k: int) -> int:
    """``D_k = C(d + k, d)``: the number of multi-indices in ``d`` variables of degree <= k."""
    return math.comb(d + k, d)


@functools.cache
def _monomials(d: int, k: int) -> np.ndarray:
    rows: list[tuple[int, ...]] = []

    def compositions(n: int, parts: int) -> list[tuple[int, ...]]:
        # Exponent tuples of total degree n, x_1's exponent descending first (graded reverse-lex
        # within a degree: for d = 2, degree 2 is x1^2, x1 x2, x2^2).
        if parts == 1:
            return [(n,)]
        out = []
        for first in range(n, -1, -1):
            out += [(first, *rest) for rest in compositions(n - first, parts - 1)]
        return out

    for degree in range(k + 1):
        rows += compositions(degree, d)
    arr = np.array(rows, dtype=np.int32).reshape(-1, d)
    arr.setflags(write=False)
    return arr


def monomials(d: int, k: int) -> np.ndarray:
    """The multi-indices ``alpha`` with ``|alpha| <= k`` in ``d`` variables, in feature order.

    Ordered by total degree; within a degree, by the exponent of ``x_1`` descending, then of
    ``x_2`` descending, and so on (for ``d = 2``: ``1, x1, x2, x1^2, x1 x2, x2^2, ...``). Since
    lower degrees come first, the features of order ``k' < k`` are the first ``D_{k'}`` rows of
    the features of order ``k``.

    Returns:
      An ``int32`` array of shape ``(D_k, d)``, read-only.

    >>> jc.taylor.monomials(2, 2).tolist()      # 1, x1, x2, x1^2, x1 x2, x2^2
    [[0, 0], [1, 0], [0, 1], [2, 0], [1, 1], [0, 2]]
    >>> jc.taylor.num_monomials(2, 8)   # D_8 in two inputs: the width of the README's example
    45
    """
    d, k = int(d), int(k)
    if d < 1:
        raise ValueError(f"monomials: d must be >= 1, got {d}")
    if k < 0:
        raise ValueError(f"monomials: order k must be >= 0, got {k}")
    return _monomials(d, k)


@functools.cache
def _product_table(d: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index triples (i, j, t) with ``alpha_i + alpha_j = alpha_t`` and ``|alpha_t| <= k``.

    Sorted by t so the truncated product is a sorted segment sum. Its length is
    ``C(2d + k, 2d)`` (pairs of monomials of total degree <= k).
    """
    mons = _monomials(d, k)
    index = {tuple(m): n for n, m in enumerate(mons)}
    deg = mons.sum(axis=1)
    ii, jj, tt = [], [], []
    for i in range(len(mons)):
        for j in range(len(mons)):
            if deg[i] + deg[j] <= k:
                ii.append(i)
                jj.append(j)
                tt.append(index[tuple(mons[i] + mons[j])])
    order = np.argsort(np.asarray(tt), kind="stable")
    return tuple(np.asarray(a, dtype=np.int32)[order] for a in (ii, jj, tt))  # type: ignore


def check_feature_budget(d: int, k: int, widths, itemsize: int, *, where: str) -> None:
    """Raise a clear error when features of order ``k`` in ``d`` inputs of hidden layers of
    ``widths`` (one int: one layer) would not fit in memory (:func:`taylor_pass`)."""
    per_layer = _layer_bytes(d, k, np.atleast_1d(widths), itemsize)
    need, limit = max(per_layer), memory_limit()
    if need > limit:
        layer = per_layer.index(need) + 1
        width = int(np.atleast_1d(widths)[layer - 1])
        raise ValueError(
            f"{where}: order k={k} with d_in={d} gives D_k={num_monomials(d, k):,} monomials "
            f"({math.comb(2 * d + k, 2 * d):,} coefficient products per neuron after the first "
            f"hidden layer); the Taylor pass would need about {need / 2**30:.1f} GiB for width "
            f"{width} (hidden layer {layer}), over the limit of {limit / 2**30:.1f} GiB (the "
            "device's memory, or jaxcompress.taylor.MAX_FEATURE_BYTES when set). Lower the "
            "order, use an effective input dimension, or shard the neurons over more devices "
            "(jc.shard)."
        )


def poly_mul(a: jax.Array, b: jax.Array, d: int, k: int) -> jax.Array:
    """Truncated product of coefficient arrays ``a, b`` of shape ``(D_k, ...)``."""
    ii, jj, tt = _product_table(d, k)
    prods = a[ii] * b[jj]
    return jax.ops.segment_sum(prods, tt, num_segments=a.shape[0], indices_are_sorted=True)


@functools.cache
def _power_table(d: int, k: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs of :func:`_product_table` that can be non-zero in ``a * b`` when ``a`` has no
    terms below degree ``v`` and ``b`` no constant term: ``|alpha_i| >= v``, ``|alpha_j| >= 1``."""
    ii, jj, tt = _product_table(d, k)
    deg = _monomials(d, k).sum(axis=1)
    keep = (deg[ii] >= v) & (deg[jj] >= 1)
    return ii[keep], jj[keep], tt[keep]


def compose(series: jax.Array, u: jax.Array, d: int, k: int, *, block: int | None = None
            ) -> jax.Array:
    """``sum_j series[j] * (u - u_0)^j`` truncated at degree k.

    With ``u^ = u - u_0`` (no constant term), the power ``u^^j`` has no terms below degree
    ``j``, so ``u^^{j+1} = u^^j u^`` needs only the pairs of monomials with ``|alpha| >= j``,
    ``|beta| >= 1`` (:func:`_power_table`): about 2.7x fewer products than Horner's rule with
    full truncated products (12,012 against 4,518 for ``d = 3, k = 7``).

    Args:
      series: ``(k + 1, n)`` univariate coefficients ``s_j(u_0)``.
      u: ``(D_k, n)`` coefficient array whose row 0 is ``u_0``.
      block: when set, the neurons (columns) go through in blocks of this many
        (``jax.lax.map``; the last block zero-padded), so that each block's pair products stay
        in cache (:func:`product_block`). The same sums, to rounding.
    """
    if block is None or u.ndim != 2 or u.shape[1] <= block:
        return _compose(series, u, d, k)
    n = u.shape[1]
    nb = -(-n // block)
    pad = nb * block - n
    sb = jnp.pad(series, ((0, 0), (0, pad))).reshape(k + 1, nb, block).transpose(1, 0, 2)
    ub = jnp.pad(u, ((0, 0), (0, pad))).reshape(u.shape[0], nb, block).transpose(1, 0, 2)
    out = jax.lax.map(lambda su: _compose(su[0], su[1], d, k), (sb, ub))
    return out.transpose(1, 0, 2).reshape(u.shape[0], nb * block)[:, :n]


def _compose(series: jax.Array, u: jax.Array, d: int, k: int) -> jax.Array:
    u_hat = u.at[0].set(0)
    res = (series[1][None] * u_hat if k >= 1 else jnp.zeros_like(u)).at[0].set(series[0])
    power = u_hat
    for j in range(2, k + 1):
        ii, jj, tt = _power_table(d, k, j - 1)
        power = jax.ops.segment_sum(power[ii] * u_hat[jj], tt, num_segments=u.shape[0],
                                    indices_are_sorted=True)
        res = res + series[j][None] * power
    return res


#: Pair products of one truncated power (``len(_power_table(d, k, 1)) x width`` numbers) above
#: this many bytes are computed in neuron blocks on a CPU (:func:`product_block`).
CPU_BLOCK_BYTES = 16 * 2**20
#: Neurons per block then: 64 keeps a block's products (about 0.8 MB at d = 3, k = 7) in L2.
CPU_BLOCK_NEURONS = 64


def product_block(d: int, k: int, width: int, itemsize: int) -> int | None:
    """Neurons per block for :func:`compose` on this backend, or ``None`` (all at once).

    On a CPU, the products of a truncated power are a ``(pairs, width)`` array that is written
    and then summed by segments; once it no longer fits in cache every pass goes to memory.
    Measured on the 2-core development machine (one thread, float64, ``d = 3``, ``compose``
    alone, medians): ``k = 7`` at width 2,048 takes 32 ms at once and 12 ms in blocks of 64
    (4,096: 70 vs 27 ms; 16,384: 282 vs 103 ms), ``k = 11`` at width 1,024 150 vs 78 ms. Below
    :data:`CPU_BLOCK_BYTES` the loop's overhead eats the gain (``k = 7`` at 1,024, 12 MB of
    products: 6.1-6.6 vs 5.7-6.9 ms; ``k = 3`` at 32,768: 5.3 vs 7.8 ms). On accelerators the
    whole layer is one kernel: ``None``.
    """
    if jax.default_backend() != "cpu" or k < 2:
        return None
    pairs = len(_power_table(d, k, 1)[0])
    return CPU_BLOCK_NEURONS if pairs * width * itemsize > CPU_BLOCK_BYTES else None


@functools.cache
def _multinomials(d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per monomial ``alpha`` of :func:`monomials`: ``|alpha|`` and ``|alpha|! / alpha!``."""
    mons = _monomials(d, k)
    deg = mons.sum(axis=1).astype(np.int32)
    mult = np.array([math.factorial(int(j)) // math.prod(math.factorial(int(a)) for a in m)
                     for j, m in zip(deg, mons, strict=True)], dtype=np.float64)
    for arr in (deg, mult):
        arr.setflags(write=False)
    return deg, mult


def affine_features(
    center: jax.Array, kernel: jax.Array, bias: jax.Array, *, activation: str | Activation,
    order: int, placement: Placement | None = None,
) -> jax.Array:
    """Taylor coefficients of ``sigma(x @ kernel + bias)`` at ``x = center``, in closed form.

    With ``w_i`` the kernel's column ``i`` and ``u_{0,i} = center . w_i + b_i``, the
    pre-activation along ``x = center + t`` is ``u_{0,i} + w_i . t``; the univariate series
    ``sigma(u_0 + h) = sum_j s_j(u_0) h^j`` and the multinomial theorem
    ``(w . t)^j = sum_{|alpha| = j} j!/alpha! w^alpha t^alpha`` give

    .. math:: Z_{\\alpha i} = s_{|\\alpha|}(u_{0,i})\\,\\frac{|\\alpha|!}{\\alpha!}\\,
              w_i^{\\alpha}, \\qquad |\\alpha| \\le k,

    exactly what :func:`propagate_polynomial` computes from :func:`input_polynomial` with
    truncated products, at ``O(D_k d)`` cost: every ``w_i^alpha`` is a product of ``m`` entries of
    the table of powers ``w_{ri}^j``, ``j <= k`` (no truncated products).

    Args:
      center: ``(m,)`` expansion point.
      kernel: ``(m, n)``; bias: ``(n,)``.
      activation: a registered activation (its ``series`` gives ``s_j``).
      order: ``k``.
      placement: the neurons' placement in a sharded compression (``None``: one device).

    Returns:
      ``(D_k, n)`` with ``D_k = C(m + k, m)``, rows in the order of :func:`monomials`.
    """
    act = get_activation(activation)
    m = kernel.shape[0]
    u0 = constrain_neurons(jnp.matmul(center, kernel, precision=HIGHEST) + bias, placement)
    series = act.series(u0, order)                                   # (k + 1, n)
    powers = [jnp.ones_like(kernel)]
    for _ in range(order):
        powers.append(powers[-1] * kernel)
    powers = jnp.stack(powers)                                       # (k + 1, m, n): w_ri^j
    mons = _monomials(m, order)
    w_alpha = powers[mons[:, 0], 0]
    for r in range(1, m):
        w_alpha = w_alpha * powers[mons[:, r], r]                    # (D_k, n): w_i^alpha
    deg, mult = _multinomials(m, order)
    coef = series[deg] * jnp.asarray(mult, series.dtype)[:, None]
    return constrain_neurons(coef * w_alpha, placement)


def input_polynomial(center: jax.Array, k: int) -> jax.Array:
    """Coefficient array ``(D_k, d)`` of the identity map ``x = x_0 + t`` (expansion at x_0)."""
    d = center.shape[-1]
    x = jnp.zeros((num_monomials(d, k), d), center.dtype).at[0].set(center)
    if k >= 1:
        x = x.at[1 + jnp.arange(d), jnp.arange(d)].set(1)
    return x


def propagate_polynomial(
    p: jax.Array, layers: Params, *, activation: str | Activation, order: int, num_vars: int,
    placement: Placement | None = None,
) -> list[jax.Array]:
    """Push the coefficient array ``p`` through hidden ``layers`` (each ``dense -> activation``).

    ``p`` is ``(C(m + k, m), width)``: a polynomial in ``m = num_vars`` variables truncated at
    order ``k``, e.g. the input expansion ``x0 + t`` (:func:`input_polynomial`: derivative
    features), an earlier narrow layer's activations in their own coordinates (the bottleneck
    corollary) or an analytic parameterisation ``iota(u0 + t)``. Returns every layer's
    coefficient array. ``placement``: the neurons' placement in a sharded compression.
    """
    act = get_activation(activation)
    feats = []
    for layer in layers:
        u = jnp.matmul(p, layer["kernel"], precision=HIGHEST).at[0].add(layer["bias"])
        u = constrain_neurons(u, placement)
        block = None if placement is not None else product_block(
            num_vars, order, u.shape[1], u.dtype.itemsize)
        p = compose(act.series(u[0], order), u, num_vars, order, block=block)
        feats.append(p)
    return feats


def taylor_pass(
    center: jax.Array, layers: Params, *, activation: str | Activation, order: int,
    placement: Placement | None = None,
) -> list[jax.Array]:
    """Coefficient arrays ``(D_k, d_l)`` of every one of ``layers`` (each ``dense ->
    activation``), expanded at ``center`` in the coordinates the first layer reads.

    The first layer in closed form (:func:`affine_features`), the others by
    :func:`propagate_polynomial`: the same numbers as ``propagate_polynomial(
    input_polynomial(center, order), layers, ...)`` (to rounding), without truncated products
    in the first layer. ``placement``: the neurons' placement in a sharded compression.
    """
    if not layers:
        return []
    first = affine_features(center, layers[0]["kernel"], layers[0]["bias"],
                            activation=activation, order=order, placement=placement)
    return [first] + propagate_polynomial(first, layers[1:], activation=activation, order=order,
                                          num_vars=center.shape[-1], placement=placement)


def taylor_features(
    params: Params,
    *,
    activation: str | Activation,
    order: int,
    center: jax.Array | None = None,
    upto: int | None = None,
    placement: Placement | None = None,
) -> list[jax.Array]:
    """Features ``Z_l`` of shape ``(D_k, d_l)`` of the first ``upto`` hidden layers, one pass.

    See the module docstring and :func:`taylor_pass`. ``center`` is the expansion point ``x_0``
    (default: the origin); ``placement`` the neurons' placement in a sharded compression
    (``None``: one device).
    """
    d = params[0]["kernel"].shape[0]
    dtype = jnp.result_type(params[0]["kernel"])
    center = jnp.zeros((d,), dtype) if center is None else jnp.asarray(center, dtype)
    n_hidden = len(params) - 1 if upto is None else upto
    return taylor_pass(center, params[:n_hidden], activation=activation, order=order,
                       placement=placement)
