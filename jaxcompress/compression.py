"""``jc.compress``: every network, every method, through the one driver.

:func:`compress` takes a params list (with ``activation=``), a network from
:func:`jaxcompress.trace` or :func:`jaxcompress.trace_module`, a compressed result or a loaded
file, hands it to the one
driver (:mod:`jaxcompress.driver`) through its :class:`~jaxcompress.Network` and returns the same
kind of thing it was given, smaller: a params list, or a :class:`~jaxcompress.Compressed` (its
module form for a module). Hidden widths depend only on static configuration, so :func:`compress`
composes with ``jax.jit`` and ``jax.vmap`` (e.g. over a stack of teachers); neurons beyond the
numerical rank get zero outgoing weight and :func:`trim` removes them on the host. ``jax.grad``
and ``jax.jvp`` through :func:`compress` give the derivative with the kept neurons and the
numerical rank held fixed (the selection is piecewise constant in the parameters);
``tests/test_derivatives.py`` checks it against finite differences.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress import sharding
from jaxcompress._checks import (
    check_compute_dtype,
    check_finite,
    check_info_matches,
    finite_number,
)
from jaxcompress.activations import get_activation
from jaxcompress.domains import Ball, check_domain, check_radius
from jaxcompress.driver import run_any, run_jit
from jaxcompress.graph import Compressed, Network
from jaxcompress.graph.match import refuse_kinks
from jaxcompress.graph.plan import Plan
from jaxcompress.layer import CompressInfo, LayerInfo, compress_layer
from jaxcompress.methods import BestOf, Method, default_domain, derivative_matching
from jaxcompress.mlp import Params, require_single_network, validate_params
from jaxcompress.networks import as_network, network_placement
from jaxcompress.placement import Placement
from jaxcompress.planning import check_method, resolve_widths
from jaxcompress.profile import rank_widths
from jaxcompress.protocol import NetworkLike

__all__ = ["CompressInfo", "LayerInfo", "compress", "compress_layer", "compress_network",
           "compressed_like", "compressor", "trim", "trim_info"]


#: Method factories by name (for the message of ``compress(params, "collocation", ...)``).
_FACTORIES = ("derivative_matching", "collocation", "data_matching", "best_of")

def compress(
    params: Any,
    method: Method | BestOf | None = None,
    *,
    activation=None,
    domain=None,
    order: int | Sequence[int] | None = None,
    radius: float | None = None,
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
      params: the teacher: a list of ``{"kernel": (fan_in, fan_out), "bias": (fan_out,)}``
        (one network; wrap in ``jax.vmap`` for a stack), or any network: from
        :func:`jaxcompress.trace` or :func:`jaxcompress.trace_module`, a compressed result, a
        loaded file (then no ``activation=``: the network carries its own).
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
      ``(small, info)``: the compressed network (same depth, hidden widths ``min(D_k, d_l)`` or
      the method's), as what was given: a params list for a params list (or a loaded one), a
      :class:`~jaxcompress.Compressed` for a traced network (a
      :class:`~jaxcompress.modules.CompressedModule` for a module); and a :class:`CompressInfo`
      with,
      per layer, the kept indices, numerical rank, matching residual of Eq. (41),
      ``max |C_ij|``, and the error estimate on fixed Sobol points of the domain.

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
    if method is not None and not isinstance(method, (Method, BestOf)):
        hint = (f"; for the method {method!r} write jc.{method}(k)"
                if isinstance(method, str) and method in _FACTORIES else "")
        raise TypeError(f"{where}: method must be a jc.Method or jc.best_of(...) (e.g. "
                        f"jc.derivative_matching(k)), got {type(method).__name__} "
                        f"{method!r:.60}{hint}")
    if isinstance(params, NetworkLike):
        net = as_network(params, activation=activation, where=where)
        _check_finite_leaves(net, where)
    else:
        if activation is None:
            raise TypeError(f"{where}: activation= is required for a params list (a registered "
                            "name such as 'tanh'); only a network from jc.trace carries its own")
        params = validate_params(params, where=where)
        require_single_network(params, where=where,
                               hint="wrap compress in jax.vmap for a stack of networks")
        net = Network.from_params(params, get_activation(activation))
    check_compute_dtype(net.x.dtype, where)
    method, domain = _shorthand(method, domain, order, radius, int(net.x.shape[-1]), where)
    placement = network_placement(net)
    if placement is not None:
        for m in method.methods if isinstance(method, BestOf) else (method,):
            sharding.check_selector(m.selector, where)
    small, info = compress_network(net, method, domain, placement, where)
    return compressed_like(params, net, small, info, domain), info


def _checked(net: Network, method, domain, where: str, placement) -> Any:
    """The eager checks of a compression (at trace time, before anything compiles); returns
    the method (widths from the data's ranks where it asks for them) and the domain (default:
    the unit ball, or the data for data matching: :func:`~jaxcompress.methods.default_domain`)."""
    if not isinstance(method, (Method, BestOf)):
        raise TypeError(f"{where}: a network needs a method (e.g. jc.collocation(k)), got "
                        f"{type(method).__name__} {method!r:.60}")
    if not net.compressible:
        raise ValueError(f"{where}: the network has no compressible group:\n" + str(net))
    dtype = net.x.dtype
    method, domain = default_domain(method, domain, int(net.x.shape[-1]), where)
    check_domain(domain, net.x.shape[-1], where, dtype)
    method = rank_widths(net, method, where)
    methods = method.methods if isinstance(method, BestOf) else (method,)
    if net.kind == "traced":
        refuse_kinks(net.compressible, methods, where, dtype)
    check_method(method, net.plan(), domain, where,
                 devices=1 if placement is None else placement.devices,
                 set_names=net.set_names())
    return method, domain


def _same_widths(plan: Plan, methods, domain) -> bool:
    return len({resolve_widths(m, plan.sizes, domain) for m in methods}) == 1


def compress_network(net: Network, method, domain=None, placement: Placement | None = None,
                     where: str = "compress") -> tuple[list, CompressInfo]:
    """The compressed leaves of ``net`` and the record: checked eagerly, then the one driver in
    one ``jax.jit`` (a best-of whose candidates' widths differ picks on the host)."""
    method, domain = _checked(net, method, domain, where, placement)
    plan = net.plan()
    if isinstance(method, BestOf) and not _same_widths(plan, method.methods, domain):
        results = [run_jit(net.leaves, m, domain, plan=plan, placement=placement)
                   for m in method.methods]
        est = [float(info.error_estimate) for _, info in results]
        choice = int(np.argmin([e if np.isfinite(e) else np.inf for e in est]))
        small, info = results[choice]
        return small, dataclasses.replace(
            info, method=method.describe(), choice=jnp.asarray(choice, jnp.int32),
            candidates=tuple(m.describe() for m in method.methods))
    return run_jit(net.leaves, method, domain, plan=plan, placement=placement)


def compressor(net, method, *, domain=None, activation=None
               ) -> Callable[[Any], tuple[Any, CompressInfo]]:
    """A pure function ``params -> (small_params, info)`` of a network's structure, checked once
    here, for ``jax.vmap`` over a stack of teachers or ``jax.jit``: ``params`` is a pytree of the
    network's structure (its own parameters, or a stack of teachers' along a leading axis under
    ``vmap``), ``small_params`` the same pytree with smaller leaves.

    Example: ``jax.vmap(jc.compressor(net, jc.collocation(3)))(stacked_params)``. The function
    is jitted, so a bare ``jax.vmap`` of it runs one program (inside your own ``jax.jit`` it is
    inlined).
    """
    where = "compressor"
    net = as_network(net, activation=activation, where=where)
    method, domain = _checked(net, method, domain, where, placement=None)
    plan, treedef = net.plan(), jax.tree_util.tree_structure(net.params)
    if isinstance(method, BestOf) and not _same_widths(plan, method.methods, domain):
        raise ValueError(f"{where}: best_of under a pure function needs candidates of equal "
                         "widths (the choice is made per teacher, inside the program); give "
                         "them the same order or widths=")

    def compress_params(params):
        small, info = run_any(plan, method, jax.tree_util.tree_leaves(params), domain, None)
        return jax.tree_util.tree_unflatten(treedef, small), info

    # jitted: under a bare jax.vmap it ran op by op, a program per operation (145 for a
    # [2, 16, 16, 1] teacher), where it is one; inside the caller's jit it is inlined
    return jax.jit(compress_params)


def _shorthand(method, domain, order, radius, d: int, where: str):
    """The method and domain of a call: given, or the paper's one-liner ``order=`` (and
    ``radius=``) for ``derivative_matching(order)`` on ``Ball(d_in, radius)``."""
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
        return method, Ball(d, 1.0 if radius is None else radius) if domain is None else domain
    if order is not None or radius is not None:
        raise ValueError(f"{where}: order= and radius= are the shorthand for "
                         "derivative_matching; with a method, the order is the method's and "
                         "the ball is domain=jc.Ball(d_in, R)")
    return default_domain(method, domain, d, where)


def _check_finite_leaves(net: Network, where: str) -> None:
    """Refuse a network with a NaN or Inf parameter, naming the leaf by its path and the first
    bad index (concrete leaves on this host; a traced or multi-host leaf passes)."""
    for path, leaf in zip(net.paths, net.leaves, strict=True):
        if isinstance(leaf, jax.core.Tracer):   # under jit: the estimate says NaN instead
            continue
        remote = isinstance(leaf, jax.Array) and not leaf.is_fully_addressable
        if not remote and jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            check_finite(leaf, where, f"the parameter {path or 'leaf'}")


def compressed_like(obj, net: Network, small, info: CompressInfo | None, domain=None):
    """The compressed leaves ``small`` of ``net`` (``obj``'s network) as what
    :func:`compress` returns for ``obj``: a params list for a params list, else what the kind
    answers (:meth:`~jaxcompress.protocol.NetworkLike.compressed_as`: a
    :class:`~jaxcompress.Compressed`, a module's :class:`~jaxcompress.modules.CompressedModule`, a
    params list for a loaded params list)."""
    if isinstance(obj, NetworkLike):
        return obj.compressed_as(net, list(small), info, domain)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(net.params), small)


