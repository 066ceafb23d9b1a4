"""The parameter-pytree convention for MLPs: initialisation, evaluation, validation.

A network with sizes ``[d_0, d_1, ..., d_{L+1}]`` is a list of ``L + 1`` dense layers::

    [{"kernel": (d_0, d_1), "bias": (d_1,)}, ..., {"kernel": (d_L, d_{L+1}), "bias": (d_{L+1},)}]

exactly Flax ``nn.Dense`` / ``nnx.Linear`` layout (``kernel`` is ``(fan_in, fan_out)``). The
hidden layers ``1..L`` apply the activation; the last layer is linear:

.. math::
   h^{(0)} = x, \\quad h^{(l)} = \\sigma(h^{(l-1)} K_l + b_l) \\;(l = 1..L), \\quad
   F(x) = h^{(L)} K_{L+1} + b_{L+1}.

Leading axes of a leaf beyond ``kernel.ndim == 2`` are treated as a batch of networks (as
produced by ``jax.vmap``); validation only looks at the trailing axes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._checks import check_key, describe
from jaxcompress.activations import Activation, get_activation
from jaxcompress.placement import Placement, constrain_neurons
from jaxcompress.protocol import NetworkLike

__all__ = ["apply", "init_mlp", "layer_sizes", "leaf_count", "num_params",
           "param_count", "validate_params"]

Params = list[dict[str, jax.Array]]
HIGHEST = jax.lax.Precision.HIGHEST


def init_mlp(
    key: jax.Array,
    sizes: Sequence[int],
    *,
    init: str = "uniform",
    dtype: Any = None,
) -> Params:
    """Initialise an MLP in the params convention.

    Args:
      key: a PRNG key.
      sizes: ``[d_in, d_1, ..., d_L, d_out]`` (at least two entries).
      init: ``"uniform"``: kernel and bias entries i.i.d. ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``
        (PyTorch's ``nn.Linear`` default, used by the paper); ``"normal"``: kernel
        ``N(0, 1/fan_in)``, zero bias.
      dtype: the parameter dtype (default: JAX's default float, float64 under ``jax_enable_x64``).

    Returns:
      A list of ``{"kernel", "bias"}`` dicts.
    """
    check_key(key, "init_mlp")
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, (Sequence, np.ndarray)) or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in sizes):
        raise TypeError(f"init_mlp: sizes must be a sequence of ints [d_in, d_1, ..., d_out], "
                        f"got {describe(sizes)}")
    sizes = [int(s) for s in sizes]
    if len(sizes) < 2 or any(s < 1 for s in sizes):
        raise ValueError(f"init_mlp: sizes must be >= 2 positive integers, got {sizes}")
    if init not in ("uniform", "normal"):
        raise ValueError(f"init_mlp: init must be 'uniform' or 'normal', got {init!r}")
    # JAX's default float (float64 with x64 on), from the config: jnp.zeros(()) compiles a program
    dtype = jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.float_) if dtype is None else dtype)
    # With JAX's partitionable threefry (the default) entry i of a draw depends only on the key
    # and i, so a layer's draw is the first entries of any longer draw: a layer of at most
    # _BUCKET_MAX entries is drawn at a power-of-two length and cut on the host, and networks of
    # new shapes compile nothing new (bit for bit the direct draw: tests/test_mlp.py). A traced
    # key (init_mlp under jit or vmap) is drawn at the layer's own size.
    host_cut = jax.config.jax_threefry_partitionable and not isinstance(key, jax.core.Tracer)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, kk, kb = jax.random.split(key, 3)
        bound = 1.0 / np.sqrt(fan_in)
        kernel = _draw(kk, bound, (fan_in, fan_out), init, dtype, host_cut)
        bias = (_draw(kb, bound, (fan_out,), init, dtype, host_cut) if init == "uniform"
                else jnp.zeros((fan_out,), dtype))
        params.append({"kernel": kernel, "bias": bias})
    return params


#: Layers with at most this many kernel entries are drawn at a power-of-two length.
_BUCKET_MAX = 1 << 20
#: The shortest such length: every layer of at most 16,384 entries (a 128 x 128 kernel) shares
#: one program per init and dtype (drawing 16,384 entries takes ~0.4 ms on a CPU; compiling
#: another length's program ~0.2 s, and a [2, 64, 64, 1] teacher needed three of them).
_MIN_DRAW = 1 << 14


def _draw(key: jax.Array, bound: float, shape: tuple[int, ...], init: str, dtype,
          host_cut: bool) -> jax.Array:
    """The draw of ``shape`` entries: a power-of-two length (at least :data:`_MIN_DRAW`) cut on
    the host when allowed."""
    n = int(np.prod(shape))
    if host_cut and n <= _BUCKET_MAX:
        length = max(_MIN_DRAW, 1 << max(0, n - 1).bit_length())
        flat = np.asarray(_draw_flat(key, bound, length, init, dtype))
        # device_put, not jnp.asarray: the latter compiles a program per new shape
        return jax.device_put(flat[:n].reshape(shape))
    return _draw_flat(key, bound, n, init, dtype).reshape(shape)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _draw_flat(key: jax.Array, bound: float, n: int, init: str, dtype) -> jax.Array:
    """``n`` entries of ``U(-bound, bound)`` or ``bound * N(0, 1)``, flat (``bound`` traced)."""
    bound = jnp.asarray(bound).astype(dtype)
    if init == "uniform":
        return jax.random.uniform(key, (n,), dtype, -bound, bound)
    # the barrier keeps XLA from fusing the scaling into the draw, which changes the last bit of
    # some float64 entries relative to scaling the drawn array
    return bound * jax.lax.optimization_barrier(jax.random.normal(key, (n,), dtype))


def _dense(h: jax.Array, layer: dict[str, jax.Array], placement: Placement | None = None
           ) -> jax.Array:
    out = jnp.matmul(h, layer["kernel"], precision=HIGHEST)
    return constrain_neurons(out + jnp.expand_dims(layer["bias"], tuple(range(out.ndim - 1))),
                             placement)


def hidden_activations(
    params: Params, x: jax.Array, *, activation: str | Activation,
    placement: Placement | None = None,
) -> list[jax.Array]:
    """Outputs ``h^(1), ..., h^(L)`` of every hidden layer at ``x`` of shape ``(..., d_in)``.

    ``placement``: the hidden neurons' :class:`~jaxcompress.placement.Placement` during a sharded
    compression (``None``: one device).
    """
    _check_input(params, x, "hidden_activations")
    return _evaluate_jit(params, x, fn=_hidden, act=get_activation(activation),
                         placement=placement)


def _hidden(params: Params, x: jax.Array, act: Activation, placement) -> list[jax.Array]:
    outs = []
    h = x
    for layer in params[:-1]:
        h = act.fn(_dense(h, layer, placement))
        outs.append(h)
    return outs


def _output(params: Params, x: jax.Array, act: Activation, placement) -> jax.Array:
    h = x
    for layer in params[:-1]:
        h = act.fn(_dense(h, layer, placement))
    return _dense(h, params[-1], placement)


# One compiled program per (shapes, fn, act, placement): op by op, every call would compile each
# primitive of a new shape separately (several times slower on first use).
@functools.partial(jax.jit, static_argnames=("fn", "act", "placement"))
def _evaluate_jit(params, x, *, fn, act, placement):
    return fn(params, x, act, placement)


def _check_input(params: Params, x, where: str) -> None:
    """Refuse ``x`` whose last axis is not the network's input size (a trace-time check)."""
    d_in = params[0]["kernel"].shape[-2]
    shape = np.shape(x)
    if not shape or shape[-1] != d_in:
        raise ValueError(f"{where}: x has shape {shape}; expected (..., {d_in}): the network "
                         f"takes inputs of size {d_in}")


def apply(params: Params, x: jax.Array, *, activation: str | Activation,
          placement: Placement | None = None) -> jax.Array:
    """Evaluate the MLP at ``x`` of shape ``(..., d_in)``; returns ``(..., d_out)``.

    Every matmul requests ``Precision.HIGHEST`` so float32 on GPUs does not fall back to TF32.
    An ``x`` whose last axis is not ``d_in`` is a ``ValueError`` naming both sizes.
    ``placement``: as in :func:`hidden_activations`.
    """
    _check_input(params, x, "apply")
    return _evaluate_jit(params, x, fn=_output, act=get_activation(activation),
                         placement=placement)


def _is_params_list(params: Any) -> bool:
    return (isinstance(params, (list, tuple)) and len(params) > 0
            and all(isinstance(layer, dict) and "kernel" in layer for layer in params))


def layer_sizes(params: Any) -> list[int]:
    """``[d_in, d_1, ..., d_L, d_out]`` of a params list, or of any network: a traced network
    or module, a compressed result, a loaded model (``d_in`` and the width of every neuron
    group in program order).

    >>> jc.layer_sizes(jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 8, 1]))
    [2, 16, 8, 1]
    """
    if isinstance(params, NetworkLike):
        return params.layer_sizes()
    if not _is_params_list(params):
        raise TypeError("layer_sizes: expected a params list [{'kernel': ..., 'bias': ...}, ...] "
                        "or a network (jc.trace, jc.trace_module, a compressed result, "
                        f"jc.load), got {describe(params)}")
    sizes = [int(params[0]["kernel"].shape[-2])]
    sizes += [int(layer["kernel"].shape[-1]) for layer in params]
    return sizes


def param_count(sizes: Sequence[int]) -> int:
    """Kernels plus biases of a dense MLP with layer sizes ``[d_0, ..., d_{L+1}]``."""
    return int(sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True)))


