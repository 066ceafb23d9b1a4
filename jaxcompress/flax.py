"""Flax adapters: compress ``nnx`` modules and ``linen`` modules directly.

The core works on plain params lists; this module converts Flax models to and from that
convention, checks that the model really *is* that MLP (the converted params are evaluated against
the model on random inputs), and rebuilds a model of the new widths.

**nnx convention.** The model's dense layers are ``nnx.Linear`` modules found, in this order of
preference, as (1) the model itself being an ``nnx.Sequential`` of ``Linear`` layers and
activation functions, (2) a list / ``nnx.List`` / ``nnx.Sequential`` attribute named ``layers``,
(3) the model's ``nnx.Linear`` attributes in the order they were assigned in ``__init__``. The
activation is the model's ``activation`` attribute (a registered name or function), else the
functions inside an ``nnx.Sequential``, else the ``activation=`` argument. Any other submodule
holding parameters or state (``LayerNorm``, ``BatchNorm``, ``Conv``, ``Dropout``, ...) is refused
with its path. The compressed model is a copy of the input (same class, same non-dense attributes)
whose ``Linear`` layers carry the new kernels, biases, ``in_features`` and ``out_features``, so
``new_model(x)``, ``nnx.split`` / ``nnx.merge`` and ``nnx.jit`` work as usual.

**linen convention.** ``variables = module.init(...)`` with every entry of ``variables["params"]``
an ``nn.Dense``-style ``{"kernel", "bias"}`` dict, in creation order (names ending in a number,
like ``Dense_0`` or ``layers_10``, are sorted numerically). The module must expose its widths as
a sequence field named ``features`` (also accepted: ``widths``, ``sizes``, ``hidden``,
``hidden_sizes``, ``layer_sizes``) so that ``module.clone(features=new)`` builds the compressed
architecture; the activation is its ``activation`` field or the ``activation=`` argument.

Reference modules following both conventions: :class:`MLP` (nnx) and :class:`LinenMLP`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

try:
    import flax.linen as nn
    from flax import nnx
except ImportError as e:  # pragma: no cover - flax is a declared dependency
    raise ImportError(
        "jaxcompress.flax needs Flax, a core dependency of jaxcompress that is missing from "
        "this environment: pip install 'flax>=0.10'"
    ) from e

from jaxcompress.activations import get_activation
from jaxcompress.compression import check_method, compress
from jaxcompress.domains import Ball, check_domain
from jaxcompress.methods import best_of, collocation, derivative_matching
from jaxcompress.mlp import Params, apply, layer_sizes, num_params, validate_params

__all__ = [
    "Compressed",
    "LinenMLP",
    "MLP",
    "compress_model",
    "from_params",
    "linen_params",
    "nnx_params",
    "rounded_widths",
]

_WIDTH_FIELDS = ("features", "widths", "sizes", "hidden", "hidden_sizes", "layer_sizes")


class Compressed(NamedTuple):
    """Result of :func:`compress_model`.

    ``model``: the new nnx module, or the cloned linen module; ``variables``: the new linen
    variables (``None`` for nnx, whose state lives in the module); ``info``: the
    :class:`~jaxcompress.CompressInfo`; ``params``: the compressed core params list.
    """

    model: Any
    variables: dict | None
    info: Any
    params: Params

    def summary(self) -> str:
        """The new layer sizes, then the per-layer record and the error estimate."""
        return (f"compressed to {layer_sizes(self.params)} ({num_params(self.params):,} "
                f"parameters)\n{self.info.summary()}")


class MLP(nnx.Module):
    """A plain nnx MLP in the library's convention: ``Linear`` layers in ``self.layers``.

    Hidden layers apply ``activation`` (a registered name); the last layer is linear.
    """

    def __init__(self, sizes: Sequence[int], *, activation: str = "sigmoid", rngs: nnx.Rngs,
                 param_dtype=jnp.float32):
        get_activation(activation)
        self.activation = activation
        self.layers = nnx.List([
            nnx.Linear(a, b, rngs=rngs, param_dtype=param_dtype,
                       precision=jax.lax.Precision.HIGHEST)
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        ])

    def __call__(self, x: jax.Array) -> jax.Array:
        act = get_activation(self.activation).fn
        for layer in self.layers[:-1]:
            x = act(layer(x))
        return self.layers[-1](x)


class LinenMLP(nn.Module):
    """A plain linen MLP: ``features`` are the output sizes of every layer (last = d_out).

    ``param_dtype`` is the parameters' dtype (float32 by default, as ``nn.Dense``).
    """

    features: Sequence[int]
    activation: str = "sigmoid"
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = get_activation(self.activation).fn
        for i, f in enumerate(self.features):
            x = nn.Dense(f, precision=jax.lax.Precision.HIGHEST, param_dtype=self.param_dtype,
                         name=f"Dense_{i}")(x)
            if i < len(self.features) - 1:
                x = act(x)
        return x


# ----------------------------------------------------------------------------- helpers


def rounded_widths(widths: Sequence[int], hidden: Sequence[int], round_to: int | None
                   ) -> tuple[int, ...] | None:
    """``widths`` rounded up to a multiple of ``round_to``, capped at the layers' widths."""
    if round_to is None:
        return None
    if isinstance(round_to, bool) or not isinstance(round_to, int) or round_to < 1:
        raise ValueError(f"round_to must be a positive int, got {round_to!r}")
    return tuple(min(h, -(-w // round_to) * round_to)
                 for w, h in zip(widths, hidden, strict=True))


def _check_matches(fn: Callable, state, params: Params, act: str, where: str) -> None:
    """Refuse a model whose forward pass ``fn(state, x)`` is not the MLP its parameters describe.

    The forward pass runs as one compiled program (op by op, every layer shape would compile
    its own dot, add and activation); a model that cannot be traced is run as it is.
    """
    d = params[0]["kernel"].shape[0]
    dtype = jnp.result_type(params[0]["kernel"])
    x = jax.random.normal(jax.random.PRNGKey(0), (8, d), dtype)
    try:
        # the model's matmuls at full precision too (a GPU's default float32 matmul is TF32),
        # so the tolerance can be the dtype's rounding, not a loose bound that lets a slightly
        # different activation through (the tanh-GELU differs from the exact one by ~1e-4)
        with jax.default_matmul_precision("highest"):
            try:
                got = np.asarray(jax.jit(fn)(state, x))
            except Exception:  # noqa: BLE001 - e.g. Python control flow on values: run eagerly
                got = np.asarray(fn(state, x))
    except Exception as e:
        raise ValueError(f"{where}: calling the model on inputs of shape (8, {d}) failed: {e}") \
            from e
    want = np.asarray(apply(params, x, activation=act))
    tol = 1e-5 if dtype == jnp.float32 else 1e-10
    if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
        raise ValueError(
            f"{where}: the model's output differs from the MLP of its dense layers with "
            f"activation {act!r} (hidden layers activated, last layer linear)"
            + (f": max difference {np.max(np.abs(got - want)):.2e} on 8 random inputs, expected "
               f"<= {tol:g}" if got.shape == want.shape else f": shape {got.shape} vs "
               f"{want.shape}") + ". Pass the right "
            "activation=, or adapt the model to the documented convention (see "
            "jaxcompress.flax)."
        )


def _activation_name(declared, explicit, where: str) -> str:
    if explicit is not None:
        name = get_activation(explicit).name
        if declared is not None and get_activation(declared).name != name:
            raise ValueError(f"{where}: activation={name!r} contradicts the model's own "
                             f"{get_activation(declared).name!r}")
        return name
    if declared is None:
        raise ValueError(f"{where}: the model declares no activation; pass activation=")
    return get_activation(declared).name


# ----------------------------------------------------------------------------- nnx


def _nnx_linears(model: nnx.Module, where: str) -> tuple[list[tuple[str, nnx.Linear]], Any]:
    """The model's Linear layers in order, with their paths, and any declared activation."""
    declared = getattr(model, "activation", None)
    if isinstance(model, nnx.Sequential):
        container, prefix = model.layers, "layers"
    elif isinstance(getattr(model, "layers", None), (list, tuple, nnx.List, nnx.Sequential)):
        container, prefix = model.layers, "layers"
        if isinstance(container, nnx.Sequential):
            container, prefix = container.layers, "layers.layers"
    else:
        container = None
    if container is not None:
        items = list(container)
        linears = [(f"{prefix}[{i}]", m) for i, m in enumerate(items)
                   if isinstance(m, nnx.Linear)]
        funcs = [m for m in items if not isinstance(m, nnx.Module) and callable(m)]
        if funcs and declared is None:
            names = {get_activation(f).name for f in funcs}
            if len(names) > 1:
                raise ValueError(f"{where}: the Sequential mixes activations {sorted(names)}")
            declared = funcs[0]
    else:
        linears = [(name, m) for name, m in vars(model).items() if isinstance(m, nnx.Linear)]
    if len(linears) < 2:
        raise ValueError(f"{where}: found {len(linears)} nnx.Linear layer(s); an MLP needs at "
                         "least 2 (see the convention in jaxcompress.flax)")
    # every other module holding parameters/state is refused, by path
    allowed = {id(m) for _, m in linears} | {id(model)}
    for path, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Module) or id(node) in allowed:
            continue
        if isinstance(node, (nnx.List, nnx.Sequential)):
            continue
        name = ".".join(str(p) for p in path)
        raise ValueError(
            f"{where}: submodule {name!r} ({type(node).__name__}) is not an nnx.Linear; "
            "jaxcompress compresses MLPs made only of dense layers and an analytic activation"
        )
    for name, lin in linears:
        if not lin.use_bias:
            raise ValueError(f"{where}: layer {name!r} has no bias; the convention needs biases")
    return linears, declared


def nnx_params(model: nnx.Module, *, activation=None) -> tuple[Params, str]:
    """Extract ``(params, activation_name)`` from an nnx MLP (checked against the model)."""
    where = "jaxcompress.flax.nnx_params"
    linears, declared = _nnx_linears(model, where)
    act = _activation_name(declared, activation, where)
    params = validate_params([{"kernel": lin.kernel[...], "bias": lin.bias[...]}
                              for _, lin in linears], where=where)
    graph, state = nnx.split(model)
    _check_matches(lambda st, x: nnx.merge(graph, st)(x), state, params, act, where)
    return params, act


def _nnx_rebuild(model: nnx.Module, params: Params) -> nnx.Module:
    new = nnx.clone(model)
    linears, _ = _nnx_linears(new, "jaxcompress.flax")
    for (_, lin), layer in zip(linears, params, strict=True):
        lin.kernel = nnx.Param(layer["kernel"])
        lin.bias = nnx.Param(layer["bias"])
        lin.in_features, lin.out_features = (int(s) for s in layer["kernel"].shape)
    return new


# ----------------------------------------------------------------------------- linen


def _linen_layer_names(tree: dict, where: str) -> list[str]:
    names = list(tree)

    def key(n):
        m = re.search(r"(\d+)$", n)
        return (re.sub(r"\d+$", "", n), int(m.group(1))) if m else (n, -1)

    if all(re.search(r"\d+$", n) for n in names) and len({key(n)[0] for n in names}) == 1:
        names = sorted(names, key=key)
    for n in names:
        entry = tree[n]
        if not isinstance(entry, dict) or set(entry) != {"kernel", "bias"}:
            keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ValueError(
                f"{where}: submodule {n!r} has parameters {keys}; only nn.Dense layers "
                "({'kernel', 'bias'}) are supported"
            )
    return names


def linen_params(variables: dict, module: nn.Module | None = None, *, activation=None
                 ) -> tuple[Params, str]:
    """Extract ``(params, activation_name)`` from linen ``variables`` (checked when ``module``)."""
    where = "jaxcompress.flax.linen_params"
    if not isinstance(variables, dict) or "params" not in variables:
        raise TypeError(f"{where}: expected linen variables {{'params': ...}}, got "
                        f"{type(variables).__name__}")
    extra = sorted(set(variables) - {"params"})
    if extra:
        raise ValueError(f"{where}: variable collections {extra} (e.g. batch statistics) are "
                         "not part of an MLP of dense layers")
    tree = dict(variables["params"])
    names = _linen_layer_names(tree, where)
    declared = getattr(module, "activation", None) if module is not None else None
    act = _activation_name(declared, activation, where)
    params = validate_params([{"kernel": tree[n]["kernel"], "bias": tree[n]["bias"]}
                              for n in names], where=where)
    if module is not None:
        _check_matches(module.apply, variables, params, act, where)
    return params, act


def _linen_rebuild(module: nn.Module, variables: dict, params: Params, where: str):
    tree = dict(variables["params"])
    names = _linen_layer_names(tree, where)
    new_vars = {"params": {n: {"kernel": p["kernel"], "bias": p["bias"]}
                           for n, p in zip(names, params, strict=True)}}
    out_sizes = [int(p["kernel"].shape[1]) for p in params]
    for field in _WIDTH_FIELDS:
        old = getattr(module, field, None)
        if isinstance(old, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in old):
            n = len(params)
            if len(old) == n:
                new_val = out_sizes
            elif len(old) == n - 1:
                new_val = out_sizes[:-1]
            elif len(old) == n + 1:
                new_val = layer_sizes(params)[:1] + out_sizes
            else:
                continue
            new_module = module.clone(**{field: type(old)(new_val)})
            d = params[0]["kernel"].shape[0]
            x = jnp.zeros((1, d), jnp.result_type(params[0]["kernel"]))
            shapes = jax.eval_shape(new_module.init, jax.random.PRNGKey(0), x)
            want = jax.tree.map(lambda a: tuple(a.shape), new_vars)
            got = jax.tree.map(lambda a: tuple(a.shape), dict(shapes))
            if got == want:
                return new_module, new_vars
    raise ValueError(
        f"{where}: cannot rebuild {type(module).__name__} with the new widths: it needs a "
        f"sequence-of-int field named one of {_WIDTH_FIELDS} holding the layer sizes, so that "
        "module.clone(features=...) builds the compressed architecture. The compressed params "
        "are in Compressed.params; jaxcompress.flax.LinenMLP can apply them."
    )


# ----------------------------------------------------------------------------- public


def from_params(params: Params, *, activation: str, api: str = "nnx", rngs=None):
    """Build a reference Flax model (:class:`MLP` or :class:`LinenMLP`) holding ``params``.

    Useful after :func:`jaxcompress.load`: the widths come from the params. Returns the nnx
    module, or ``(module, variables)`` for ``api="linen"``.
    """
    params = validate_params(params, where="from_params")
    sizes = layer_sizes(params)
    dtype = jnp.result_type(params[0]["kernel"])
    if api == "nnx":
        model = nnx.eval_shape(lambda: MLP(sizes, activation=activation,
                                           rngs=nnx.Rngs(0), param_dtype=dtype))
        for lin, layer in zip(model.layers, params, strict=True):
            lin.kernel = nnx.Param(jnp.asarray(layer["kernel"]))
            lin.bias = nnx.Param(jnp.asarray(layer["bias"]))
        return model
    if api == "linen":
        module = LinenMLP(features=tuple(sizes[1:]), activation=activation, param_dtype=dtype)
        variables = {"params": {f"Dense_{i}": {"kernel": p["kernel"], "bias": p["bias"]}
                                for i, p in enumerate(params)}}
        return module, variables
    raise ValueError(f"from_params: api must be 'nnx' or 'linen', got {api!r}")


def _cast(params: Params, dtype) -> Params:
    return [{k: jnp.asarray(v, dtype) for k, v in layer.items()} for layer in params]


def _compute_dtype(params: Params, dtype, where: str):
    """The dtype to compress in: ``dtype`` if given (checked), else the model's own."""
    own = jnp.result_type(params[0]["kernel"])
    if dtype is None:
        if own == jnp.float32 and jax.config.jax_enable_x64:
            warnings.warn(
                f"{where}: the model's parameters are float32, so the compression runs in "
                "float32 even though jax_enable_x64 is on; pass dtype=jnp.float64 to compress in "
                "float64 (the compressed model keeps float32 parameters)", stacklevel=3)
        return own
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{where}: dtype must be a floating dtype, got {dtype}")
    if dtype.itemsize == 8 and not jax.config.jax_enable_x64:
        raise ValueError(f"{where}: dtype={dtype} needs float64 enabled: call "
                         "jax.config.update('jax_enable_x64', True) first")
    return dtype


def compress_model(
    model_or_params,
    method=None,
    *,
    order=None,
    module: nn.Module | None = None,
    activation=None,
    domain=None,
    radius: float | None = None,
    round_to: int | None = None,
    dtype=None,
    verbose: bool = False,
) -> Compressed:
    """Compress a Flax MLP and return a model of the same kind with the new widths.

    Args:
      model_or_params: an ``nnx.Module`` (see the module docstring for the convention), or linen
        ``variables`` (then pass ``module=``).
      method: a :class:`~jaxcompress.Method` or :func:`~jaxcompress.best_of`. Default, with
        ``order=k``: ``best_of(derivative_matching(k), collocation(k))``, the one with the smaller
        error on fixed Sobol points of the domain (``Compressed.summary()`` says which won).
      order: the Taylor order ``k`` for the default method.
      module: the linen module the variables belong to.
      activation: the activation, when the model does not declare one.
      domain: the input domain (default: the ball of radius ``radius``, 1 when not given).
      radius: shorthand for ``domain=jc.Ball(d_in, radius)``.
      round_to: round each hidden width up to a multiple of this (hardware-friendly shapes). The
        extra slots hold the selector's next-best neurons; the matching is unchanged, so
        rounding never increases the error.
      dtype: the dtype to compress in (default: the model's). ``dtype=jnp.float64`` compresses
        a float32 model in float64 (needs ``jax_enable_x64``) and casts the result back to the
        model's parameter dtype; with x64 enabled and no ``dtype``, a float32 model is compressed
        in float32 and a warning says so.
      verbose: print :meth:`Compressed.summary` (per-layer record, error estimate, the winner).

    Returns:
      :class:`Compressed` ``(model, variables, info, params)``: for nnx a new module of the same
      class (``variables`` is ``None``); for linen ``module.clone(...)`` with the new sizes and its
      variables. ``info.error_estimate`` is the largest ``|F - F~|`` on fixed Sobol points of the
      domain, in the compression dtype.
    """
    where = "jaxcompress.flax.compress_model"
    if isinstance(model_or_params, nnx.Module):
        if module is not None:
            raise ValueError(f"{where}: module= is for linen variables; got an nnx model")
        params, act = nnx_params(model_or_params, activation=activation)
    elif isinstance(model_or_params, dict):
        if module is None:
            raise ValueError(f"{where}: linen variables need module= (the nn.Module they "
                             "belong to)")
        params, act = linen_params(model_or_params, module, activation=activation)
    else:
        raise TypeError(f"{where}: expected an nnx.Module or linen variables, got "
                        f"{type(model_or_params).__name__}")
    if method is None:
        if order is None:
            raise TypeError(f"{where}: give a method (e.g. jc.derivative_matching(k)) or order=k")
        method = best_of(derivative_matching(order), collocation(order))
    elif order is not None:
        raise ValueError(f"{where}: order= chooses the default method; with a method, the order "
                         "is the method's")
    d = int(params[0]["kernel"].shape[0])
    if radius is not None:
        if domain is not None:
            raise ValueError(f"{where}: pass either radius or domain, not both")
        domain = Ball(d, radius)
    domain = Ball(d, 1.0) if domain is None else domain
    own = jnp.result_type(params[0]["kernel"])
    work = _compute_dtype(params, dtype, where)
    if round_to is not None:
        work_params = _cast(params, work)
        check_domain(domain, d, where, work)
        widths = check_method(method, work_params, domain, where)
        hidden = [int(p["kernel"].shape[1]) for p in params[:-1]]
        method = method.with_widths(rounded_widths(widths, hidden, round_to))
    new_params, info = compress(_cast(params, work), method, activation=act, domain=domain)
    new_params = _cast(new_params, own)
    if isinstance(model_or_params, nnx.Module):
        out = Compressed(_nnx_rebuild(model_or_params, new_params), None, info, new_params)
    else:
        new_module, new_vars = _linen_rebuild(module, model_or_params, new_params, where)
        out = Compressed(new_module, new_vars, info, new_params)
    if verbose:
        print(out.summary())
    return out
