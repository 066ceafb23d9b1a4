"""Features of every hidden neuron: derivative backends, point features, and feature maps.

For hidden layer ``l`` the derivative feature matrix is ``Z_l in R^{D_k x d_l}``,

.. math:: (Z_l)_{\\alpha i} = \\frac{1}{\\alpha!}\\,\\partial_x^{\\alpha} h^{(l)}_i(x_0),
          \\qquad |\\alpha| \\le k,

rows ordered as :func:`jaxcompress.taylor.monomials`: the paper's ``Phi(w_i)`` (Eq. 18) stacked
over the
neurons (Eq. 19), written with Taylor coefficients (divided by ``alpha!``). Backends of
:func:`derivative_features`:

``"taylor"`` (default)
    Multivariate truncated-Taylor propagation (:mod:`jaxcompress.taylor`): one forward pass for
    all layers, cost ``O(C(2d+k, 2d) * width)`` per activation; the first hidden layer (affine in
    the input) in closed form, ``O(D_k * width)`` (:func:`jaxcompress.taylor.affine_features`).
``"jet"``
    :func:`jax.experimental.jet.jet` under :func:`jax.vmap` over directions ``v``: the univariate
    series of ``t -> h(x_0 + t v)`` has degree-``j`` coefficient
    ``sum_{|alpha|=j} Z_alpha v^alpha``; the ``Z_alpha`` are recovered per degree by least
    squares on a fixed, well-conditioned set of directions (interpolation of homogeneous
    polynomials).
``"jacfwd"``
    Nested :func:`jax.jacfwd`, ``k`` deep. Obviously right, slow to compile: the reference.

:func:`point_features` are activations at points, ``Z[p, i] = h_i^(l)(x_p)``.

**Feature maps** are what :func:`jaxcompress.compress` uses: small frozen objects that validate
their own fields, registered as pytrees (arrays such as centres or data traced, settings static),
called as ``feature_map(params, layers, activation=, domain=) -> {l: LayerFeatures}``:

:class:`DerivativeFeatures`
    derivative features at the domain's centre (the paper's derivative matching), rows scaled by
    ``R^|alpha|`` for selection; optionally at several centres (``J D_k`` rows, a Hermite-type
    least-squares fit, ours) and in bottleneck coordinates (the paper's architectural bottleneck
    corollary).
:class:`CollocationFeatures` (ours, data-free)
    activations at ``N = oversample * D_k`` quasi-random nodes of the (known) domain. Selecting
    columns and solving ``Z_K C ~= Z`` by least squares minimises the discrete ``L^2`` error of
    the next layer's pre-activation over the nodes, which stays meaningful when the network is
    not holomorphic on a ball around the domain (trained teachers).
:class:`DataFeatures`
    the same on user inputs (the interpolative decomposition of Chee et al. 2022).

A user-written feature map subclasses :class:`FeatureMap` (the declared protocol, with defaults
for everything optional) and is hashable (a frozen dataclass) or a registered pytree.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import jet as _jet

from jaxcompress._checks import as_real_array, check_finite, is_concrete
from jaxcompress.activations import Activation, _factorial, get_activation
from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.domains import NODE_KINDS
from jaxcompress.mlp import (
    HIGHEST,
    Params,
    _dense,
    hidden_activations,
    layer_sizes,
    require_single_network,
    validate_params,
)
from jaxcompress.placement import Placement
from jaxcompress.taylor import (
    check_feature_budget,
    monomials,
    num_monomials,
    propagate_polynomial,
    taylor_features,
    taylor_pass,
)

__all__ = [
    "BACKENDS",
    "CollocationFeatures",
    "DataFeatures",
    "NO_ORDER",
    "DerivativeFeatures",
    "FeatureMap",
    "LayerFeatures",
    "bottleneck_sources",
    "default_centers",
    "derivative_features",
    "parameterization_polynomial",
    "point_features",
    "propagate_polynomial",
]

BACKENDS = ("taylor", "jet", "jacfwd")
COORDINATES = ("input", "bottleneck")

#: Points used to estimate the radius of an earlier layer's image (the bottleneck corollary).
BOTTLENECK_RADIUS_POINTS = 1024


def _hidden_map(params: Params, act: Activation, n_hidden: int, *, use_jet_fn: bool = False):
    fn = act.jet_fn if use_jet_fn else act.fn

    def f(x):
        outs = []
        h = x
        for layer in params[:n_hidden]:
            h = fn(_dense(h, layer))
            outs.append(h)
        return jnp.concatenate(outs, axis=-1)

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


def monomial_taylor_of(fn, center: jax.Array, order: int) -> jax.Array:
    """Taylor coefficients ``(D_k, n_out)`` of ``fn: (m,) -> (n_out,)`` at ``center`` by jet.

    The univariate series along the fixed directions of :func:`_directions` come from
    :func:`jax.experimental.jet.jet` under :func:`jax.vmap`; the multivariate coefficients of
    each degree are recovered by least squares.
    """
    m = center.shape[0]
    v_np, solvers = _directions(m, order)
    v = jnp.asarray(v_np, center.dtype)
    y0 = fn(center)

    def along(direction):
        if order == 0:
            return y0[None]
        terms = (direction,) + (jnp.zeros_like(direction),) * (order - 1)
        _, ys = _jet.jet(fn, (center,), (terms,))
        # jet returns derivatives in t; the Taylor coefficient of t^j is the j-th term / j!
        return jnp.stack([y0] + [ys[j] / _factorial(j + 1) for j in range(order)])

    series = jax.vmap(along)(v)  # (n_dir, k + 1, n_out)
    rows = [jnp.matmul(jnp.asarray(solvers[j], series.dtype), series[:, j, :], precision=HIGHEST)
            for j in range(order + 1)]
    return jnp.concatenate(rows, axis=0)


def _jet_features(params: Params, act: Activation, order: int, center: jax.Array) -> list:
    n_hidden = len(params) - 1
    widths = [layer["kernel"].shape[1] for layer in params[:n_hidden]]
    feats = monomial_taylor_of(_hidden_map(params, act, n_hidden, use_jet_fn=True), center,
                                order)
    return list(jnp.split(feats, np.cumsum(widths)[:-1], axis=1))


def _jacfwd_features(params: Params, act: Activation, order: int, center: jax.Array) -> list:
    n_hidden = len(params) - 1
    d = center.shape[0]
    mons = monomials(d, order)
    deg = mons.sum(axis=1)
    fact = np.prod([[math.factorial(int(a)) for a in m] for m in mons], axis=1)
    widths = [layer["kernel"].shape[1] for layer in params[:n_hidden]]
    cat = _hidden_map(params, act, n_hidden)

    def g(x):
        return tuple(jnp.split(cat(x), np.cumsum(widths)[:-1], axis=-1))

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
            rows.append(derivs[j][layer][(slice(None),) + idx] / float(fa))
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
    placement: Placement | None = None,
) -> list[jax.Array]:
    """Taylor-coefficient features of every hidden layer at the expansion point.

    Args:
      params: the MLP (list of ``{"kernel", "bias"}``).
      activation: a registered activation name (see :func:`register_activation`).
      order: the truncation order ``k >= 0``.
      backend: ``"taylor"`` (default), ``"jet"`` or ``"jacfwd"`` (slow reference).
      center: the expansion point ``x_0`` (default: the origin).
      placement: the hidden neurons' placement in a sharded compression (``None``: one device).

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
    check_feature_budget(d, order, widths, jnp.dtype(dtype).itemsize, where=where)
    if center is None:
        center = jnp.zeros((d,), dtype)
    center = jnp.asarray(center, dtype)
    if center.shape != (d,):
        raise ValueError(f"{where}: center has shape {center.shape}; expected ({d},)")
    feats = _features_jit(params, center, act=act, order=order, backend=backend,
                          placement=placement)
    n_mon = num_monomials(d, order)
    assert all(z.shape == (n_mon, w) for z, w in zip(feats, widths, strict=True))
    return feats