def num_params(params: Any) -> int:
    """Number of scalar parameters of one network: kernels and biases of a params list, every
    parameter leaf of a traced network, module, compressed result or loaded model.

    >>> jc.num_params(jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 8, 1]))
    193
    """
    if isinstance(params, NetworkLike):
        return params.num_params()
    return param_count(layer_sizes(params))


def leaf_count(tree: Any) -> int:
    """The number of scalars in the array leaves of a pytree."""
    return int(sum(int(np.prod(np.shape(leaf))) for leaf in jax.tree_util.tree_leaves(tree)
                   if hasattr(leaf, "shape")))


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _all_finite(arr) -> bool:
    """Whether every entry is finite; on device for arrays spread over several processes."""
    if isinstance(arr, jax.Array) and not arr.is_fully_addressable:
        flag = _finite_jit(arr)  # replicated on every device: read this process's copy
        return bool(np.asarray(flag.addressable_data(0)))
    return bool(np.all(np.isfinite(np.asarray(arr))))


_finite_jit = jax.jit(lambda a: jnp.all(jnp.isfinite(a)))


def require_single_network(params: Params, *, where: str, hint: str) -> tuple[int, Any]:
    """``(d_in, dtype)`` of one network; a stack of networks (3-D kernels) is an error."""
    kernel0 = params[0]["kernel"]
    if kernel0.ndim != 2:
        raise ValueError(
            f"{where}: expected one network (2-D kernels), got kernel shape {kernel0.shape}; "
            f"{hint}"
        )
    return kernel0.shape[0], jnp.result_type(kernel0)


