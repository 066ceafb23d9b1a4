"""Modules in, modules out: ``jc.trace_module`` traces a Flax nnx, Flax linen or Equinox module.

:func:`trace_module` turns a module into the pair ``fn(params, x)``, ``params`` that
:func:`jaxcompress.trace` reads, and remembers how to put the module back together:

- nnx: ``params`` is the ``nnx.Param`` and ``nnx.BatchStat`` state of
  ``nnx.split(model, (nnx.Param, nnx.BatchStat), ...)`` (running statistics are sliced with
  their channels, like a bias);
  ``fn`` is ``nnx.merge(graphdef, params, rest)(x)``.
- linen: ``params`` is ``variables`` (every collection); ``fn`` is ``model.apply(params, x)``.
- Equinox: ``params, static = eqx.partition(model, eqx.is_array)``; ``fn`` is
  ``jax.vmap(eqx.combine(params, static))(x)`` (or without ``vmap``: see below).

**One example or a batch.** Equinox modules are written for one example (``eqx.nn.MLP`` maps
``(d_in,)`` to ``(d_out,)``) and Flax modules for a batch (``Dense`` broadcasts over leading
axes). :func:`trace_module` asks :func:`jax.eval_shape` which one the module is: for Equinox it
first tries one example ``x[0]`` (then the batch), for Flax first the batch ``x`` (then one
example); a module that takes one example is applied as ``jax.vmap(model)(x)``. One example is
tried first for Equinox because an ``(out, in)`` weight applied to a batch of ``n = in``
examples would run without error and compute the wrong thing.

**The module back** (:attr:`CompressedModule.module`, built on first use and checked: its output
must equal ``small(x)`` on the domain's error points to rounding, else ``RuntimeError``):

- nnx: ``nnx.merge(graphdef, small.params, rest)``; every ``nnx.Linear``'s ``in_features`` /
  ``out_features`` is set from its kernel, ``(in, out)`` (found with ``nnx.iter_graph``).
- linen: ``model.clone(**fields)`` with new values of the module's size fields. Which field sets
  which width is found, not guessed from names: each ``int`` field and each entry of a
  ``Sequence[int]`` field is raised by one in a clone and the clone's variable shapes are
  compared (:func:`jax.eval_shape` of ``init``); a field whose increment grows some axes by one
  sets those widths, and its new value is the old one plus their change. This covers
  ``@nn.compact`` MLPs with a ``features`` sequence and setup-style modules with a width field
  per layer or one shared ``width``. Entries of a ``Sequence[int]`` field that must be equal
  (a gated MLP's hidden widths, all multiplied by one gate: no entry can move alone) are one
  unknown, raised together, and set when their widths were compressed alike (a tied set's
  are). A changed width that no field sets (a literal ``nn.Dense(64)``), or one field that sets
  widths compressed differently, is a ``ValueError`` naming the leaf and the fields, raised by
  ``small.module`` (``small.module_why`` holds it); ``compress`` still returns: ``fn`` runs
  the traced module at the new widths with every ``nn.Dense`` / ``nn.DenseGeneral`` reading its
  ``features`` off its kernel (:func:`flax.linen.intercept_methods`), so ``small.params`` and
  ``small(x)`` work.
- Equinox: ``eqx.combine(small.params, static)``, then every ``eqx.nn.Linear`` gets
  ``in_features`` / ``out_features`` from its weight ``(out, in)`` and every ``eqx.nn.MLP``
  ``width_size``: the hidden width when all hidden layers have the same width, else the
  **largest** hidden width (``width_size`` is one number; ``MLP.__call__`` reads only
  ``layers``, whose ``Linear``s carry each true width). These are static fields, which
  :func:`equinox.tree_at` does not reach: the new ``Linear`` / ``MLP`` is a shallow copy with
  the fields replaced, put in place with :func:`equinox.tree_at`.

Sizes held elsewhere (a custom module's own ``self.width``, ``nnx.LinearGeneral``) are left as
they are; the output check still guards the function.

**A part of a bigger model** (``trace_module(model, x, part=lambda m: m.func.mlp)``: a neural
ODE's vector field): the part is traced and rebuilt as above, and
:attr:`CompressedModule.whole` puts it back in the model (a :class:`Part` records where):
Equinox with ``eqx.tree_at(part, model, small.module)``, nnx by setting the attribute on
``nnx.clone(model)``, linen by cloning the model along the part's fields (a linen part must be
a module field; its variables are the subtree under the fields' names) and replacing that
subtree of ``variables``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.domains import Ball
from jaxcompress.graph import Compressed, Network, compressed, trace
from jaxcompress.graph.plan import flat_output
from jaxcompress.measure import error_points
from jaxcompress.protocol import NetworkLike

if TYPE_CHECKING:
    import flax.linen as nn
    from flax import nnx

__all__ = ["CompressedModule", "ModuleNetwork", "Part", "trace_module"]

_KINDS = ("nnx", "linen", "equinox")


@dataclasses.dataclass(frozen=True, eq=False)
class Part:
    """Where the traced module sits in a bigger model (:func:`trace_module`'s ``part``).

    Attributes:
      model: the whole model (a neural ODE whose vector field is the part).
      select: the function from the model to the part (``lambda m: m.func.mlp``).
      steps: ``select`` as attribute names and indices (``(("attr", "func"), ("attr",
        "mlp"))``).
      variables: linen only: the whole model's variables (the part's are a subtree of them).
    """

    model: Any
    select: Callable
    steps: tuple
    variables: Any = None


class _Path:
    """Records the attributes and indices a ``select`` function takes of the model."""

    def __init__(self, steps: tuple = ()):
        object.__setattr__(self, "_steps", steps)

    def __getattr__(self, name: str) -> _Path:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Path(self._steps + (("attr", name),))

    def __getitem__(self, key) -> _Path:
        return _Path(self._steps + (("item", key),))


def _steps_of(select: Callable, where: str) -> tuple:
    if not callable(select):
        raise TypeError(f"{where}: part must be a function from the model to the part to "
                        f"compress (e.g. lambda m: m.func.mlp), got {type(select).__name__}")
    try:
        path = select(_Path())
    except Exception as e:  # noqa: BLE001 - anything but attribute and index access
        raise ValueError(f"{where}: part must only take attributes and indices of the model "
                         f"(e.g. lambda m: m.func.mlp or lambda m: m.blocks[2]); calling it on "
                         f"a recorder raised {type(e).__name__}: {e}") from e
    if not isinstance(path, _Path) or not path._steps:
        raise ValueError(f"{where}: part must return a sub-module of the model reached by "
                         "attributes and indices (e.g. lambda m: m.func.mlp), got "
                         f"{type(path).__name__}")
    return path._steps


def _step(obj, step):
    how, key = step
    return getattr(obj, key) if how == "attr" else obj[key]


def _linen_subtree(variables, names: list[str], where: str):
    """The variables of the linen sub-module at field ``names`` (every collection that has
    it)."""
    out = {}
    for col, tree in variables.items():
        node = tree
        for n in names:
            node = node.get(n) if hasattr(node, "get") else None
            if node is None:
                break
        if node is not None:
            out[col] = node
    if "params" not in out:
        raise ValueError(f"{where}: variables['params'] has no entry {'/'.join(names)} for "
                         f"the part; expected the whole model's variables (model.init(key, "
                         "...)) with the part's fields as sub-modules")
    return out


def _linen_replaced(variables, names: list[str], part_vars):
    """``variables`` with the sub-module at ``names`` given ``part_vars``."""
    def put(tree, path, value):
        tree = dict(tree)
        tree[path[0]] = value if len(path) == 1 else put(tree[path[0]], path[1:], value)
        return tree

    out = dict(variables)
    for col, value in part_vars.items():
        out[col] = put(variables[col], names, value)
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class ModuleNetwork(NetworkLike):
    """A traced module: the :class:`~jaxcompress.Network` of ``fn(params, x)`` and what rebuilds
    the module (build with :func:`trace_module`; ``print`` shows the network's table).

    Attributes:
      network: the traced :class:`~jaxcompress.Network`.
      model: the module traced (linen: the module; its variables are ``network.params``).
      kind: ``"nnx"``, ``"linen"`` or ``"equinox"``.
      per_example: whether the module takes one example and ``fn`` applies it under
        :func:`jax.vmap`.
      parts: what ``fn`` closes over: nnx ``(graphdef, rest)``, Equinox ``(static,)``, linen
        ``()``.
      within: where the module sits in a bigger model (:class:`Part`; ``trace_module``'s
        ``part``), or ``None``.
    """

    network: Network
    model: Any
    kind: str
    per_example: bool
    parts: tuple = ()
    within: Part | None = None

    @property
    def params(self) -> Any:
        return self.network.params

    @property
    def fn(self) -> Callable:
        return self.network.fn

    @property
    def x(self) -> jax.ShapeDtypeStruct:
        return self.network.x

    def layer_sizes(self) -> list[int]:
        return self.network.layer_sizes()

    def num_params(self) -> int:
        return self.network.num_params()

    def __str__(self) -> str:
        how = "under jax.vmap (one example at a time)" if self.per_example else "to the batch"
        return (f"{self.network}\nmodule: {type(self.model).__name__} ({self.kind}), applied "
                f"{how}")

    # -- the network protocol -------------------------------------------------------------------

    placeable: ClassVar[bool] = True

    def __call__(self, x: jax.Array) -> Any:
        """The module on a batch (its output as the module returns it)."""
        return self.network(x)

    def as_network(self) -> Network:
        return self.network

    def function(self) -> tuple[Callable, Any]:
        return self.network.function()

    def with_params(self, params: Any) -> ModuleNetwork:
        return dataclasses.replace(self, network=self.network.with_params(params))

    def compressed_as(self, net: Network, leaves: list, info, domain=None) -> CompressedModule:
        """A :class:`CompressedModule`: the compressed network with its module rebuilt (checked
        on ``domain``'s points; default the unit ball)."""
        domain = Ball(net.x.shape[-1], 1.0) if domain is None else domain
        return CompressedModule.of(compressed(net, leaves, info), self, domain)


@dataclasses.dataclass(frozen=True, eq=False)
class CompressedModule(Compressed):
    """A compressed :class:`ModuleNetwork`: a :class:`~jaxcompress.Compressed` (``small.params``,
    ``small(x)``, ``small.polymorphic``, ``small.why``) whose :attr:`module` is a module of the
    model's class with the new sizes.

    Attributes:
      source: the :class:`ModuleNetwork` that was compressed.
      domain: the domain it was compressed on (the rebuilt module is checked on its points).
    """

    source: ModuleNetwork | None = None
    domain: Any = None

    @classmethod
    def of(cls, small: Compressed, source: ModuleNetwork, domain) -> CompressedModule:
        return cls(small.params, small.network, small.info, small.polymorphic, small.why,
                   source, domain)

    @property
    def compressed(self) -> Compressed:
        """The same compressed network without its module."""
        return Compressed(self.params, self.network, self.info, self.polymorphic, self.why)

    @functools.cached_property
    def module_network(self) -> ModuleNetwork:
        """The compressed module traced again (its module rebuilt at the new sizes first): a
        :class:`ModuleNetwork` to compress, measure or save again (a part of a bigger model
        stays one: compressed again, its ``whole`` is the model with that part in place)."""
        again = trace_module(self.module, jax.ShapeDtypeStruct(self.network.x.shape,
                                                               self.network.x.dtype),
                             variables=self.params if self.source.kind == "linen" else None)
        return dataclasses.replace(again, within=self.source.within)

    def as_network(self) -> Network:
        """The :class:`~jaxcompress.Network` of :attr:`module_network`."""
        return self.module_network.network

    def compressed_as(self, net: Network, leaves: list, info, domain=None) -> CompressedModule:
        return self.module_network.compressed_as(net, leaves, info, domain)

    @functools.cached_property
    def module_why(self) -> str:
        """Why :attr:`module` cannot be built (its error message, which says what to do), or
        ``""`` when it can: the result of a module that cannot be rebuilt at the new widths is
        still ``small.params`` and ``small(x)``."""
        try:
            self.module  # noqa: B018 - built here (and cached) to learn whether it can be
        except (ValueError, RuntimeError) as e:
            return str(e)
        return ""

    @functools.cached_property
    def whole(self) -> Any:
        """The whole model with the compressed part in place of the traced one (for a module
        traced with ``trace_module(model, x, part=...)``): nnx, a copy of the model
        (:func:`flax.nnx.clone`) with the part's attribute set to :attr:`module`; Equinox,
        ``eqx.tree_at(part, model, small.module)``; linen, the pair ``(model, variables)``:
        the model cloned along the part's fields with :attr:`module` at the end, and its
        variables with the part's subtree replaced by ``small.params``
        (``model.apply(variables, ...)``). The model given is left as it was.

        Raises:
          ValueError: the module was traced whole (no ``part``): :attr:`module` is the model.
        """
        within = self.source.within
        if within is None:
            raise ValueError("CompressedModule.whole: the module was traced whole "
                             "(trace_module without part=); small.module is the model")
        part = self.module
        if self.source.kind == "equinox":
            import equinox as eqx

            return eqx.tree_at(within.select, within.model, part)
        *head, last = within.steps
        if self.source.kind == "nnx":
            from flax import nnx

            model = nnx.clone(within.model)
            parent = model
            for step in head:
                parent = _step(parent, step)
            if last[0] == "attr":
                setattr(parent, last[1], part)
            else:
                parent[last[1]] = part
            return model
        chain = [within.model]
        for step in head:
            chain.append(_step(chain[-1], step))
        new = part
        for obj, (_, name) in zip(reversed(chain), reversed(within.steps), strict=True):
            new = obj.clone(**{name: new})
        names = [name for _, name in within.steps]
        return new, _linen_replaced(within.variables, names, self.params)

    @functools.cached_property
    def module(self) -> Any:
        """A module of the model's class with the new sizes (see the module docstring), checked
        against ``small(x)``. For linen, apply it as ``small.module.apply(small.params, x)``.

        Raises:
          ValueError: (linen) a changed width that no field of the module sets (a literal
            ``nn.Dense(64)``), saying which and how to expose it (:attr:`module_why` holds
            the message); ``small.params`` and ``small(x)`` work all the same.
          RuntimeError: the rebuilt module does not compute ``small(x)``."""
        src, where = self.source, "CompressedModule.module"
        # the check below runs the module as one compiled program of (its arrays, x): op by op
        # it compiled a program per operation and shape
        if src.kind == "nnx":
            from flax import nnx

            graphdef, rest = src.parts
            model = _nnx_rebuild(graphdef, self.params, rest)
            module_def, arrays = nnx.split(model)

            def call(a, x):
                return nnx.merge(module_def, a)(x)
        elif src.kind == "linen":
            model = _linen_rebuild(src.model, src.params, self.params, src.x, src.per_example,
                                   where)
            arrays, call = self.params, model.apply
        else:
            import equinox as eqx

            (static,) = src.parts
            model = _eqx_rebuild(self.params, static)
            arrays, eqx_static = eqx.partition(model, eqx.is_array)

            def call(a, x):
                return eqx.combine(a, eqx_static)(x)

        def run(a, x):
            y = jax.vmap(functools.partial(call, a))(x) if src.per_example else call(a, x)
            return flat_output(y, x)

        pts = error_points(self.domain, dtype=src.x.dtype)
        got = np.asarray(jax.jit(run)(arrays, pts))
        want = np.asarray(flat_output(self(pts), pts))
        tol = 256 * float(jnp.finfo(src.x.dtype).eps) * (1.0 + float(np.max(np.abs(want))))
        gap = float(np.max(np.abs(got - want))) if got.shape == want.shape else np.inf
        if not gap <= tol:
            raise RuntimeError(f"{where}: the rebuilt {type(model).__name__} differs from "
                               f"small(x) by {gap:.3g} on the domain's error points (shapes "
                               f"{got.shape} vs {want.shape}, tolerance {tol:.2g}); "
                               "small.params and small(x) are unaffected")
        return model


def _loaded(name: str, cls: str) -> type | None:
    """``name.cls`` if the library ``name`` is imported already (a module of that library can
    only exist once it is: importing Flax and Equinox here would cost every user of the library
    a second at start-up, the command line included)."""
    module = sys.modules.get(name)
    return None if module is None else getattr(module, cls, None)


def _kind(model: Any, variables: Any, where: str) -> str:
    nnx_module, linen_module = _loaded("flax.nnx", "Module"), _loaded("flax.linen", "Module")
    eqx_module = _loaded("equinox", "Module")
    if nnx_module is not None and isinstance(model, nnx_module):
        kind = "nnx"
    elif linen_module is not None and isinstance(model, linen_module):
        kind = "linen"
    elif eqx_module is not None and isinstance(model, eqx_module):
        kind = "equinox"
    else:
        extra = ("" if importlib.util.find_spec("equinox") is not None
                 else " (Equinox is not installed: pip install equinox)")
        raise TypeError(
            f"{where}: model must be a flax.nnx.Module, a flax.linen.Module or an "
            f"equinox.Module{extra}, got {type(model).__name__}; a module of another system "
            "is traced by jc.trace with a two-line split / merge wrapper: its arrays as a "
            "pytree and a function that puts them back, e.g. for a model that is a pytree "
            "`params, treedef = jax.tree_util.tree_flatten(model)` and "
            "`fn = lambda p, x: jax.tree_util.tree_unflatten(treedef, p)(x)`, then "
            "jc.trace(fn, params, x) (docs/trace.md, \"Modules of other systems\")")
    if kind == "linen" and variables is None:
        raise TypeError(f"{where}: a linen module needs variables= (model.init(key, x)), got "
                        "None")
    if kind != "linen" and variables is not None:
        raise TypeError(f"{where}: variables= is for a linen module; a {kind} module holds "
                        f"its own arrays, got variables of type {type(variables).__name__}")
    return kind


def _takes_one_example(call: Callable, params, x: jax.ShapeDtypeStruct, single_first: bool,
                       where: str) -> bool:
    """Whether ``call(params, .)`` maps one example ``(d_in,)`` to one output (``True``) or the
    batch ``(n, d_in)`` to ``(n, ...)`` (``False``), asked of :func:`jax.eval_shape` (the
    module built from traced params inside it: nnx transforms such as ``nnx.scan`` refuse a
    module merged outside the trace, "Cannot extract graph node from different trace
    level")."""
    one = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)
    errors = {}
    for single in ((True, False) if single_first else (False, True)):
        try:
            out = jax.eval_shape(call, params, one if single else x)
        except Exception as e:  # noqa: BLE001 - the module refusing this layout
            errors[single] = f"{type(e).__name__}: {str(e).splitlines()[0]:.160}"
            continue
        # one array, or a pytree of heads (a dict {"sdf": ..., "rgb": ...}): every leaf alike
        shapes = [tuple(leaf.shape) for leaf in jax.tree_util.tree_leaves(out)]
        if not shapes:
            errors[single] = f"returned {type(out).__name__} with no arrays"
        elif single and all(len(s) <= 1 for s in shapes):
            return True
        elif not single and all(len(s) >= 1 and s[0] == x.shape[0] for s in shapes):
            return False
        else:
            errors[single] = "returned shape" + ("s " if len(shapes) > 1 else " ") + ", ".join(
                str(s) for s in shapes)
    raise ValueError(f"{where}: the model takes neither one example of shape {one.shape} "
                     f"({errors.get(True)}) nor the batch of shape {x.shape} "
                     f"({errors.get(False)})")


def trace_module(model: Any, x: jax.Array, *, variables: Any = None,
                 part: Callable | None = None) -> ModuleNetwork:
    """Trace a Flax nnx, Flax linen or Equinox module with :func:`jaxcompress.trace`.

    Args:
      model: an ``nnx.Module``, a ``linen.Module`` (with ``variables``) or an ``eqx.Module``.
      x: example inputs ``(n, d_in)`` of the module (of the part, with ``part``; only the
        shape and dtype are used).
      variables: the linen module's variables (``model.init(key, ...)``); only for linen.
      part: the network inside a bigger model to compress, as a function from the model to
        it made of attribute and index access, the form :func:`equinox.tree_at` takes
        (``lambda m: m.func.mlp``: a neural ODE's vector field). The part is traced on ``x``
        and compressed; ``small.whole`` is the whole model with it replaced. For linen the
        path is of module fields (``Func(mlp=MLP(...))``), whose variables are the subtree
        of ``variables`` under their names.

    Returns:
      A :class:`ModuleNetwork`: ``jc.compress(mnet, method, domain=...)`` returns
      ``(small, info)`` with ``small.params`` (the module's parameter pytree, smaller leaves),
      ``small(x)`` (the compressed function), ``small.module`` (a module of the same class
      with its size fields updated; see the module docstring for each library) and, with
      ``part``, ``small.whole`` (:attr:`CompressedModule.whole`).

    Example:
      >>> from flax import nnx
      >>> model = nnx.Sequential(nnx.Linear(2, 24, rngs=nnx.Rngs(0)), jnp.tanh,
      ...                        nnx.Linear(24, 1, rngs=nnx.Rngs(1)))
      >>> small, info = jc.compress(jc.trace_module(model, jnp.zeros((4, 2), jnp.float32)),
      ...                           jc.collocation(3), domain=jc.Ball(2, 1.0))
      >>> small.module.layers[0].out_features
      10
    """
    where = "trace_module"
    if part is not None:
        return _trace_part(model, x, variables, part, where)
    kind = _kind(model, variables, where)
    shape = jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x))
    if len(shape.shape) != 2:
        raise ValueError(f"{where}: x must be example inputs of shape (n, d_in), got shape "
                         f"{shape.shape}")
    if kind == "nnx":
        from flax import nnx

        # running statistics (BatchNorm in eval mode) are sliced with their channels: leaves
        graphdef, params, rest = nnx.split(model, (nnx.Param, nnx.BatchStat), ...)
        parts: tuple = (graphdef, rest)

        def call_with(p):
            return nnx.merge(graphdef, p, rest)
    elif kind == "linen":
        params, parts = variables, ()
        at_shapes: dict = {}
        one = None   # set below: whether the module takes one example

        def call_with(p):
            # linen checks every parameter's shape against the module's fields: at other
            # widths (the group-by-group path re-traces fn there) the module of those widths
            key = tuple(sorted(_shapes(p).items()))
            if key == tuple(sorted(_shapes(params).items())):
                return functools.partial(model.apply, p)
            if key not in at_shapes:
                try:
                    at_shapes[key] = _linen_rebuild(model, params, p, shape, one, where)
                except ValueError:   # widths no field sets: the Dense layers told (below)
                    at_shapes[key] = None
            if at_shapes[key] is None:
                return functools.partial(_linen_at_kernel_widths, model, p)
            return functools.partial(at_shapes[key].apply, p)
    else:
        import equinox as eqx

        params, static = eqx.partition(model, eqx.is_array)
        parts = (static,)

        def call_with(p):
            return eqx.combine(p, static)
    per_example = _takes_one_example(lambda p, xx: call_with(p)(xx), params, shape,
                                     kind == "equinox", where)
    one = per_example  # noqa: F841 - read by the linen call_with above

    def fn(p, x):
        call = call_with(p)
        return jax.vmap(call)(x) if per_example else call(x)

    fn.__qualname__ = fn.__name__ = f"{type(model).__name__}.__call__"
    return ModuleNetwork(trace(fn, params, x), model, kind, per_example, parts)


