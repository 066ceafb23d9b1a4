"""Flax conversions: an ``nnx`` or ``linen`` MLP to the params convention and back.

To compress a Flax module (any architecture: skips, Fourier features, gates, your own
``__call__``) use :func:`jaxcompress.trace_module`, which returns a module of the same class with
the new sizes (``small.module``); the old ``compress_model`` of this module is gone (one route
for modules). What stays here converts a plain MLP to the list of dense layers the command line,
:func:`jaxcompress.save` and :func:`jaxcompress.certify` read, and builds reference models from
such a list:

**nnx convention.** The model's dense layers are ``nnx.Linear`` modules found, in this order of
preference, as (1) the model itself being an ``nnx.Sequential`` of ``Linear`` layers and
activation functions, (2) a list / ``nnx.List`` / ``nnx.Sequential`` attribute named ``layers``,
(3) the model's ``nnx.Linear`` attributes in the order they were assigned in ``__init__``. The
activation is the model's ``activation`` attribute (a registered name or function), else the
functions inside an ``nnx.Sequential``, else the ``activation=`` argument. Any other submodule
holding parameters or state (``LayerNorm``, ``BatchNorm``, ``Conv``, ``Dropout``, ...) is refused
with its path, and the converted params are evaluated against the model on random inputs (a
model that does not compute what its layers say is an error).

**linen convention.** ``variables = module.init(...)`` with every entry of ``variables["params"]``
an ``nn.Dense``-style ``{"kernel", "bias"}`` dict, in creation order (names ending in a number,
like ``Dense_0`` or ``layers_10``, are sorted numerically); the activation is the module's
``activation`` field or the ``activation=`` argument.

Reference modules following both conventions: :class:`MLP` (nnx) and :class:`LinenMLP`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

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
from jaxcompress.mlp import Params, apply, layer_sizes, validate_params

__all__ = [
    "LinenMLP",
    "MLP",
    "from_params",
    "linen_params",
    "nnx_params",
]

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