@functools.partial(FastOnSmallCPU, static_argnames=("act", "order", "backend", "placement"))
def _features_jit(params, center, *, act, order, backend, placement=None):
    # One compiled program per (shapes, act, order, backend, placement): run op by op, the Taylor
    # pass compiles every primitive of a new shape separately (4-6x slower on first use).
    if backend == "taylor":
        return taylor_features(params, activation=act, order=order, center=center,
                               placement=placement)
    if backend == "jet":
        return _jet_features(params, act, order, center)
    return _jacfwd_features(params, act, order, center)


def point_features(
    params: Params, x: jax.Array, *, activation: str | Activation, upto: int | None = None,
    placement: Placement | None = None,
) -> list[jax.Array]:
    """Activations of every hidden neuron at the points ``x``: the point feature matrices.

    .. math:: (Z_l)_{p i} = h^{(l)}_i(x_p), \\qquad Z_l \\in \\mathbb{R}^{N \\times d_l}.

    Args:
      params: the MLP.
      x: ``(N, d_in)`` points (collocation nodes of the domain, or data).
      activation: the activation.
      upto: only the first ``upto`` hidden layers (default: all).
      placement: the hidden neurons' placement in a sharded compression (``None``: one device).

    Returns:
      A list over hidden layers of ``(N, d_l)`` arrays. One forward pass; jit-able.
    """
    act = get_activation(activation)
    n_hidden = len(params) - 1 if upto is None else upto
    sub = list(params[:n_hidden]) + [params[n_hidden]]
    return hidden_activations(sub, x, activation=act, placement=placement)


def parameterization_polynomial(fn, center: jax.Array, order: int) -> jax.Array:
    """Coefficient array ``(C(m + k, m), d_in)`` of ``u -> iota(u0 + u)`` truncated at order k.

    ``iota = fn`` maps ``(m,)`` to ``(d_in,)``; its multivariate Taylor coefficients come from
    :func:`jax.experimental.jet.jet` along fixed directions, recovered per degree by least squares
    (as in the ``"jet"`` backend). Feeding this array to the network's Taylor pass gives the
    derivative features of ``h^(l)(iota(u))`` in ``u``: the paper's effective-input-dimension
    corollary (``D_k = C(m + k, m)`` instead of ``C(d_in + k, d_in)``).
    """
    return monomial_taylor_of(fn, center, order)


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


# ------------------------------------------------------------------------------------------------
# Feature maps: what compress uses
# ------------------------------------------------------------------------------------------------


@functools.partial(jax.tree_util.register_dataclass, data_fields=["z", "scale"],
                   meta_fields=["layer", "order", "num_features", "coord_dim"])
@dataclasses.dataclass(frozen=True)
class LayerFeatures:
    """One hidden layer's feature matrix and its description (what a feature map returns).

    A pytree: ``z`` and ``scale`` are traced, the description is static.

    Attributes:
      z: ``(rows, d_l)`` features, one column per neuron.
      scale: ``(rows,)`` row weights applied before selection (``R^|alpha|`` for derivative
        features), or ``None``.
      layer: the hidden layer, 1-based as in the paper.
      order: the truncation order ``k``.
      num_features: ``D_k = C(m + k, m)``.
      coord_dim: ``m``, the number of coordinates the features are taken in.
    """

    z: jax.Array
    scale: jax.Array | None
    layer: int
    order: int
    num_features: int
    coord_dim: int


def _orders(order, n_hidden: int, where: str, *, prefix: bool = False) -> tuple[int, ...]:
    """Per-layer orders of a network with ``n_hidden`` hidden layers (``prefix``: of its first
    ``n_hidden`` layers, as the forward driver asks for a truncated network)."""
    if isinstance(order, tuple):
        if len(order) != n_hidden and not (prefix and len(order) > n_hidden):
            raise ValueError(f"{where}: order has {len(order)} entries; expected one per hidden "
                             f"layer ({n_hidden})")
        return order[:n_hidden]
    return (order,) * n_hidden


def _as_order(order, where: str):
    """An int, or a tuple of ints for per-layer orders (hashable: part of the configuration)."""
    if isinstance(order, (list, tuple)):
        if not order:
            raise ValueError(f"{where}: order is an empty sequence")
        return tuple(_check_order(o, where) for o in order)
    return _check_order(order, where)


def _check_coordinates(coordinates, where: str) -> str:
    coordinates = "input" if coordinates is None else coordinates
    if coordinates not in COORDINATES:
        raise ValueError(f"{where}: coordinates must be None, 'input' or 'bottleneck' (an "
                         "analytic parameterisation of the input is a domain: "
                         f"domain=jc.Parameterization(iota, U)), got {coordinates!r}")
    return coordinates