def validate_params(
    params: Any, *, where: str = "jaxcompress", check_finite: bool = True
) -> Params:
    """Check the params convention and return it as a list of dicts.

    Raises ``TypeError``/``ValueError`` naming the layer and the expected vs actual shape. The
    finiteness check only runs on concrete arrays (it is skipped while tracing under ``jit``).
    """
    if isinstance(params, dict) and "params" in params and isinstance(params["params"], dict):
        raise TypeError(
            f"{where}: got a Flax variables dict; pass a list of dense layers "
            "[{'kernel': ..., 'bias': ...}, ...] (see jaxcompress.flax to convert Flax models)."
        )
    if not isinstance(params, (list, tuple)):
        raise TypeError(
            f"{where}: params must be a list of dense layers "
            f"[{{'kernel': (fan_in, fan_out), 'bias': (fan_out,)}}, ...], "
            f"got {type(params).__name__}"
        )
    if len(params) < 2:
        raise ValueError(
            f"{where}: params must have at least 2 layers (one hidden layer), got {len(params)}"
        )
    out = []
    prev = None
    batch = None
    first_dtype = None
    for i, layer in enumerate(params):
        if not isinstance(layer, dict) or set(layer) != {"kernel", "bias"}:
            keys = sorted(layer) if isinstance(layer, dict) else type(layer).__name__
            raise TypeError(
                f"{where}: layer {i} must be a dict with keys 'kernel' and 'bias', got {keys}"
            )
        kernel, bias = layer["kernel"], layer["bias"]
        for name, arr in (("kernel", kernel), ("bias", bias)):
            if not hasattr(arr, "shape") or not hasattr(arr, "dtype"):
                raise TypeError(f"{where}: layer {i} {name} must be an array (e.g. "
                                f"jnp.asarray(...)), got {describe(arr)}")
        kshape, bshape = np.shape(kernel), np.shape(bias)
        if len(kshape) < 2:
            raise ValueError(
                f"{where}: layer {i} kernel must be 2-D (fan_in, fan_out), got shape {kshape}"
            )
        lead = kshape[:-2]
        if batch is None:
            batch = lead
        if lead != batch or bshape != lead + kshape[-1:]:
            raise ValueError(
                f"{where}: layer {i} bias has shape {bshape}; expected {lead + kshape[-1:]} to "
                f"match its kernel of shape {kshape}"
            )
        if prev is not None and kshape[-2] != prev:
            raise ValueError(
                f"{where}: layer {i} kernel has shape {kshape}; expected ({prev}, ·) to match "
                f"layer {i - 1}'s width {prev}"
            )
        if 0 in kshape[-2:]:
            raise ValueError(f"{where}: layer {i} kernel has shape {kshape}; expected every "
                             "width >= 1 (a layer with no inputs or no outputs)")
        if not (jnp.issubdtype(jnp.result_type(kernel), jnp.floating)
                and jnp.issubdtype(jnp.result_type(bias), jnp.floating)):
            raise TypeError(f"{where}: layer {i} has non-floating parameters (kernel "
                            f"{jnp.result_type(kernel)}, bias {jnp.result_type(bias)})")
        for name, arr in (("kernel", kernel), ("bias", bias)):
            dt = jnp.result_type(arr)
            if first_dtype is None:
                first_dtype = dt
            elif dt != first_dtype:
                raise TypeError(f"{where}: layer {i} {name} has dtype {dt}; expected "
                                f"{first_dtype} like layer 0's kernel (one dtype for every "
                                "parameter: cast with jax.tree.map(lambda a: "
                                f"a.astype(jnp.{first_dtype}), params))")
        if check_finite:
            for name, arr in (("kernel", kernel), ("bias", bias)):
                if _is_concrete(arr) and not _all_finite(arr):
                    raise ValueError(f"{where}: layer {i} {name} contains NaN or Inf values")
        prev = kshape[-1]
        out.append({"kernel": kernel, "bias": bias})
    return out