def _trace_part(model: Any, x, variables: Any, select: Callable, where: str) -> ModuleNetwork:
    """:func:`trace_module` of the part ``select(model)``, remembering the whole."""
    steps = _steps_of(select, where)
    kind = _kind(model, variables, where)
    sub_vars = None
    if kind == "linen":
        if any(how != "attr" for how, _ in steps):
            raise ValueError(f"{where}: part of a linen model must be a chain of module fields "
                             "(lambda m: m.func.mlp), got an index")
    try:
        inner = model
        for step in steps:
            inner = _step(inner, step)
    except (AttributeError, KeyError, IndexError, TypeError) as e:
        hint = (" (linen: a sub-module made in setup or @nn.compact exists only while the "
                "model runs; pass it as a field, Func(mlp=MLP(...)), or trace it with "
                "jc.trace(lambda p, x: MLP(...).apply(p, x), variables['params'][...], x))"
                if kind == "linen" else "")
        raise ValueError(f"{where}: part does not reach a sub-module of "
                         f"{type(model).__name__}: {type(e).__name__}: {e}{hint}") from e
    if kind == "linen":
        sub_vars = _linen_subtree(variables, [name for _, name in steps], where)
    mnet = trace_module(inner, x, variables=sub_vars)
    if mnet.kind != kind:
        raise TypeError(f"{where}: part is a {mnet.kind} module inside a {kind} model; "
                        "expected one module system")
    return dataclasses.replace(mnet, within=Part(model, select, steps, variables))