def _sources(coordinates: str, sizes, domain) -> tuple[int, ...]:
    """Per hidden layer: 0 the input, j >= 1 hidden layer j (bottleneck), -1 ``iota(u)``."""
    n_hidden = len(sizes) - 2
    if domain.parameter_map is not None:
        return (-1,) * n_hidden
    if coordinates == "bottleneck":
        return bottleneck_sources(sizes)
    return (0,) * n_hidden


def _coord_dims(sources, sizes, domain) -> tuple[int, ...]:
    return tuple(domain.dim if src == -1 else sizes[src] for src in sources)


def _input_coordinates(domain, dtype) -> tuple[Callable[[jax.Array], jax.Array], int]:
    """``(to_x, m)``: the map from the features' coordinates to the network input (``iota`` of a
    :class:`~jaxcompress.Parameterization`, else the identity) and their dimension ``m``."""
    iota = domain.parameter_map
    if iota is not None:
        return iota, domain.base.input_dim(dtype)
    return (lambda u: u), domain.input_dim(dtype)


def _value_shape(values, d_in: int, dtype) -> tuple[int, int]:
    """``(r, width)`` of ``values``' output ``(n, r, width)``."""
    out = jax.eval_shape(values, jax.ShapeDtypeStruct((1, d_in), dtype))
    return int(out.shape[1]), int(out.shape[2])