def trim(net: Params | Compressed, *, atol: float = 0.0) -> Params | Compressed:
    """Drop the neurons whose outgoing weights are all zero (host side, not jit-able).

    A params list gives a params list, a :class:`~jaxcompress.Compressed` a ``Compressed``
    (every compressible set's neurons whose reading rows are all zero dropped from its producers
    and readers, and its ``info`` trimmed with it: :func:`trim_info`).

    Such neurons are the surplus ones past the numerical rank (their incoming weights are kept by
    :func:`compress` so widths stay static). The function computed is unchanged; widths shrink.

    ``atol >= 0`` (finite) also drops neurons whose outgoing weights are all at most ``atol`` in
    absolute value (the function then changes by up to ``atol`` per such neuron and output). An
    ``atol`` that would drop every neuron of a set with a nonzero outgoing weight is a
    ``ValueError`` naming the set and its largest weight (it would leave a width-1 network with
    nothing of the function).

    >>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1])
    >>> params[0] = {"kernel": jnp.tile(params[0]["kernel"][:, :2], (1, 4)),
    ...              "bias": jnp.tile(params[0]["bias"][:2], 4)}  # 2 neurons, 4 copies of each
    >>> small, info = jc.compress(params, activation="tanh", order=2)   # D_2 = 6 kept, rank 2
    >>> jc.layer_sizes(jc.trim(small))
    [2, 2, 1]
    """
    plan, leaves, names, comp = _trimmable(net, "trim")
    masks = _trim_masks(plan, leaves, atol, names, "trim")
    small = jax.tree_util.tree_unflatten(plan.treedef, plan.restrict(leaves, masks))
    if comp is None:
        return small
    info = None if comp.info is None else _trimmed_info(comp.info, masks, "trim")
    return dataclasses.replace(comp, params=small, info=info)


