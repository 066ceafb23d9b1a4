"""Every kind of network the library takes, at one dispatch point: :func:`as_network`.

A params list ``[{"kernel", "bias"}, ...]`` (with ``activation=``) is the one input that is not
a :class:`~jaxcompress.protocol.NetworkLike`; here it becomes one
(:meth:`Network.from_params <jaxcompress.Network.from_params>`, the chain built directly). Every
other kind answers the protocol itself:

===============================================  ================================================
what you have                                     its :class:`~jaxcompress.Network`
===============================================  ================================================
a params list ``[{"kernel", "bias"}, ...]``       :meth:`Network.from_params` (``activation=``)
``jc.trace(fn, params, x)``                       itself
``jc.trace_module(model, x)``                     its ``.network`` (the module rebuilt on the way
                                                  back)
a :class:`~jaxcompress.Compressed` result         ``fn`` traced at the new widths
``jc.load(path)`` of a params list                the params list's
``jc.load(path)`` of a traced network             its stored chain of dense layers, if it is one
===============================================  ================================================

The verbs call :func:`network_like` (or :func:`as_network` for the representation itself) and
then ask the protocol (``net.function()``, ``net.compressed_as(...)``, ``net.layer_sizes()``),
never which kind they hold.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxcompress import sharding
from jaxcompress._checks import describe
from jaxcompress.graph import Network
from jaxcompress.mlp import validate_params
from jaxcompress.placement import Placement
from jaxcompress.protocol import NetworkLike

__all__ = ["as_network", "network_like", "network_placement", "shard"]


def network_like(obj: Any, *, activation=None, where: str = "compress",
                 check_finite: bool = True) -> NetworkLike:
    """Any network as a :class:`~jaxcompress.protocol.NetworkLike`: a params list (with
    ``activation=``, validated) as its :class:`~jaxcompress.Network`, any other kind as it is
    (``activation=`` only where it carries none: a ``ValueError`` otherwise)."""
    if isinstance(obj, NetworkLike):
        obj.check_activation(activation, where)
        return obj
    if activation is None:
        raise TypeError(f"{where}: activation= is required for a params list (a registered "
                        "name such as 'tanh'); a network from jc.trace or jc.trace_module "
                        f"carries its own. Got {describe(obj)}")
    return Network.from_params(validate_params(obj, where=where, check_finite=check_finite),
                               activation)


def as_network(obj: Any, *, activation=None, where: str = "compress") -> Network:
    """The :class:`~jaxcompress.Network` of any network (see the module docstring);
    ``activation=`` only for a params list, else a ``ValueError``."""
    net = network_like(obj, activation=activation, where=where)
    try:
        return net.as_network()
    except ValueError as e:   # a file whose program cannot be read: say where
        raise ValueError(f"{where}: {e}") from None


def network_placement(net: Network) -> Placement | None:
    """Where a network's neurons live, from its leaves' shardings (:func:`shard`), or ``None``."""
    plan = net.plan()
    if not plan.sets:
        return None
    p = plan.sets[0].producers[0]
    return sharding.leaves_placement(net.leaves, p.leaf, p.axis)


def shard(net, mesh: Mesh, axis: str = sharding.NEURONS):
    """Place every compressible neuron group of a network across the mesh axis ``axis``.

    A params list is placed as :func:`jaxcompress.sharding.shard` says (each device holds
    ``1/n`` of every kernel and hidden bias). A network to compress (a traced network or
    module) comes back as the same kind of network with its leaves placed: every leaf that
    produces a compressible set's neurons split along its neuron axis, every kernel that reads
    one split along its rows, the rest replicated; :func:`jaxcompress.compress` on it runs
    sharded and keeps the neurons one device keeps (the selectors' distributed forms). Widths
    must be divisible by the axis size.
    """
    if not isinstance(net, NetworkLike):
        return sharding.shard(net, mesh, axis)
    if not net.placeable:
        raise TypeError(f"shard: place the network to compress ({type(net).__name__} is a "
                        "result or a file: compress it, or shard its network as_network())")
    inner = net.as_network()
    plan = inner.plan()
    n_dev = mesh.shape[axis] if isinstance(mesh, Mesh) and axis in mesh.axis_names else 1
    bad = [(name, s.width) for name, s in zip(inner.set_names(), plan.sets, strict=True)
           if s.width % n_dev]
    if bad:
        names = ", ".join(f"{n} (width {w})" for n, w in bad)
        raise ValueError(f"shard: the compressible sets' widths must be divisible by the {n_dev} "
                         f"devices of axis {axis!r}; {names} are not")
    # a kernel that reads one set and produces another is split along its rows when they divide
    # evenly (a concatenated input's rows may not), else along its columns
    leaves = inner.leaves
    split = {p.leaf: p.axis for s in plan.sets for p in s.producers}
    split.update({r.leaf: r.axis for s in plan.sets for r in s.readers
                  if np.shape(leaves[r.leaf])[r.axis] % n_dev == 0 or r.leaf not in split})
    leaves = sharding.place_leaves(leaves, split, mesh, axis)
    return net.with_params(jax.tree_util.tree_unflatten(
        jax.tree_util.tree_structure(inner.params), leaves))