def with_gradients(values: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    r"""``values`` with its first derivatives beside it: ``x -> (n, r (1 + d), width)``, the
    values and then :math:`\partial h_i / \partial x_j` at every input for ``j = 1 .. d``
    (one ``jvp`` per input coordinate; ``values`` acts on each input row alone). Matching
    them as well as the values is what a network whose output is a derivative of itself needs
    (``jax.grad`` inside ``fn``: forces, normals, Hamiltonian vector fields; ours)."""

    def both(x):
        d = x.shape[-1]
        v, jac = jax.vmap(lambda e: jax.jvp(values, (x,), (jnp.broadcast_to(e, x.shape),)),
                          out_axes=(None, 0))(jnp.eye(d, dtype=x.dtype))
        return jnp.concatenate([v] + [jac[j] for j in range(d)], axis=1)

    return both


def _point_features_of(values, x, layer: int, order: int, m: int,
                       num_features: int | None = None, gradients: bool = False
                       ) -> LayerFeatures:
    v = (with_gradients(values) if gradients else values)(x)
    return LayerFeatures(z=v.reshape(-1, v.shape[-1]), scale=None, layer=layer, order=order,
                         num_features=num_monomials(m, order) if num_features is None
                         else num_features, coord_dim=m)


class FeatureMap(abc.ABC):
    """The protocol of a feature map: what :func:`jaxcompress.compress` needs of one.

    Required: a ``name`` (shown in ``CompressInfo``), :meth:`num_features`, and at least one of
    the two ways to compute features:

    - :meth:`of_values` ``(values, layer, *, domain, dtype)``: the features of one set of
      neurons from a function ``values(x) -> (n, r, width)`` (their activations at a batch of
      inputs, computed by running the network's own program). It works on **every** network;
      the driver calls it for networks that are not a chain of dense layers, and the default
      :meth:`__call__` calls it on a chain.
    - :meth:`__call__` ``(params, layers, *, activation, domain, placement)``: the features of a
      chain in the params convention, all requested layers at once (where a closed form is
      faster: the multivariate Taylor pass). Used for chains.

    Declared with defaults (override what applies): :attr:`refit`, :attr:`coordinates`,
    :meth:`describe_order`, :meth:`check` and :meth:`memory`. A subclass must be hashable (a frozen
    dataclass: static configuration) or a registered pytree (its arrays traced).
    """

    #: ``True``: forward order re-fits each layer to the teacher's next pre-activation at the
    #: same rows (point features); ``False``: it matches the layer's own features.
    refit: bool = False
    #: ``"input"`` or ``"bottleneck"``: the coordinates the features are taken in.
    coordinates: str = "input"
    #: ``True``: the activations' first derivatives at the points are features too
    #: (:func:`with_gradients`); ``None``: when ``fn`` differentiates the network
    #: (:meth:`for_program`). Point features only.
    gradients: bool | None = False

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """How the feature map is shown in ``CompressInfo.features``."""

    @abc.abstractmethod
    def num_features(self, sizes: Sequence[int], domain) -> tuple[int, ...]:
        """``D_k`` per hidden layer of a network of layer ``sizes`` (the default widths are
        ``min(D_k, d_l)``)."""

    def __call__(self, params: Params, layers: Sequence[int], *, activation, domain,
                 placement: Placement | None = None) -> dict[int, LayerFeatures]:
        """The :class:`LayerFeatures` of each requested hidden layer (1-based) of ``params``.

        By default :meth:`of_values` on each layer's activations."""
        act = get_activation(activation)
        dtype = jnp.result_type(params[0]["kernel"])
        out = {}
        for l in layers:
            def values(x, l=l):
                return hidden_activations(list(params[:l]) + [params[l]], x, activation=act,
                                          placement=placement)[l - 1][:, None, :]
            out[l] = dataclasses.replace(self.of_values(values, l, domain=domain, dtype=dtype),
                                         layer=l)
        return out

    def of_values(self, values: Callable[[jax.Array], jax.Array], layer: int, *, domain,
                  dtype) -> LayerFeatures:
        """The :class:`LayerFeatures` of one set of neurons from ``values(x)``, their
        activations ``(n, r, width)`` at inputs ``x`` of shape ``(n, d_in)`` (``r`` values per
        input and neuron, usually one; rows of the features stack them). ``layer`` is the set's
        1-based position (which entry of a per-layer ``order`` or ``widths`` is its own)."""
        raise NotImplementedError(
            f"{type(self).__name__}.of_values: this feature map computes features of a params "
            "list only (its __call__); implement of_values(values, layer, *, domain, dtype) to "
            "compress networks that are not a chain of dense layers")

    def describe_order(self) -> Any:
        """The truncation order(s) ``k`` shown by ``Method.describe`` (``None``: no order)."""
        return None

    def layer_description(self, sizes: Sequence[int], domain, layer: int) -> tuple[int, int]:
        """``(k, m)``, the order and coordinate dimension of hidden ``layer`` (1-based), for the
        record of a layer kept whole (``LayerInfo.skipped``); ``(-1, -1)``: not declared."""
        del sizes, domain, layer
        return -1, -1

    def with_skipped(self, skipped: Sequence[bool]) -> FeatureMap:
        """The map as the driver evaluates it when the layers ``skipped`` are kept whole (for
        :meth:`memory`); by default the map itself (an over-estimate)."""
        del skipped
        return self

    def for_program(self, differentiates: bool) -> tuple[FeatureMap, bool]:
        """``(map, gradients)``: the map the driver evaluates on the activations a network's
        program computes, and whether the driver puts their first derivatives beside them
        (:func:`with_gradients`; not beside the contributions of rows read only through a
        derivative, which are derivatives already), for a network whose ``fn`` does (or does
        not) differentiate it (:attr:`jaxcompress.Network.derivative`). By default
        ``(self, False)``; the point maps resolve ``gradients=None`` to ``differentiates``."""
        del differentiates
        return self, False

    def with_widths(self, widths: tuple[int, ...] | None) -> FeatureMap:
        """The map for a method that keeps ``widths`` neurons per hidden layer (``None``: the
        default ``min(D_k, d_l)``); :class:`~jaxcompress.Method` calls it. By default the map
        itself; :class:`CollocationFeatures` takes enough nodes for the wider layers."""
        del widths
        return self

    def check(self, sizes: Sequence[int], dtype, domain, where: str) -> None:
        """Refuse, eagerly and before compiling, a network or domain the map cannot handle."""
        del sizes, dtype, domain, where

    def memory(self, sizes: Sequence[int], itemsize: int, domain) -> dict[str, int]:
        """Bytes of the map's working set, by part (for the memory check of ``compress``)."""
        del sizes, itemsize, domain
        return {}


class _OrderedFeatureMap(FeatureMap):
    """Shared by the built-in maps: orders, coordinates and ``D_k`` per hidden layer."""

    def describe_order(self) -> Any:
        return self.order

    def orders(self, n_hidden: int, where: str = "compress", *, prefix: bool = False
               ) -> tuple[int, ...]:
        return _orders(self.order, n_hidden, where, prefix=prefix)

    def layer_description(self, sizes, domain, layer: int) -> tuple[int, int]:
        return (self.orders(len(sizes) - 2, prefix=True)[layer - 1],
                self.coord_dims(sizes, domain)[layer - 1])

    def with_skipped(self, skipped: Sequence[bool]) -> FeatureMap:
        """The pass runs to the deepest computed layer at the largest computed order: a skipped
        layer before it is reached at that order, one after it not at all (order 0)."""
        orders = self.orders(len(skipped), prefix=True)
        needed = [i for i, skip in enumerate(skipped) if not skip]
        if not needed:
            return self
        k_max = max(orders[i] for i in needed)
        return dataclasses.replace(self, order=tuple(
            orders[i] if not skip else (k_max if i < needed[-1] else 0)
            for i, skip in enumerate(skipped)))

    def coord_dims(self, sizes, domain) -> tuple[int, ...]:
        """``m`` per hidden layer: the dimension of the coordinates the features are taken in."""
        return _coord_dims(_sources(self.coordinates, sizes, domain), sizes, domain)

    def num_features(self, sizes, domain) -> tuple[int, ...]:
        """``D_k = C(m + k, m)`` per hidden layer (``m``: the coordinates' dimension)."""
        dims = self.coord_dims(sizes, domain)
        return tuple(num_monomials(m, k) for m, k in
                     zip(dims, self.orders(len(sizes) - 2, prefix=True), strict=True))

    def _check_common(self, sizes, where: str) -> None:
        self.orders(len(sizes) - 2, where)


def _bottleneck_image(params, src: int, act, domain, center, dtype, placement):
    """``(to_z, radius of the image of the domain)`` for coordinates ``z = h^(src)(x)``."""

    def to_z(x):
        return hidden_activations(params[:src] + [params[src]], x, activation=act,
                                  placement=placement)[-1]

    z0 = to_z(center[None])[0]
    zr = to_z(domain.nodes(BOTTLENECK_RADIUS_POINTS, "sobol", dtype))
    return to_z, jnp.max(jnp.sqrt(jnp.sum((zr - z0[None]) ** 2, axis=1)))


@functools.partial(jax.tree_util.register_dataclass, data_fields=["centers"],
                   meta_fields=["order", "backend", "auto_centers", "coordinates"])
@dataclasses.dataclass(frozen=True)
class DerivativeFeatures(_OrderedFeatureMap):
    """Taylor-coefficient features ``d^alpha h_i(x0) / alpha!`` (the paper's Eqs. 18-19).

    The expansion point ``x0`` is the domain's centre (``u0``, the centre of ``U``, for a
    :class:`~jaxcompress.Parameterization`); row ``alpha`` is scaled by ``R^|alpha|`` for
    selection (``R``: the domain's radius), so rows measure each Taylor term on the domain.

    Args:
      order: ``k``, one int or one per hidden layer.
      backend: ``"taylor"``, ``"jet"`` or ``"jacfwd"`` (the same numbers; see the module
        docstring). Bottleneck coordinates take every backend, a parameterisation only
        ``"taylor"``.
      centers: ``(J, m)`` expansion points whose features are stacked (``J D_k`` rows; ours):
        matching them by least squares is a Hermite-type fit that does not need holomorphy on
        one ball around the centre. Rows are then scaled by ``(R J^(-1/m))^|alpha|``.
      auto_centers: with ``centers=None``, use the centre and ``+-`` half-way to the boundary
        along each axis (``J = 2 m + 1``, :func:`default_centers`).
      coordinates: ``"input"`` or ``"bottleneck"``: each hidden layer takes the activations of
        the narrowest earlier layer ``j`` (if narrower than ``d_in``) as coordinates, so
        ``m = d_j`` (the paper's architectural-bottleneck corollary); features are expanded at
        ``h^(j)(x0)`` and scaled by the radius of the image of the domain (from its Sobol
        points).
    """

    order: Any
    backend: str = "taylor"
    centers: jax.Array | None = None
    auto_centers: bool = False
    coordinates: str = "input"

    def __post_init__(self):
        where = "DerivativeFeatures"
        object.__setattr__(self, "order", _as_order(self.order, where))
        object.__setattr__(self, "coordinates", _check_coordinates(self.coordinates, where))
        if self.backend not in BACKENDS:
            raise ValueError(f"{where}: backend must be one of {BACKENDS}, got {self.backend!r}")
        multi = self.centers is not None or self.auto_centers
        if multi and self.backend != "taylor":
            raise ValueError(f"{where}: several centres need backend='taylor', got "
                             f"{self.backend!r}")

    @property
    def name(self) -> str:
        if self.centers is not None or self.auto_centers:
            return "taylor_multi"
        return self.backend

    def check(self, sizes, dtype, domain, where: str) -> None:
        self._check_common(sizes, where)
        param = domain.parameter_map is not None
        if param and self.backend != "taylor":
            raise ValueError(f"{where}: with a Parameterization domain derivative features need "
                             f"backend='taylor', got {self.backend!r}")
        if param and self.coordinates == "bottleneck":
            raise ValueError(f"{where}: coordinates='bottleneck' and a Parameterization domain "
                             "are two different coordinate changes; use one")
        dims = _coord_dims(_sources(self.coordinates, sizes, domain), sizes, domain)
        seconds = taylor_compile_cost(dims, self.orders(len(sizes) - 2), sizes[1:-1])[1]
        if seconds > COMPILE_SECONDS_LIMIT:
            raise ValueError(
                f"{where}: order {self.order} on {list(sizes)} would compile a Taylor pass for "
                f"about {seconds:.0f} s (estimated; the limit is "
                f"jaxcompress.features.COMPILE_SECONDS_LIMIT = {COMPILE_SECONDS_LIMIT:g} s). Lower "
                "the order, use an effective input dimension (coordinates='bottleneck' or a "
                "Parameterization domain), or jc.collocation(k), whose program does not grow "
                "with k")
        if self.centers is not None:
            shape = np.shape(self.centers)
            m = dims[0]
            if len(shape) != 2 or shape[1] != m or shape[0] < 1:
                raise ValueError(f"{where}: centers has shape {shape}; expected (J, {m}) "
                                 "expansion points" + (" of the parameter domain U"
                                                       if param else ""))

    def memory(self, sizes, itemsize: int, domain) -> dict[str, int]:
        """Bytes of the largest Taylor pass, of the features and of compiling the pass (an upper
        bound: :func:`taylor_compile_cost`).

        Only layers that select (``D_k < d_l``) are counted: a layer that keeps all its neurons
        needs no features (the Taylor pass still runs through it when a deeper layer selects).
        Per selecting layer the pass holds the two gathered operands and the product of each
        truncated multiplication (``3 C(2m + k, 2m)`` coefficients per neuron) and a few
        ``D_k x d_l`` arrays.
        """
        dims = _coord_dims(_sources(self.coordinates, sizes, domain), sizes, domain)
        orders = self.orders(len(sizes) - 2)
        n_c = self._num_centers(dims)
        live = [(m, k, w) for m, k, w in zip(dims, orders, sizes[1:-1], strict=True)
                if num_monomials(m, k) < w]
        if not live:
            return {}
        return {
            "Taylor pass": n_c * max((3 * math.comb(2 * m + k, 2 * m) + 3 * num_monomials(m, k))
                                     * w * itemsize for m, k, w in live),
            "features": n_c * itemsize * sum(num_monomials(m, k) * w for m, k, w in live),
            "compiling the Taylor pass": taylor_compile_cost(dims, orders, sizes[1:-1])[0],
        }

    def _num_centers(self, dims) -> int:
        if self.centers is None and not self.auto_centers:
            return 1
        return 2 * dims[0] + 1 if self.centers is None else int(np.shape(self.centers)[0])

    def _centers(self, domain, dtype) -> tuple[jax.Array, jax.Array, bool]:
        """``(expansion points (J, m), radius, several)``."""
        center, radius = domain.expansion(dtype)
        if self.centers is not None:
            return jnp.asarray(self.centers, dtype), radius, True
        if self.auto_centers:
            return default_centers(center, domain.half_widths(dtype)), radius, True
        return center[None], radius, False

    def of_values(self, values, layer, *, domain, dtype) -> LayerFeatures:
        """Taylor coefficients of ``values`` at the expansion point(s) by
        :func:`jax.experimental.jet` along fixed directions, then least squares per degree (the
        ``"jet"`` backend, for any program): row ``(alpha, r)`` is the coefficient of
        ``u^alpha`` of value ``r``, scaled by ``R^|alpha|`` (per centre ``(R J^(-1/m))^|alpha|``).
        """
        to_x, m = _input_coordinates(domain, dtype)
        order = _orders(self.order, layer, "compress", prefix=True)[layer - 1]
        pts, radius, multi = self._centers(domain, dtype)
        d_in = int(jax.eval_shape(to_x, jax.ShapeDtypeStruct((m,), dtype)).shape[0])
        r, width = _value_shape(values, d_in, dtype)

        def h(u):
            return values(to_x(u)[None])[0].reshape(-1)

        z = jnp.concatenate([monomial_taylor_of(h, c, order).reshape(-1, width) for c in pts])
        n_c = pts.shape[0]
        r_eff = radius * (float(n_c) ** (-1.0 / m) if multi else 1.0)
        deg = np.tile(np.repeat(monomials(m, order).sum(axis=1), r), n_c)
        return LayerFeatures(z=z, scale=jnp.asarray(r_eff, dtype) ** jnp.asarray(deg, dtype),
                             layer=layer, order=order, num_features=num_monomials(m, order),
                             coord_dim=m)

    def __call__(self, params, layers, *, activation, domain, placement=None
                 ) -> dict[int, LayerFeatures]:
        act = get_activation(activation)
        dtype = jnp.result_type(params[0]["kernel"])
        sizes = layer_sizes(params)
        sources = _sources(self.coordinates, sizes, domain)
        dims = _coord_dims(sources, sizes, domain)
        orders = self.orders(len(params) - 1, prefix=True)
        center, radius = domain.expansion(dtype)
        multi = self.centers is not None or self.auto_centers
        if multi:
            if self.centers is not None:
                pts = jnp.asarray(self.centers, dtype)
            else:
                pts = default_centers(center, domain.half_widths(dtype))
        else:
            pts = center[None]
        out = {}
        groups: dict[int, list[int]] = {}
        for l in layers:
            groups.setdefault(sources[l - 1], []).append(l)
        for src, group in groups.items():
            k = max(orders[l - 1] for l in group)
            top = max(group)
            m = dims[group[0] - 1]
            if src == 0 and not multi:
                # plain derivative matching at the domain's centre, any backend
                feats = derivative_features(list(params[:top]) + [params[top]], activation=act,
                                            order=k, backend=self.backend, center=center,
                                            placement=placement)
                feats = [f[None] for f in feats]
                r_src, first = radius, 0
            else:
                if src > 0:
                    to_z, r_src = _bottleneck_image(params, src, act, domain, center, dtype,
                                                      placement)
                    pts_c, body = to_z(pts), params[src:top]
                else:
                    r_src, pts_c, body = radius, pts, params[:top]
                first = max(src, 0)
                if self.backend != "taylor":  # only src > 0 reaches here (checked eagerly)
                    feats = derivative_features(list(params[src:top]) + [params[top]],
                                                activation=act, order=k, backend=self.backend,
                                                center=pts_c[0], placement=placement)
                    feats = [f[None] for f in feats]
                else:
                    def expand(c, src=src, body=body, k=k, m=m):
                        if src == -1:  # iota(u0 + t) is a polynomial of any degree
                            return propagate_polynomial(
                                parameterization_polynomial(domain.parameter_map, c, k), body,
                                activation=act, order=k, num_vars=m, placement=placement)
                        # the input or a layer's activations: the first layer is affine in them
                        return taylor_pass(c, body, activation=act, order=k,
                                           placement=placement)

                    feats = jax.vmap(expand)(pts_c)
            n_c = pts.shape[0]
            # J well-spread centres each cover a region of radius ~ r J^(-1/m): scale rows to it
            r_eff = r_src * (float(n_c) ** (-1.0 / m) if multi else 1.0)
            for l in group:
                d_k = num_monomials(m, orders[l - 1])
                z = feats[l - first - 1][:, :d_k]
                deg = np.tile(monomials(m, orders[l - 1]).sum(axis=1), z.shape[0])
                out[l] = LayerFeatures(
                    z=z.reshape(-1, z.shape[-1]),
                    scale=jnp.asarray(r_eff, dtype) ** jnp.asarray(deg, dtype),
                    layer=l, order=orders[l - 1], num_features=d_k, coord_dim=m)
        return out


#: Estimated compile time (seconds) past which derivative features are refused before
#: starting (:func:`taylor_compile_cost`); raise it on purpose for a long run.
COMPILE_SECONDS_LIMIT = 600.0


def taylor_compile_cost(dims, orders, widths) -> tuple[int, float]:
    r"""``(bytes, seconds)``: an upper model of compiling the Taylor pass (ours, measured).

    The pass is unrolled: per layer, ``k - 1`` truncated powers (``taylor.compose``), each embedding
    three index tables of at most ``C(2m + k, 2m)`` entries as constants, and a univariate series
    whose recursion (sigmoid, tanh: a Riccati convolution) has ``O(k^2)`` terms. Compile memory and
    time grow faster than the program: measured on a 2-core CPU (float64, XLA's default and the
    tests' flags), ``[1, 128, 128, 1]`` at k = 20 / 30 / 50 grew the process by 46 / 94 / 344 MB and
    compiled for 4 / 21 / 26 s, ``[2, 64, 64, 1]`` at k = 2 / 6 / 8 by 9 / 15 / 20 MB. The model,
    with ``L`` the layers the pass runs through (up to the deepest layer that selects, ``D_k <
    d_l``; none: no cost) and ``k`` the largest order among them, is

    .. math::
       \text{bytes} = L\,\Big(1500\,k^3 + 4 \cdot 10^4\,k^2
       + 48\,k \binom{2m + k}{2m}\Big), \qquad
       \text{seconds} = L\,(10^{-4} k^3 + 0.5);

    with the :data:`~jaxcompress.compression.COMPILE_BYTES` that compiling any compression
    costs, it lies above every measurement (``tests/test_memory.py`` checks it against the peak
    resident memory of ``compress``). The time is this machine's; it is used only to refuse,
    before starting, a call that would compile for many minutes
    (:data:`COMPILE_SECONDS_LIMIT`).
    """
    live = [l for l, (m, k, w) in enumerate(zip(dims, orders, widths, strict=True))
            if num_monomials(m, k) < w]
    if not live:
        return 0, 0.0
    top = max(live) + 1
    k = max(orders[:top])
    m = max(dims[:top])
    per_layer = 1500 * k**3 + 40_000 * k**2 + 48 * k * math.comb(2 * m + k, 2 * m)
    return top * per_layer, top * (1e-4 * k**3 + 0.5)


def _point_layer_features(params, layers, x, orders, dims, n_points, act, trim: bool,
                          placement, num_features=None):
    hs = point_features(params, x, activation=act, upto=max(layers), placement=placement)
    out = {}
    for l in layers:
        z = hs[l - 1]
        if trim:
            z = z[: n_points[l - 1]]  # Sobol prefixes are the smaller point sets
        out[l] = LayerFeatures(z=z, scale=None, layer=l, order=orders[l - 1],
                               num_features=(num_monomials(dims[l - 1], orders[l - 1])
                                             if num_features is None else num_features[l - 1]),
                               coord_dim=dims[l - 1])
    return out


@functools.partial(jax.tree_util.register_dataclass, data_fields=[],
                   meta_fields=["order", "oversample", "nodes", "coordinates", "widths",
                                "gradients"])
@dataclasses.dataclass(frozen=True)
class CollocationFeatures(_OrderedFeatureMap):
    """Activations at ``N = oversample * max(D_k, n_l)`` nodes of the domain (data-free; ours).

    ``Z[p, i] = h_i^(l)(x_p)``; every layer uses a prefix of one node sequence (Sobol nodes of a
    ball or box, or ``iota`` of ``U``'s nodes for a :class:`~jaxcompress.Parameterization`).
    ``n_l`` is the width the method keeps (``widths=``; by default ``min(D_k, d_l) <= D_k``), so
    the nodes always outnumber the kept neurons ``oversample`` times: a width above ``D_k`` gets
    more nodes rather than a least-squares fit with as many unknowns as equations.

    Args:
      order: ``k``, one int or one per hidden layer: it sets ``D_k`` (the default widths) and,
        with the widths, the number of nodes.
      oversample: nodes per feature (or per kept neuron, when more are kept than ``D_k``).
      nodes: ``"sobol"`` (every domain), ``"chebyshev"`` or ``"chebyshev_grid"`` (boxes only; see
        :meth:`jaxcompress.Box.nodes`).
      coordinates: ``"input"`` or ``"bottleneck"`` (only ``D_k``, hence ``N`` and the widths,
        change).
      widths: the kept widths ``n_l`` (set by :class:`~jaxcompress.Method` from its
        ``widths=``; ``None``: the default widths).
      gradients: also match the activations' first derivatives at the nodes,
        ``Z[(p, j), i] = d h_i / d x_j (x_p)`` beside the values (``(1 + d_in) N`` rows; ours);
        ``None`` (default): when ``fn`` differentiates the network (``jax.grad`` inside it).
    """

    order: Any
    oversample: int = 4
    nodes: str = "sobol"
    coordinates: str = "input"
    widths: tuple[int, ...] | None = None
    gradients: bool | None = None
    refit = True
    name = "collocation"

    def __post_init__(self):
        where = "CollocationFeatures"
        object.__setattr__(self, "order", _as_order(self.order, where))
        object.__setattr__(self, "coordinates", _check_coordinates(self.coordinates, where))
        if isinstance(self.oversample, bool) or not isinstance(self.oversample,
                                                               (int, np.integer)) \
                or self.oversample < 1:
            raise ValueError(f"{where}: oversample must be a positive int, got "
                             f"{self.oversample!r}")
        if self.nodes not in NODE_KINDS:
            raise ValueError(f"{where}: nodes must be one of {NODE_KINDS}, got {self.nodes!r}")

    def with_widths(self, widths: tuple[int, ...] | None) -> CollocationFeatures:
        return dataclasses.replace(self, widths=None if widths is None else tuple(widths))

    def node_count(self, d_k: int, layer: int) -> int:
        """``N = oversample * max(D_k, n_l)`` for hidden ``layer`` (1-based) with ``D_k``
        features."""
        width = 0 if self.widths is None or layer > len(self.widths) else self.widths[layer - 1]
        return self.oversample * max(d_k, width)

    def n_points(self, sizes, domain) -> tuple[int, ...]:
        return tuple(self.node_count(dk, l) for l, dk in
                     enumerate(self.num_features(sizes, domain), start=1))

    def of_values(self, values, layer, *, domain, dtype) -> LayerFeatures:
        """``values`` at the :meth:`node_count` nodes of the domain."""
        _, m = _input_coordinates(domain, dtype)
        order = _orders(self.order, layer, "compress", prefix=True)[layer - 1]
        x = domain.nodes(self.node_count(num_monomials(m, order), layer), self.nodes, dtype)
        return _point_features_of(values, x, layer, order, m, gradients=bool(self.gradients))

    def for_program(self, differentiates: bool) -> tuple[CollocationFeatures, bool]:
        return _resolve_gradients(self, differentiates)

    def check(self, sizes, dtype, domain, where: str) -> None:
        self._check_common(sizes, where)
        if self.nodes not in domain.node_kinds:
            raise ValueError(f"{where}: nodes={self.nodes!r} needs a Box domain (a ball only has "
                             "Sobol nodes)")

    def memory(self, sizes, itemsize: int, domain) -> dict[str, int]:
        """Bytes of the activations of every layer at the nodes."""
        n = max(self.n_points(sizes, domain))
        return {"activations at the nodes": n * (sum(sizes[1:-1]) + sizes[0]) * itemsize}

    def __call__(self, params, layers, *, activation, domain, placement=None
                 ) -> dict[int, LayerFeatures]:
        if self.gradients:
            return super().__call__(params, layers, activation=activation, domain=domain,
                                    placement=placement)
        act = get_activation(activation)
        dtype = jnp.result_type(params[0]["kernel"])
        sizes = layer_sizes(params)
        dims = _coord_dims(_sources(self.coordinates, sizes, domain), sizes, domain)
        n_points = self.n_points(sizes, domain)
        x = domain.nodes(max(n_points[l - 1] for l in layers), self.nodes, dtype)
        orders = self.orders(len(params) - 1, prefix=True)
        return _point_layer_features(params, layers, x, orders, dims, n_points, act,
                                     trim=self.nodes != "chebyshev_grid", placement=placement)


def _resolve_gradients(fmap, differentiates: bool):
    """:meth:`FeatureMap.for_program` of a point map: ``gradients=None`` resolved for a
    network whose ``fn`` does (not) differentiate it, and left to the driver."""
    want = bool(differentiates) if fmap.gradients is None else bool(fmap.gradients)
    return dataclasses.replace(fmap, gradients=False), want


#: ``LayerInfo.order`` of data matching without an order (widths from ``widths=`` or ``rtol=``).
NO_ORDER = -1


@functools.partial(jax.tree_util.register_dataclass, data_fields=["x", "x_eval"],
                   meta_fields=["order", "coordinates", "holdout", "rtol", "widths",
                                "gradients"])
@dataclasses.dataclass(frozen=True)
class DataFeatures(_OrderedFeatureMap):
    """Activations at user inputs ``x`` (``(N, d_in)``; Chee et al. 2022).

    ``Z[p, i] = h_i^(l)(x_p)``: the features of a neuron are its values at the data, so selection
    keeps neurons whose values span the others' on the data, and the next layer is re-fitted there.
    Nothing here depends on the input dimension: a network of 32 or 256 inputs whose data lie
    near an ``m``-dimensional manifold has features of numerical rank set by ``m``
    (:func:`jaxcompress.data_profile` measures it).

    Args:
      x: the inputs (traced), real and finite: lists are converted, complex or non-finite
        values are a ``TypeError`` / ``ValueError`` when ``x`` is concrete. Traced data that
        holds NaN or Inf makes every feature NaN, so the compression's ``error_estimate`` is
        NaN (a traced value cannot raise).
      order: ``k`` (one int or one per hidden layer): sets ``D_k`` and so the default widths
        ``min(D_k, d_l)``; meaningful for few inputs. ``None`` (the default of
        :func:`~jaxcompress.data_matching`): no order, the widths come from ``widths=`` or
        ``rtol``, and ``D`` is the number of rows fitted on (``LayerInfo.order`` is
        :data:`NO_ORDER`).
      coordinates: ``"input"`` or ``"bottleneck"`` (changes ``D_k`` only).
      x_eval: held-out inputs for the error estimate and every measurement when the compression
        is given no domain (the domain is then :class:`~jaxcompress.Points` of the data).
      holdout: without ``x_eval`` and without a domain, every ``round(1 / holdout)``-th row of
        ``x`` is held out for the estimate and the others are fitted on (ours; ``0``: fit on
        every row, and the estimate is then measured on the fitted rows).
      rtol: the widths as the numerical rank of each layer's data features (singular values
        above ``rtol`` times the largest), measured on the teacher before compressing
        (:func:`jaxcompress.data_profile`; needs concrete parameters and data).
      widths: set by :class:`~jaxcompress.Method` from its ``widths=``.
      gradients: also match the activations' first derivatives at the data (as
        :class:`CollocationFeatures`; ``None``: when ``fn`` differentiates the network).
    """

    x: jax.Array
    order: Any = None
    coordinates: str = "input"
    x_eval: jax.Array | None = None
    holdout: float = 0.125
    rtol: float | None = None
    widths: tuple[int, ...] | None = None
    gradients: bool | None = None
    refit = True
    name = "data"

    def __post_init__(self):
        where = "data_matching"
        if self.order is not None:
            object.__setattr__(self, "order", _as_order(self.order, where))
        object.__setattr__(self, "coordinates", _check_coordinates(self.coordinates, where))
        for field in ("x", "x_eval"):
            v = getattr(self, field)
            # lists and concrete arrays are user input; other leaves (tracers, pytree
            # placeholders) pass through
            if isinstance(v, (list, tuple)) or (
                    isinstance(v, (np.ndarray, jax.Array)) and is_concrete(v)):
                v = as_real_array(v, where, field)
                check_finite(v, where, field)
                object.__setattr__(self, field, v)
        h = self.holdout
        if isinstance(h, bool) or not isinstance(h, (int, float, np.floating, np.integer)) or \
                not 0 <= float(h) < 1:
            raise ValueError(f"{where}: holdout must be a fraction in [0, 1), got {h!r}")
        if self.rtol is not None and not (isinstance(self.rtol, (int, float, np.floating))
                                          and 0 < float(self.rtol) < 1):
            raise ValueError(f"{where}: rtol must be a number in (0, 1), got {self.rtol!r}")

    def with_widths(self, widths) -> DataFeatures:
        return dataclasses.replace(self, widths=None if widths is None else tuple(widths))

    def describe_order(self) -> Any:
        return self.order if self.order is not None else (
            f"rtol={self.rtol:g}" if self.rtol is not None else "widths")

    def orders(self, n_hidden: int, where: str = "compress", *, prefix: bool = False
               ) -> tuple[int, ...]:
        if self.order is None:
            return (NO_ORDER,) * n_hidden
        return super().orders(n_hidden, where, prefix=prefix)

    def with_skipped(self, skipped: Sequence[bool]) -> FeatureMap:
        return self if self.order is None else super().with_skipped(skipped)

    def num_features(self, sizes, domain) -> tuple[int, ...]:
        """``D_k`` per hidden layer; without an order, the number of rows fitted on."""
        if self.order is None:
            return (int(np.shape(self.x)[0]),) * (len(sizes) - 2)
        return super().num_features(sizes, domain)

    def split(self):
        """``(fit, held_out)``: the rows fitted on and the rows the estimate is measured on
        without a domain (``x_eval``, or every ``round(1 / holdout)``-th row of ``x``, or ``x``
        itself with ``holdout = 0``)."""
        if self.x_eval is not None:
            return self.x, self.x_eval
        n = int(np.shape(self.x)[0])
        stride = round(1.0 / self.holdout) if self.holdout > 0 else 0
        if stride < 2 or n < 2 * stride:
            return self.x, self.x
        rows = np.arange(n)
        held = rows % stride == stride - 1
        return self.x[rows[~held]], self.x[rows[held]]

    def memory(self, sizes, itemsize: int, domain) -> dict[str, int]:
        """Bytes of the activations of every layer at the data."""
        return {"activations at the data": int(np.shape(self.x)[0]) * (sum(sizes[1:-1])
                                                                        + sizes[0]) * itemsize}

    def check(self, sizes, dtype, domain, where: str) -> None:
        if self.order is not None:
            self._check_common(sizes, where)
        self.check_shapes(sizes[0], where)

    def check_shapes(self, d: int, where: str) -> None:
        """``x`` and ``x_eval`` are ``(N, d)`` arrays with ``N >= 1``."""
        for name in ("x", "x_eval"):
            v = getattr(self, name)
            if v is None:
                continue
            shape = np.shape(v)
            if len(shape) != 2 or shape[1] != d or shape[0] < 1:
                raise ValueError(f"{where}: {'data' if name == 'x' else name} has shape {shape}; "
                                 f"expected (N, {d}) with N >= 1 (the network takes inputs of "
                                 f"size {d})")

    def _data(self, dtype) -> jax.Array:
        # traced data cannot be refused: non-finite data poisons every feature, so the result
        # says so (a NaN error estimate) instead of looking plausible
        if is_concrete(self.x):   # on the host: op by op, each shape compiled three programs
            x = np.asarray(self.x).astype(dtype)
            return jax.device_put(x if np.all(np.isfinite(x)) else np.full_like(x, np.nan))
        x = jnp.asarray(self.x, dtype)
        return jnp.where(jnp.all(jnp.isfinite(x)), x, jnp.nan)

    def of_values(self, values, layer, *, domain, dtype) -> LayerFeatures:
        """``values`` at the data."""
        _, m = _input_coordinates(domain, dtype)
        order = self.orders(layer, "compress", prefix=True)[layer - 1]
        return _point_features_of(values, self._data(dtype), layer, order, m,
                                  self._num_features(m, order), gradients=bool(self.gradients))

    def for_program(self, differentiates: bool) -> tuple[DataFeatures, bool]:
        return _resolve_gradients(self, differentiates)

    def _num_features(self, m: int, order: int) -> int:
        return int(np.shape(self.x)[0]) if order == NO_ORDER else num_monomials(m, order)

    def __call__(self, params, layers, *, activation, domain, placement=None
                 ) -> dict[int, LayerFeatures]:
        if self.gradients:
            return super().__call__(params, layers, activation=activation, domain=domain,
                                    placement=placement)
        act = get_activation(activation)
        dtype = jnp.result_type(params[0]["kernel"])
        sizes = layer_sizes(params)
        dims = _coord_dims(_sources(self.coordinates, sizes, domain), sizes, domain)
        orders = self.orders(len(params) - 1, prefix=True)
        return _point_layer_features(params, layers, self._data(dtype), orders, dims, None, act,
                                     trim=False, placement=placement,
                                     num_features=[self._num_features(m, k)
                                                   for m, k in zip(dims, orders, strict=False)])


