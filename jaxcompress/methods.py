"""Compression methods as values: a feature map, a selector, a layer order and widths.

A method is a small frozen object, built by a factory the way ``optax.adam(...)`` builds a
``GradientTransformation`` (or ``lx.SVD(rcond=...)`` a lineax solver), that validates its own
fields and is registered as a pytree: arrays inside it (collocation data, expansion centres, a
PRNG key) are traced under ``jax.jit`` / ``jax.vmap``, everything else is static configuration.
:func:`jaxcompress.compress` takes one:

>>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
>>> small, info = jc.compress(params, jc.collocation(4), activation="sigmoid",
...                           domain=jc.Box([-1.0, -1.0], [1.0, 1.0]))
>>> jc.layer_sizes(small)                         # min(D_4, 32) = 15 neurons a layer
[2, 15, 15, 1]
>>> info.method
'collocation(order=4, features=collocation, selector=omp, forward)'
>>> best = jc.best_of(jc.derivative_matching(4), jc.collocation(4))   # equal widths: comparable
>>> best.describe()
'best_of(derivative_matching(order=4, ...), collocation(order=4, ...))'

Factories:

:func:`derivative_matching`
    the paper's method: derivative features at the domain's centre, R-scaled pivoted QR,
    backward order (Algorithm 1, Theorem 8).
:func:`collocation` (ours, data-free)
    activations at Sobol points of the domain, output-aware greedy selection (:class:`OMP`),
    forward order with each layer re-fitted to the teacher: the best method measured on trained
    teachers (``benchmarks/compare_methods.py``).
:func:`data_matching`
    the same on user inputs (Chee et al. 2022).
:func:`best_of`
    runs several methods of equal widths and keeps, per teacher, the one with the smallest
    ``error_estimate`` on the domain (data-free).

A method of your own is ``Method(features=my_feature_map, selector=my_selector, ...)`` with
subclasses of the declared protocols :class:`jaxcompress.features.FeatureMap` and
:class:`jaxcompress.select.Selector`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxcompress.domains import Ball, Points
from jaxcompress.features import (
    CollocationFeatures,
    DataFeatures,
    DerivativeFeatures,
    FeatureMap,
)
from jaxcompress.select import PivotedQR, as_selector

__all__ = [
    "LAYER_ORDERS",
    "BestOf",
    "Method",
    "best_of",
    "collocation",
    "data_matching",
    "derivative_matching",
]

LAYER_ORDERS = ("backward", "forward")


def _is_node(obj) -> bool:
    """Whether ``obj`` is a registered pytree node (its arrays traced) rather than a leaf."""
    return not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(obj))


@dataclasses.dataclass(frozen=True)
class Method:
    """A compression method: what :func:`jaxcompress.compress` does to every hidden layer.

    Args:
      features: a feature map (:class:`~jaxcompress.features.DerivativeFeatures`,
        :class:`~jaxcompress.features.CollocationFeatures`,
        :class:`~jaxcompress.features.DataFeatures`, or your own).
      selector: a selector object (:class:`~jaxcompress.PivotedQR`, :class:`~jaxcompress.MaxVol`,
        :class:`~jaxcompress.OMP`, ...), or its name.
      layer_order: ``"backward"`` (deepest hidden layer first: every layer's features come from
        the original network in one pass; the paper's Proposition 17) or ``"forward"`` (features
        of the partially compressed network; with point features each layer is re-fitted to the
        teacher's next pre-activation at the same points, so upstream errors are corrected rather
        than compounded).
      widths: the hidden widths, one per hidden layer (default ``min(D_k, d_l)``).
      name: how the method is shown in ``CompressInfo`` (the factories set it).

    A registered pytree: the feature map and selector are traced parts when they are pytrees
    themselves (their arrays traced, settings static), static parts otherwise.
    """

    features: Any
    selector: Any = dataclasses.field(default_factory=PivotedQR)
    layer_order: str = "backward"
    widths: tuple[int, ...] | None = None
    name: str = "method"

    def __post_init__(self):
        object.__setattr__(self, "selector", as_selector(self.selector, "Method"))
        if self.layer_order not in LAYER_ORDERS:
            raise ValueError(f"Method: layer_order must be one of {LAYER_ORDERS}, got "
                             f"{self.layer_order!r}")
        if self.widths is not None:
            widths = tuple(self.widths)
            if not widths or any(isinstance(w, bool) or not isinstance(w, (int, np.integer))
                                 or w < 1 for w in widths):
                raise ValueError(f"Method: widths must be positive ints, one per hidden layer, "
                                 f"got {self.widths!r}")
            object.__setattr__(self, "widths", tuple(int(w) for w in widths))
        if not isinstance(self.features, FeatureMap):
            raise TypeError("Method: features must provide name, num_features(sizes, domain) "
                            "and __call__(params, layers, *, activation, domain, placement) by "
                            "subclassing jc.features.FeatureMap (jaxcompress.features), got "
                            f"{type(self.features).__name__}")
        # the feature map may depend on the widths (collocation's node count follows them)
        object.__setattr__(self, "features", self.features.with_widths(self.widths))

    def describe(self) -> str:
        order = self.features.describe_order()
        order = order if isinstance(order, str) else f"order={order}"
        return (f"{self.name}({order}, "
                f"features={self.features.name}, selector={self.selector.name}, "
                f"{self.layer_order})")

    def with_widths(self, widths: Sequence[int] | None) -> Method:
        """The same method with other hidden widths."""
        return dataclasses.replace(self, widths=None if widths is None else tuple(widths))


def _method_flatten(m: Method):
    parts = (m.features, m.selector)
    children = tuple(p if _is_node(p) else None for p in parts)
    static = tuple(None if _is_node(p) else p for p in parts)
    return children, (static, m.layer_order, m.widths, m.name)


def _method_unflatten(aux, children):
    static, layer_order, widths, name = aux
    features, selector = (c if s is None else s for c, s in zip(children, static, strict=True))
    out = object.__new__(Method)
    for key, value in (("features", features), ("selector", selector),
                       ("layer_order", layer_order), ("widths", widths), ("name", name)):
        object.__setattr__(out, key, value)  # no validation: leaves may be tracers or specs
    return out


jax.tree_util.register_pytree_node(Method, _method_flatten, _method_unflatten)


@dataclasses.dataclass(frozen=True)
class BestOf:
    """Several methods of equal widths; per teacher, the result with the smallest error estimate.

    ``CompressInfo.choice`` says which won (per teacher under ``jax.vmap``); the estimate is
    ``max |F - F~|`` on fixed Sobol points of the domain (data-free, ours).
    """

    methods: tuple[Method, ...]

    def __post_init__(self):
        methods = tuple(self.methods)
        if len(methods) < 2:
            raise ValueError(f"best_of: needs at least two methods, got {len(methods)}")
        for m in methods:
            if not isinstance(m, Method):
                raise TypeError(f"best_of: expected Method objects (e.g. "
                                f"jc.derivative_matching(k)), got {type(m).__name__}")
        object.__setattr__(self, "methods", methods)

    def describe(self) -> str:
        return "best_of(" + ", ".join(m.describe() for m in self.methods) + ")"

    def with_widths(self, widths: Sequence[int] | None) -> BestOf:
        return BestOf(tuple(m.with_widths(widths) for m in self.methods))


def _bestof_unflatten(_, children) -> BestOf:
    out = object.__new__(BestOf)
    object.__setattr__(out, "methods", tuple(children))
    return out


jax.tree_util.register_pytree_node(BestOf, lambda b: (b.methods, None), _bestof_unflatten)


def derivative_matching(
    order,
    *,
    backend: str = "taylor",
    selector="pivoted_qr",
    layer_order: str = "backward",
    centers=None,
    coordinates: str | None = None,
    widths: Sequence[int] | None = None,
) -> Method:
    r"""The paper's derivative matching (Algorithm 1 with Theorem 8's backward order).

    Every hidden layer keeps ``min(D_k, d_l)`` neurons chosen on their derivative features at
    the domain's centre :math:`x_0` (rows scaled by ``R^|alpha|``) and the next layer is
    re-weighted so every Taylor coefficient of order ``<= k`` of its pre-activation is unchanged
    (Eq. 41). The features of neuron :math:`i` of hidden layer :math:`l` are (Eq. 18, as Taylor
    coefficients)

    .. math::
       (Z_l)_{\alpha i} = \frac{1}{\alpha!}\, \partial^\alpha_x h^{(l)}_i(x_0),
       \qquad |\alpha| \le k, \qquad
       D_k = \binom{d_{in} + k}{d_{in}},

    and the error on the ball of radius :math:`R` is the Taylor tail: for one layer, with
    outgoing weights :math:`v` before and :math:`\tilde v` after and :math:`M_g` the largest
    neuron value on a complex ball of radius :math:`\rho_0 > R` (Theorem 5, Eq. 16),

    .. math::
       |y_j(x) - \tilde y_j(x)| \le (\|v_{:,j}\|_1 + \|\tilde v_{:,j}\|_1)\, M_g\,
       \frac{\rho_0}{\rho_0 - R} \Big(\frac{R}{\rho_0}\Big)^{k+1}.

    >>> jc.derivative_matching(6).describe()
    'derivative_matching(order=6, features=taylor, selector=pivoted_qr, backward)'
    >>> jc.derivative_matching(6, selector=jc.MaxVol(delta=0.0)).selector.name
    'maxvol'

    Args:
      order: ``k``, one int or one per hidden layer.
      backend: ``"taylor"`` (default), ``"jet"`` or ``"jacfwd"`` (the slow reference).
      selector: :class:`~jaxcompress.PivotedQR` (default), :class:`~jaxcompress.MaxVol` (the
        coefficient bound of Lemma 10), :class:`~jaxcompress.OMP`, ... or a name.
      layer_order: ``"backward"`` (default) or ``"forward"``.
      centers: ``None`` (the domain's centre), ``"auto"`` (the centre and ``+-`` half-way to the
        boundary along each axis) or a ``(J, m)`` array: derivative features at several centres,
        stacked (ours).
      coordinates: ``None`` or ``"bottleneck"`` (the paper's architectural-bottleneck corollary:
        ``D_k`` from the narrowest earlier layer). An analytic parameterisation of the input is a
        domain: ``domain=jc.Parameterization(iota, U)``.
      widths: hidden widths (default ``min(D_k, d_l)``).
    """
    auto = isinstance(centers, str)
    if auto and centers != "auto":
        raise ValueError(f"derivative_matching: centers must be None, 'auto' or an array, got "
                         f"{centers!r}")
    feats = DerivativeFeatures(order, backend=backend, centers=None if auto else centers,
                               auto_centers=auto, coordinates=coordinates)
    return Method(feats, selector, layer_order, widths, name="derivative_matching")


def collocation(
    order,
    *,
    oversample: int = 4,
    nodes: str = "sobol",
    selector="omp",
    layer_order: str = "forward",
    coordinates: str | None = None,
    widths: Sequence[int] | None = None,
    gradients: bool | None = None,
) -> Method:
    r"""Selection and re-weighting on activations at nodes of the domain (data-free; ours).

    The feature matrix of hidden layer ``l`` is ``Z[p, i] = h_i(x_p)`` at ``N = oversample *
    D_k`` Sobol nodes ``x_p`` of the domain; the re-weighting minimises the next layer's
    pre-activation error over the nodes by least squares,

    .. math::
       Z_{pi} = h^{(l)}_i(x_p), \qquad
       \tilde K_{l+1} = \operatorname*{arg\,min}_{K'} \sum_{p=1}^{N}
       \big\| Z_{p,K}\, K' - T_p \big\|_2^2, \qquad T = Z^{\mathrm{teacher}}_l K_{l+1},

    the discrete analogue of Eq. (41) (matching values at nodes instead of Taylor coefficients
    at the centre). Defaults are the best combination measured on the paper's trained teachers:
    output-aware greedy selection (:class:`OMP`) in forward order, each layer re-fitted to the
    teacher (``T`` from the teacher's own activations at the same nodes).

    Args:
      order: ``k``: the widths ``min(D_k, d_l)`` and ``N`` follow ``D_k = C(m + k, m)``.
      oversample: nodes per feature.
      nodes: ``"sobol"``; on a :class:`~jaxcompress.Box` also ``"chebyshev"``,
        ``"chebyshev_grid"``.
      selector: :class:`~jaxcompress.OMP` (default) or any selector.
      layer_order: ``"forward"`` (default) or ``"backward"``.
      coordinates: ``None`` or ``"bottleneck"``.
      widths: hidden widths (default ``min(D_k, d_l)``).
      gradients: also match the first derivatives ``d h_i / d x_j`` at the nodes (``True``);
        ``None`` (default): when ``fn`` differentiates the network inside (``jax.grad`` of it:
        forces, normals, a Hamiltonian vector field), where the output is such a derivative.
    """
    feats = CollocationFeatures(order, oversample=oversample, nodes=nodes,
                                coordinates=coordinates, gradients=gradients)
    return Method(feats, selector, layer_order, widths, name="collocation")


def data_matching(
    x,
    *,
    order=None,
    widths: Sequence[int] | None = None,
    rtol: float | None = None,
    x_eval=None,
    holdout: float = 0.125,
    selector="omp",
    layer_order: str = "forward",
    coordinates: str | None = None,
    gradients: bool | None = None,
) -> Method:
    """Selection and re-weighting on activations at the inputs ``x`` (``(N, d_in)``).

    As :func:`collocation` with the user's points (Chee et al. 2022, "Model Preserving
    Compression for Neural Networks"). For any input dimension: the widths are given
    (``widths=``), or the numerical rank of each layer's activations at the data
    (``rtol=``: singular values above ``rtol`` times the largest, measured on the teacher by
    :func:`jaxcompress.data_profile`), or ``min(D_k, d_l)`` for an ``order`` (which only means
    something with few inputs: ``D_2`` of 32 inputs is 561).

    Without a ``domain`` the compression measures on the data: its domain is
    :class:`~jaxcompress.Points` of the rows fitted on, with ``x_eval`` (or every
    ``round(1 / holdout)``-th row of ``x``, held out of the fit) as the points of the error
    estimate (ours). With a domain, every row of ``x`` is fitted on and the estimate is on the
    domain's Sobol points, as for the other methods. ``gradients=True`` also matches the first
    derivatives at the data (``None``, the default: when ``fn`` differentiates the network, as
    :func:`collocation`).
    """
    if order is None and widths is None and rtol is None:
        raise ValueError("data_matching: give the widths (widths=[...]), a rank tolerance "
                         "(rtol=1e-6: widths from the numerical rank of each layer's "
                         "activations at the data) or an order (order=k, for few inputs)")
    if rtol is not None and widths is not None:
        raise ValueError("data_matching: give widths= or rtol=, not both")
    feats = DataFeatures(x, order, coordinates=coordinates, x_eval=x_eval, holdout=holdout,
                         rtol=rtol, gradients=gradients)
    return Method(feats, selector, layer_order, widths, name="data_matching")


def default_domain(method, domain, d_in: int, where: str = "compress"):
    """``(method, domain)`` of a compression given ``domain`` (possibly ``None``).

    A given domain is kept. Without one, a method that only matches data
    (:func:`data_matching`, or :func:`best_of` such methods) measures on the data: the domain is
    :class:`~jaxcompress.Points` of the first method's fitted rows with its held-out rows
    (``x_eval``, or the ``holdout`` split, which each data method then fits without); any other
    method gets the unit ball ``Ball(d_in, 1)``.
    """
    if domain is not None:
        return method, domain
    methods = method.methods if isinstance(method, BestOf) else (method,)
    if not all(isinstance(m, Method) and isinstance(m.features, DataFeatures) for m in methods):
        return method, Ball(d_in, 1.0)
    split = []
    for m in methods:
        m.features.check_shapes(d_in, where)
        fit, held = m.features.split()
        feats = dataclasses.replace(m.features, x=fit, x_eval=held, holdout=0.0)
        split.append((dataclasses.replace(m, features=feats), fit, held))
    domain = Points(split[0][1], held_out=split[0][2])
    if isinstance(method, BestOf):
        return dataclasses.replace(method, methods=tuple(m for m, _, _ in split)), domain
    return split[0][0], domain


def best_of(*methods: Method) -> BestOf:
    """Run each method and keep, per teacher, the one with the smallest ``error_estimate``.

    The methods must give the same hidden widths (e.g. ``derivative_matching(k)`` and
    ``collocation(k)``: both ``min(D_k, d_l)``). Data-free: the estimate is measured on fixed
    Sobol points of the domain that no method was fitted on.
    """
    return BestOf(tuple(methods))