# ------------------------------------------------------------------------------------------------
# Rebuilding
# ------------------------------------------------------------------------------------------------


def _nnx_rebuild(graphdef, params, rest) -> nnx.Module:
    from flax import nnx

    model = nnx.merge(graphdef, params, rest)
    for _, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Linear):
            # (a Linear of a stack under nnx.scan holds (layers, in, out))
            node.in_features, node.out_features = (int(s) for s in node.kernel[...].shape[-2:])
        elif isinstance(node, nnx.BatchNorm):
            node.num_features = int(node.mean[...].shape[-1])
    return model


def _shapes(tree) -> dict[str, tuple[int, ...]]:
    pairs, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): tuple(np.shape(v)) for p, v in pairs}


def _size_fields(module: nn.Module) -> list[tuple[str, int | None, int]]:
    """``(field, position or None, value)`` of every ``int`` field and every entry of every
    ``Sequence[int]`` field of a linen module."""
    out = []
    for f in dataclasses.fields(module):
        if f.name in ("parent", "name"):
            continue
        v = getattr(module, f.name, None)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out.append((f.name, None, int(v)))
        elif (isinstance(v, (list, tuple)) and v
              and all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in v)):
            out += [(f.name, i, int(e)) for i, e in enumerate(v)]
    return out


def _with_values(module: nn.Module, values: dict[tuple[str, int | None], int]) -> nn.Module:
    fields: dict[str, Any] = {}
    for (name, pos), v in values.items():
        if pos is None:
            fields[name] = v
        else:
            old = fields.get(name, getattr(module, name))
            seq = list(old)
            seq[pos] = v
            fields[name] = type(getattr(module, name))(seq)
    return module.clone(**fields)


