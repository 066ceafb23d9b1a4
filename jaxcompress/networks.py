"""Every kind of network the library takes, as the one representation: :func:`as_network`.

The front ends, in one place:

===============================================  ================================================
what you have                                     its :class:`~jaxcompress.Network`
===============================================  ================================================
a params list ``[{"kernel", "bias"}, ...]``       :meth:`Network.from_params` (``activation=``)
``jc.trace(fn, params, x)``                       itself
``jc.trace_module(model, x)``                     its ``.network`` (the module rebuilt on the way
                                                  back)
a :class:`~jaxcompress.Compressed` result         :meth:`Compressed.as_network` (``fn`` traced at
                                                  the new widths)
``jc.load(path)`` of a params list                the params list's
``jc.load(path)`` of a traced network             its stored chain of dense layers, if it is one
===============================================  ================================================

:func:`network_function` gives any of them, or a plain callable, as a function ``f(x)``: what the
measurements (:func:`jaxcompress.sup_error`, :func:`jaxcompress.error_estimate`) compare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxcompress import sharding
from jaxcompress._checks import describe
from jaxcompress.activations import get_activation
from jaxcompress.graph import Compressed, Network
from jaxcompress.io import LoadedModel, LoadedNetwork
from jaxcompress.mlp import Params, apply, validate_params
from jaxcompress.modules import ModuleNetwork
from jaxcompress.placement import Placement

__all__ = ["as_network", "is_network", "network_function", "network_placement", "shard"]

#: The network types other than a params list.
NETWORKS = (Network, ModuleNetwork, Compressed, LoadedModel, LoadedNetwork)


def is_network(obj: Any) -> bool:
    """Whether ``obj`` is a network object (anything but a params list or a callable)."""
    return isinstance(obj, NETWORKS)


def as_network(obj: Any, *, activation=None, where: str = "compress") -> Network:
    """The :class:`~jaxcompress.Network` of any network (see the module docstring);
    ``activation=`` only for a params list, else a ``ValueError``."""
    if is_network(obj) and activation is not None and not isinstance(obj, LoadedModel):
        raise ValueError(f"{where}: a {type(obj).__name__} carries its own activation; "
                         f"activation= is only for a params list, got {activation!r}")
    if isinstance(obj, Network):
        return obj
    if isinstance(obj, ModuleNetwork):
        return obj.network
    if isinstance(obj, Compressed):
        net = obj.as_network()
        return net.network if isinstance(net, ModuleNetwork) else net
    if isinstance(obj, LoadedModel):
        if activation is not None and get_activation(activation).name != obj.activation:
            raise ValueError(f"{where}: the file says activation {obj.activation!r}; got "
                             f"activation={activation!r}")
        return Network.from_params(obj.params, obj.activation)
    if isinstance(obj, LoadedNetwork):
        if obj.chain is None:
            raise ValueError(
                f"{where}: this saved network is not a chain of dense layers, and its program "
                "is stored exported (StableHLO), which the trace cannot read; trace your own "
                "function again with its parameters (loaded.params, by path)")
        params, act = obj.chain
        return Network.from_params(params, act)
    if activation is None:
        raise TypeError(f"{where}: activation= is required for a params list (a registered "
                        "name such as 'tanh'); a network from jc.trace or jc.trace_module "
                        f"carries its own. Got {describe(obj)}")
    return Network.from_params(validate_params(obj, where=where), activation)


def network_function(obj: Any, *, activation=None, where: str = "sup_error"
                     ) -> Callable[[jax.Array], jax.Array]:
    """``f(x)`` of any network (``activation=`` for a params list) or of a callable ``f``."""
    if is_network(obj):
        if isinstance(obj, (Compressed, LoadedNetwork)):
            return obj
        net = as_network(obj, activation=activation, where=where)
        return lambda x: net.fn(net.params, x)
    if callable(obj) and not isinstance(obj, (list, tuple)):
        return obj
    params: Params = validate_params(obj, where=where)
    if activation is None:
        raise TypeError(f"{where}: activation= is required for a params list")
    act = get_activation(activation)
    return lambda x: apply(params, x, activation=act)


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
    ``1/n`` of every kernel and hidden bias). Any other network comes back as the same kind of
    network with its leaves placed: every leaf that produces a compressible set's neurons split
    along its neuron axis, every kernel that reads one split along its rows, the rest
    replicated; :func:`jaxcompress.compress` on it runs sharded and keeps the neurons one
    device keeps (the selectors' distributed forms). Widths must be divisible by the axis size.
    """
    if not is_network(net):
        return sharding.shard(net, mesh, axis)
    if isinstance(net, (Compressed, LoadedModel, LoadedNetwork)):
        raise TypeError(f"shard: place the network to compress ({type(net).__name__} is a "
                        "result or a file: compress it, or shard its network as_network())")
    inner = net.network if isinstance(net, ModuleNetwork) else net
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
    placed = dataclasses.replace(inner, params=jax.tree_util.tree_unflatten(
        jax.tree_util.tree_structure(inner.params), leaves))
    return dataclasses.replace(net, network=placed) if isinstance(net, ModuleNetwork) else placed