def trim_info(info: CompressInfo, params: Params | Compressed, *,
              atol: float = 0.0) -> CompressInfo:
    """The record of ``trim(params, atol=atol)``, for ``info`` the record of ``params``.

    Each layer keeps the entries of ``kept`` of the neurons that stay (neuron ``i`` of the
    compressed layer is neuron ``kept[i]`` of the teacher's), its ``width_out`` becomes the new
    width and its ``rank`` at most that; everything else is unchanged. Use it to save or print a
    trimmed params list with its record (a trimmed :class:`~jaxcompress.Compressed` carries
    its own):

    >>> from jaxcompress.compression import trim_info
    >>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1])
    >>> params[0] = {"kernel": jnp.tile(params[0]["kernel"][:, :2], (1, 4)),
    ...              "bias": jnp.tile(params[0]["bias"][:2], 4)}
    >>> small, info = jc.compress(params, activation="tanh", order=2)
    >>> [(layer.width_out, int(layer.rank)) for layer in trim_info(info, small).layers]
    [(2, 2)]
    """
    plan, leaves, names, comp = _trimmable(params, "trim_info")
    masks = _trim_masks(plan, leaves, atol, names, "trim_info")
    if comp is None:
        check_info_matches(info, plan.sizes, None, "trim_info")
    return _trimmed_info(info, masks, "trim_info")