def _linen_rebuild(module: nn.Module, old_vars, new_vars, x: jax.ShapeDtypeStruct,
                   per_example: bool, where: str) -> nn.Module:
    example = jax.ShapeDtypeStruct(x.shape[1:], x.dtype) if per_example else x
    key = jax.eval_shape(jax.random.PRNGKey, 0)   # abstract: init's shapes only, no values

    def shapes_of(m):
        return _shapes(jax.eval_shape(m.init, key, example))

    old, new = _shapes(old_vars), _shapes(new_vars)
    base = shapes_of(module)
    if base != old:
        raise ValueError(f"{where}: {type(module).__name__}.init gives variables of other "
                         "shapes than the traced ones; were the variables made by this module?")
    changed = {(k, a) for k in old for a in range(len(old[k])) if old[k][a] != new[k][a]}
    values: dict[tuple[str, int | None], int] = {}
    explained: set = set()
    candidates = _size_fields(module)

    def solve(unknown: list[tuple[str, int | None]], v: int, label: str) -> bool:
        """Raise the fields ``unknown`` (one unknown: they hold one value ``v``) by one in a
        clone; if that grows some axes and nothing else, set them to ``v`` plus the change of
        those axes. Whether they set widths."""
        try:
            bumped = shapes_of(_with_values(module, {u: v + 1 for u in unknown}))
        except Exception:  # noqa: BLE001 - a field the module cannot take one larger
            return False
        if bumped.keys() != base.keys() or any(len(bumped[k]) != len(base[k]) for k in base):
            return False      # not a width: it changes the structure (a depth, a flag)
        moved = {(k, a) for k in base for a in range(len(base[k])) if bumped[k][a] != base[k][a]}
        if not moved or any(bumped[k][a] < base[k][a] for k, a in moved):
            return False      # sets no axis: left as it is
        # an axis may be a multiple of the field (sin and cos of n features: 2 n); the field
        # moves by the axis' change over that multiple, the same for every axis it sets
        deltas = {(new[k][a] - old[k][a]) / (bumped[k][a] - base[k][a]) for k, a in moved}
        if len(deltas) > 1 or any(d != int(d) for d in deltas):
            detail = ", ".join(f"{k} axis {a}: {old[k][a]} -> {new[k][a]}" for k, a in sorted(
                moved))
            raise ValueError(f"{where}: the field {label} of {type(module).__name__} sets "
                             f"widths that were compressed differently ({detail}); one value "
                             "cannot hold them. small.params and small(x) still work")
        delta = int(deltas.pop())
        values.update({u: v + delta for u in unknown})
        explained.update(moved)
        return True

    for name, pos, v in candidates:
        solve([(name, pos)], v, name if pos is None else f"{name}[{pos}]")
    # widths that must be equal (a gated MLP's hidden layers, all multiplied by one gate):
    # the entries of a Sequence[int] field that no one-entry change could move are one
    # unknown, solved when their widths were compressed alike (a tied set's are)
    for name in dict.fromkeys(n for n, p, _ in candidates if p is not None):
        entries = [(p, v) for n, p, v in candidates if n == name and (n, p) not in values]
        if len(entries) > 1 and len({v for _, v in entries}) == 1:
            solve([(name, p) for p, _ in entries], entries[0][1],
                  f"{name} (its entries {[p for p, _ in entries]}, one width)")
    missing = sorted(changed - explained)
    if missing:
        k, a = missing[0]
        names = sorted({n for n, _, _ in candidates}) or ["none"]
        raise ValueError(
            f"{where}: cannot rebuild {type(module).__name__} with the new widths: the width of "
            f"{k} (axis {a}: {old[k][a]} -> {new[k][a]}) is set by no field of the module "
            f"(int or Sequence[int] fields: {', '.join(names)}); expose the widths as a field, "
            "e.g. `features: Sequence[int]` used as nn.Dense(features[i]). small.params and "
            "small(x) still work")
    rebuilt = _with_values(module, values)
    got = shapes_of(rebuilt)
    if got != new:
        bad = next(k for k in new if got.get(k) != new[k])
        shown = ", ".join(f"{n if p is None else f'{n}[{p}]'}={v}"
                          for (n, p), v in values.items())
        raise ValueError(f"{where}: {type(module).__name__}.clone({shown}) gives {bad} the "
                         f"shape {got.get(bad)}, expected {new[bad]}")
    return rebuilt


