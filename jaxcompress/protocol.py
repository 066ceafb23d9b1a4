"""The one network protocol: what every kind of network answers, whatever made it.

A params list with its activation (:meth:`jaxcompress.Network.from_params`), a network from
:func:`jaxcompress.trace` or :func:`jaxcompress.trace_module`, a compressed result and a loaded
file are each a :class:`NetworkLike`: callable on a batch, ``net(x)``, with its parameters, its
sizes, the library's one representation of it (:meth:`NetworkLike.as_network`, the
:class:`~jaxcompress.Network` the driver compresses) and its function as the measurements take
it (:meth:`NetworkLike.function`). The verbs ask these members and never which kind they hold;
the one place a plain params list becomes a network is :func:`jaxcompress.networks.as_network`.

This module imports nothing of the package (every kind subclasses it).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["NetworkLike"]


class NetworkLike(abc.ABC):
    """The protocol of every network the library takes (a params list aside).

    Subclasses: :class:`~jaxcompress.Network` (a params list's or a traced one),
    :class:`~jaxcompress.ModuleNetwork`, :class:`~jaxcompress.Compressed` (and its module form),
    :class:`~jaxcompress.LoadedNetwork`.
    """

    #: Whether :func:`jaxcompress.shard` places this kind's leaves (a network to compress), or
    #: refuses it (a result or a file).
    placeable: ClassVar[bool] = False

    #: The parameter pytree (a field or a property of every kind).
    params: Any
    #: The record of the compression that made it (:class:`~jaxcompress.CompressInfo`; ``None``
    #: for a network that was not compressed, or a file saved without one).
    info: Any = None

    @abc.abstractmethod
    def as_network(self) -> Any:
        """The :class:`~jaxcompress.Network` of this network (the library's representation:
        what compress, certify and the searches read)."""

    @abc.abstractmethod
    def function(self) -> tuple[Callable[[Any, Any], Any], Any]:
        """``(fn, params)`` with ``fn(params, x)`` the network's output on a batch as one array
        ``(n, d_out)`` (an output pytree flattened): what the measurements compare. ``fn`` is a
        stable, hashable function of the network's program, so equal programs share one
        compilation."""

    @abc.abstractmethod
    def with_params(self, params: Any) -> NetworkLike:
        """The same network (same kind, same program) with other parameters of the same
        structure: polished or placed ones."""

    @abc.abstractmethod
    def layer_sizes(self) -> list[int]:
        """``[d_in]`` and the width of every neuron group in program order (for a chain of
        dense layers: ``[d_in, d_1, ..., d_L, d_out]``)."""

    @abc.abstractmethod
    def num_params(self) -> int:
        """The number of scalars in the parameter leaves."""

    def __call__(self, x: Any) -> Any:
        """The network on a batch ``x`` of shape ``(n, d_in)``."""
        fn, params = self.function()
        return fn(params, x)

    @property
    def input_dim(self) -> int | None:
        """``d_in`` (``None`` when the network does not know it)."""
        return int(self.layer_sizes()[0])

    def check_activation(self, activation: Any, where: str) -> None:
        """Refuse ``activation=`` for a network that carries its own (a params list alone needs
        one); a loaded params list accepts its own activation."""
        if activation is not None:
            raise ValueError(f"{where}: a {type(self).__name__} carries its own activation; "
                             f"activation= is only for a params list, got {activation!r}")

    @abc.abstractmethod
    def compressed_as(self, net: Any, leaves: list, info: Any, domain: Any = None) -> Any:
        """The compressed ``leaves`` of ``net`` (this network's :meth:`as_network`) as what
        :func:`jaxcompress.compress` returns for this kind: a
        :class:`~jaxcompress.Compressed` (its module form for a module; a params list for a
        loaded params list)."""