def _trimmable(net, where: str):
    """``(plan, leaves, set names, the compressed result or None)`` of a network to trim: a
    compressed result, or a params list (its chain's plan; which neurons are read does not
    depend on the activation, so the identity stands in for it)."""
    if isinstance(net, Compressed):
        return (net.network.plan(), jax.tree_util.tree_leaves(net.params),
                net.network.set_names(), net)
    params = validate_params(net, where=where)
    if params[0]["kernel"].ndim != 2:
        raise ValueError(f"{where}: expected one network (2-D kernels); trim each network "
                         "separately")
    chain = Network.from_params(params, "identity")
    return chain.plan(), chain.leaves, chain.set_names(), None


def _trim_masks(plan: Plan, leaves, atol, names, where: str) -> list[np.ndarray]:
    """Per set, which neurons :func:`trim` keeps (those a reading row needs above ``atol``)."""
    atol = _atol(atol, where)
    masks = []
    for name, norms in zip(names, plan.reading_norms(leaves), strict=True):
        keep = norms > atol
        if not keep.any():
            largest = float(np.max(norms, initial=0.0))
            if largest > 0:
                raise ValueError(f"{where}: atol={atol:g} drops every neuron of {name} (its "
                                 f"largest outgoing weight is {largest:.3g}); expected an atol "
                                 "below the weights that carry the function (atol=0 drops only "
                                 "the neurons past the rank)")
            keep[0] = True  # keep one neuron so the network stays well-formed
        masks.append(keep)
    return masks


def _trimmed_info(info: CompressInfo, masks, where: str) -> CompressInfo:
    if len(masks) != len(info.layers):
        raise ValueError(f"{where}: info has {len(info.layers)} records; the network has "
                         f"{len(masks)} compressible sets (info belongs to another network)")
    layers = []
    for li, keep in zip(info.layers, masks, strict=True):
        width = int(keep.sum())
        layers.append(dataclasses.replace(
            li, kept=np.asarray(li.kept)[keep], width_out=width,
            rank=np.minimum(np.asarray(li.rank), width).astype(np.int32)))
    return dataclasses.replace(info, layers=tuple(layers))


def _atol(atol, where: str) -> float:
    if not finite_number(atol) or float(atol) < 0:
        raise ValueError(f"{where}: atol must be one finite number >= 0, got {atol!r}")
    return float(atol)