def _dense_features(module, kernel):
    """The ``features`` an ``nn.Dense`` / ``nn.DenseGeneral`` with ``kernel`` has (its last
    axes), or ``None`` for any other module."""
    import flax.linen as nn

    if isinstance(module, nn.Dense):
        return int(kernel.shape[-1])
    if isinstance(module, nn.DenseGeneral):
        if isinstance(module.features, (int, np.integer)):
            return int(kernel.shape[-1])
        return tuple(int(n) for n in kernel.shape[len(kernel.shape) - len(module.features):])
    return None


def _linen_at_kernel_widths(module: nn.Module, variables, x):
    """``module.apply(variables, x)`` where a width no field of ``module`` sets (a literal
    ``nn.Dense(64)``) has changed: every ``nn.Dense`` / ``nn.DenseGeneral`` whose kernel is
    not the shape its ``features`` say runs as a copy with ``features`` read off its kernel,
    through :func:`flax.linen.intercept_methods` (linen's own hook; the module's code, and so
    its program, is unchanged). Other modules run as they are (their shape checks apply)."""
    import flax.linen as nn

    def at_kernel(next_fun, args, kwargs, context):
        mod = context.module
        if context.method_name == "__call__" and mod.has_variable("params", "kernel"):
            features = _dense_features(mod, mod.get_variable("params", "kernel"))
            if features is not None and features != mod.features:
                return mod.clone(parent=None, features=features).apply(
                    {"params": mod.variables["params"]}, *args, **kwargs)
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(at_kernel):
        return module.apply(variables, x)


def _replace_static(module, **fields):
    """A shallow copy of an Equinox module with static fields replaced (they are not pytree
    nodes, so :func:`equinox.tree_at` cannot reach them)."""
    new = copy.copy(module)
    for name, value in fields.items():
        object.__setattr__(new, name, value)
    return new


def _eqx_nodes(tree, cls) -> list:
    def is_cls(n):
        return isinstance(n, cls)

    return [n for n in jax.tree_util.tree_leaves(tree, is_leaf=is_cls) if is_cls(n)]


def _eqx_rebuild(params, static):
    import equinox as eqx

    model = eqx.combine(params, static)
    linears = _eqx_nodes(model, eqx.nn.Linear)
    if linears:
        new = []
        for lin in linears:
            # (out, in), after the members' axes of an ensemble built with filter_vmap;
            # a "scalar" side has size 1
            out_f, in_f = lin.weight.shape[-2:]
            new.append(_replace_static(
                lin, in_features=lin.in_features if lin.in_features == "scalar" else int(in_f),
                out_features=lin.out_features if lin.out_features == "scalar" else int(out_f)))
        model = eqx.tree_at(lambda m: _eqx_nodes(m, eqx.nn.Linear), model, new)
    mlps = _eqx_nodes(model, eqx.nn.MLP)
    if mlps:
        new = []
        for mlp in mlps:
            hidden = [lin.out_features for lin in mlp.layers[:-1]]
            new.append(_replace_static(mlp, width_size=max(hidden)) if hidden else mlp)
        model = eqx.tree_at(lambda m: _eqx_nodes(m, eqx.nn.MLP), model, new)
    return model
