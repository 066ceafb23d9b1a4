"""The zoo: coordinate-network architectures as people write them, each ``(fn, params)``.

Issue 22, point 5. Every architecture is written here from its paper or its library's documented
API (nothing is downloaded), in the style its users write it, and built by :func:`build`::

    model = build("siren", "small")          # or "bench"; seed=...; hidden=[...] overrides
    y = model.fn(model.params, x)            # x: (n, model.d_in) -> (n, model.d_out)
    net = jc.trace(model.fn, model.params, x)

``model.module`` is the user's module object where the architecture is one (nnx, linen,
Equinox), else ``None``; ``model.hidden_widths(params)`` reads the hidden widths back from a
parameter pytree (a compressed one too), so :func:`build` can make a network of the compressed
size to train from scratch.

``nnx_custom``
    an ``nnx.Module`` with a custom ``__call__``: ``nnx.Linear`` layers in an ``nnx.List``,
    ``jax.nn.gelu`` (tanh approximation, its default) between them; ``fn`` merges the graph
    definition with the state (``nnx.split`` / ``nnx.merge``).
``linen_compact``
    a linen ``@nn.compact`` MLP with a ``features: Sequence[int]`` field, tanh; ``fn`` is
    ``model.apply`` on the variables dict.
``eqx_mlp``
    ``eqx.nn.MLP`` (tanh, ``(out, in)`` kernels) applied to a batch under ``jax.vmap``;
    ``params, static = eqx.partition(model, eqx.is_array)`` and ``fn`` combines them.
    Equinox is optional: imported only when this model is built.
``siren``
    SIREN (Sitzmann et al. 2020): hidden layers ``sin(omega_0 (x W + b))`` with ``omega_0 = 30``
    on every sine layer, a linear output; initialisation as in the paper's code: first layer
    ``W ~ U(-1/d_in, 1/d_in)``, later layers ``W ~ U(-sqrt(6/n)/omega_0, sqrt(6/n)/omega_0)``
    (``n`` the fan-in), biases PyTorch's ``nn.Linear`` default ``U(-1/sqrt(n), 1/sqrt(n))``.
``fourier_tanh``, ``fourier_relu``
    Fourier features (Tancik et al. 2020) ``gamma(x) = [cos(2 pi x B), sin(2 pi x B)]`` with a
    fixed Gaussian ``B`` (``d_in x m``, entries ``N(0, scale^2)``; a constant closed over by
    ``fn``, not a parameter), then a tanh / ReLU MLP.
``sdf_igr``
    an IGR-style signed-distance network (Gropp et al. 2020), 3-D input: softplus with
    ``beta = 100`` (``softplus(100 u) / 100``) on every hidden layer, the input concatenated to
    the hidden state before layer ``skip`` and the concatenation scaled by ``1/sqrt(2)``;
    geometric initialisation (Atzmon & Lipman 2020): hidden ``W ~ N(0, 2/fan_out)``, ``b = 0``,
    last layer ``W ~ N(sqrt(pi/fan_in), 1e-4^2)``, ``b = -radius`` (the SDF of a sphere at init).
``pinn_tanh``
    a plain tanh MLP in the params convention (``[{"kernel", "bias"}]``) for the Poisson PINN of
    ``benchmarks/pinn_poisson.py``.

Tied groups (issue 23, :data:`TIED_MODELS`), written from jaxpi's ``archs.py`` as documented:

``modified_mlp``
    jaxpi's ``ModifiedMlp`` (tanh): a trained Fourier embedding ``[cos(x B), sin(x B)]``, gates
    ``U``, ``V`` shared by every hidden layer (``h <- h U + (1 - h) V``), every kernel stored as
    ``g * v`` (random weight factorisation); Poisson PINN.
``pirate_net``
    jaxpi's ``PirateNet``: the same embedding and gates, residual blocks of three weight-
    factorised layers (two gated) with a trained ``alpha`` (0 at initialisation); Poisson PINN.
``residual_mlp``
    ``s <- s + tanh(s W_i + b_i) W_o + b_o`` blocks on a stream of fixed width; Poisson PINN.
``deeponet``
    ``trunk(y) . branch(u_j)`` on the antiderivative operator of 16 fixed input functions
    ``u_j(s) = c_j + sum_k a_jk cos(k pi s)`` (:func:`operator_family`), sensor values closed
    over; output ``(n, 16)``.

A derivative of the network inside ``fn`` (:data:`DERIVATIVE_MODELS`):

``hamiltonian``
    a Hamiltonian network (Greydanus et al. 2019): a tanh MLP ``H_theta(q, p)`` (params
    convention, one output) whose ``fn`` returns the vector field ``J grad H = (dH/dp, -dH/dq)``,
    ``(n, 2)``, computed with ``jax.grad`` inside ``fn``; the pendulum's field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: Every model of the zoo, in the order the benchmark runs them.
MODELS = ("nnx_custom", "linen_compact", "eqx_mlp", "siren", "fourier_tanh", "fourier_relu",
          "sdf_igr", "pinn_tanh")
#: The models of tied groups (issue 23): gates, weight factorisation, residual streams,
#: DeepONet; in :func:`build` and ``benchmarks/zoo.py`` beside :data:`MODELS`.
TIED_MODELS = ("modified_mlp", "pirate_net", "residual_mlp", "deeponet")
#: Models whose ``fn`` differentiates the network (``jax.grad`` inside ``fn``); selected by
#: name in ``benchmarks/zoo.py``, not in its default set.
DERIVATIVE_MODELS = ("hamiltonian",)
#: A network inside a bigger model: a neural ODE whose vector field is an Equinox MLP inside
#: ``Func(t, y, args)``; selected by name in ``benchmarks/zoo.py``, not in its default set.
ODE_MODELS = ("neural_ode",)

#: The task each model is trained on in ``benchmarks/zoo.py``.
TASKS = {"nnx_custom": "pinn", "linen_compact": "sdf", "eqx_mlp": "sdf", "siren": "image",
         "fourier_tanh": "image", "fourier_relu": "image", "sdf_igr": "sdf", "pinn_tanh": "pinn",
         "modified_mlp": "pinn", "pirate_net": "pinn", "residual_mlp": "pinn",
         "deeponet": "operator", "hamiltonian": "hamiltonian", "neural_ode": "ode"}

#: The antiderivative operator's input functions: ``u_j(s) = c_j + sum_k a_jk cos(k pi s)``.
OPERATOR_FUNCTIONS = 16
OPERATOR_SENSORS = 32
OPERATOR_MODES = 4


#: Input size per task.
D_IN = {"image": 2, "sdf": 3, "pinn": 2, "operator": 1, "hamiltonian": 2, "ode": 2}
#: Output size per task.
D_OUT = {"image": 3, "sdf": 1, "pinn": 1, "operator": OPERATOR_FUNCTIONS, "hamiltonian": 2,
         "ode": 2}

#: Hidden widths (and extra settings) of the small (test) and benchmark-size instances.
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "nnx_custom": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [128, 128, 128]}},
    "linen_compact": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [128, 128, 128]}},
    "eqx_mlp": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [128, 128, 128]}},
    "siren": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [256, 256, 256]}},
    "fourier_tanh": {"small": {"hidden": [24, 24], "features": 8, "scale": 2.0},
                     "bench": {"hidden": [256, 256], "features": 64, "scale": 3.0}},
    "fourier_relu": {"small": {"hidden": [24, 24], "features": 8, "scale": 2.0},
                     "bench": {"hidden": [256, 256], "features": 64, "scale": 3.0}},
    "sdf_igr": {"small": {"hidden": [32, 29, 32], "skip": 2},
                "bench": {"hidden": [128, 125, 128, 128], "skip": 2}},
    "pinn_tanh": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [128, 128, 128]}},
    "modified_mlp": {"small": {"hidden": [24, 24], "features": 8, "scale": 1.0},
                     "bench": {"hidden": [128, 128, 128], "features": 32, "scale": 1.0}},
    "pirate_net": {"small": {"hidden": [24, 24], "features": 8, "scale": 1.0},
                   "bench": {"hidden": [128, 128, 128, 128], "features": 32, "scale": 1.0}},
    "residual_mlp": {"small": {"hidden": [24, 24], "stream": 16},
                     "bench": {"hidden": [128, 128, 128], "stream": 64}},
    "deeponet": {"small": {"hidden": [24, 24], "branch": 24},
                 "bench": {"hidden": [128, 128, 128], "branch": 128}},
    "hamiltonian": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [64, 64]}},
    "neural_ode": {"small": {"hidden": [24, 24]}, "bench": {"hidden": [64, 64]}},
}

OMEGA_0 = 30.0
SOFTPLUS_BETA = 100.0
SDF_RADIUS = 0.5


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One built model of the zoo.

    Attributes:
      name: the key in :data:`MODELS`.
      fn: ``fn(params, x) -> y`` with ``x`` of shape ``(n, d_in)``, ``y`` ``(n, d_out)``.
      params: the parameter pytree the user trains.
      module: the user's module object (nnx / linen / Equinox), else ``None``.
      d_in, d_out: input and output sizes.
      hidden: the hidden widths it was built with.
      hidden_widths: reads the hidden widths of a parameter pytree of this model (the producing
        kernels' output sizes, in layer order).
      config: the settings it was built with (sizes, seed, Fourier scale, ...).
      settings_of: reads the size settings other than ``hidden`` of a parameter pytree of this
        model (``residual_mlp``'s ``stream``, which a compression shrinks too), so that
        ``build(..., hidden=model.hidden_widths(p), settings=model.settings_of(p))`` has the
        sizes of ``p``; ``{}`` for the others.
    """

    name: str
    fn: Callable[[Any, jax.Array], jax.Array]
    params: Any
    module: Any
    d_in: int
    d_out: int
    hidden: tuple[int, ...]
    hidden_widths: Callable[[Any], list[int]]
    config: dict
    settings_of: Callable[[Any], dict] = lambda params: {}


def _uniform(key, shape, bound, dtype):
    return jax.random.uniform(key, shape, dtype, -bound, bound)


def _dense_layers(key, sizes: Sequence[int], dtype, init: Callable) -> list[dict[str, jax.Array]]:
    """``[{"kernel": (a, b), "bias": (b,)}]`` with ``init(i, key, a, b) -> (kernel, bias)``."""
    keys = jax.random.split(key, len(sizes) - 1)
    out = []
    for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        w, bias = init(i, k, a, b)
        out.append({"kernel": jnp.asarray(w, dtype), "bias": jnp.asarray(bias, dtype)})
    return out


def _lecun(i, key, a, b):
    """LeCun-normal kernel, small random bias (a trained-looking start for tanh / GELU nets)."""
    k1, k2 = jax.random.split(key)
    return (jax.random.normal(k1, (a, b)) / math.sqrt(a), 0.1 * jax.random.normal(k2, (b,)))


def _he(i, key, a, b):
    """He-normal kernel, zero bias (ReLU)."""
    return jax.random.normal(key, (a, b)) * math.sqrt(2.0 / a), jnp.zeros((b,))


def _kernel_widths(params) -> list[int]:
    """Output sizes of every layer but the last of a params-convention list."""
    return [int(layer["kernel"].shape[1]) for layer in params[:-1]]


# ------------------------------------------------------------------------------------------------
# The models
# ------------------------------------------------------------------------------------------------


def nnx_custom(key, d_in: int, hidden: Sequence[int], d_out: int, dtype=jnp.float32):
    """An ``nnx.Module`` with its own ``__call__``: Linears in an ``nnx.List``, GELU between."""
    from flax import nnx

    class GeluMLP(nnx.Module):
        def __init__(self, sizes, rngs):
            self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs, param_dtype=dtype)
                                    for a, b in zip(sizes[:-1], sizes[1:], strict=True)])

        def __call__(self, x):
            for layer in self.layers[:-1]:
                x = jax.nn.gelu(layer(x))
            return self.layers[-1](x)

    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    module = GeluMLP([d_in, *hidden, d_out], nnx.Rngs(seed))
    graphdef, state = nnx.split(module)

    def fn(state, x):
        return nnx.merge(graphdef, state)(x)

    def widths(state):
        model = nnx.merge(graphdef, state)
        return [int(layer.kernel[...].shape[1]) for layer in model.layers[:-1]]

    return fn, state, module, widths


def linen_compact(key, d_in: int, hidden: Sequence[int], d_out: int, dtype=jnp.float32):
    """A linen ``@nn.compact`` MLP with a ``features`` field, tanh."""
    import flax.linen as nn

    class MLP(nn.Module):
        features: Sequence[int]

        @nn.compact
        def __call__(self, x):
            for f in self.features[:-1]:
                x = jnp.tanh(nn.Dense(f, param_dtype=dtype)(x))
            return nn.Dense(self.features[-1], param_dtype=dtype)(x)

    module = MLP(features=(*hidden, d_out))
    variables = module.init(key, jnp.zeros((1, d_in), dtype))

    def widths(variables):
        p = variables["params"]
        return [int(p[f"Dense_{i}"]["kernel"].shape[1]) for i in range(len(p) - 1)]

    return module.apply, variables, module, widths


def eqx_mlp(key, d_in: int, hidden: Sequence[int], d_out: int, dtype=jnp.float32):
    """``eqx.nn.MLP`` (tanh) under ``jax.vmap``; ``eqx.partition`` splits arrays from the rest.

    ``eqx.nn.MLP`` has one ``width_size``: ``hidden`` must be equal widths."""
    import equinox as eqx

    if len(set(hidden)) != 1:
        raise ValueError(f"eqx_mlp: eqx.nn.MLP has one width_size; got hidden widths {hidden}")
    module = eqx.nn.MLP(d_in, d_out, hidden[0], len(hidden), activation=jnp.tanh, key=key,
                        dtype=dtype)
    params, static = eqx.partition(module, eqx.is_array)

    def fn(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    def widths(params):
        return [int(layer.weight.shape[0]) for layer in params.layers[:-1]]

    return fn, params, module, widths


def siren_params(key, sizes: Sequence[int], *, omega_0: float = OMEGA_0, dtype=jnp.float32):
    """SIREN's initialisation (Sitzmann et al. 2020, their ``sine_init`` / ``first_layer_sine_init``
    on the weights; PyTorch's default on the biases)."""

    def init(i, k, a, b):
        k1, k2 = jax.random.split(k)
        bound = 1.0 / a if i == 0 else math.sqrt(6.0 / a) / omega_0
        return _uniform(k1, (a, b), bound, jnp.float32), _uniform(k2, (b,), 1 / math.sqrt(a),
                                                                  jnp.float32)

    return _dense_layers(key, sizes, dtype, init)


def siren_fn(omega_0: float = OMEGA_0):
    """``x -> sin(omega_0 (x W_1 + b_1)) -> ... -> x W_L + b_L``."""

    def fn(params, x):
        for layer in params[:-1]:
            x = jnp.sin(omega_0 * (x @ layer["kernel"] + layer["bias"]))
        return x @ params[-1]["kernel"] + params[-1]["bias"]

    return fn


def siren(key, d_in: int, hidden: Sequence[int], d_out: int, dtype=jnp.float32):
    return (siren_fn(), siren_params(key, [d_in, *hidden, d_out], dtype=dtype), None,
            _kernel_widths)


def fourier_matrix(d_in: int, features: int, scale: float, seed: int = 0) -> np.ndarray:
    """The fixed Gaussian ``B`` (``d_in x features``, entries ``N(0, scale^2)``), seed ``seed``."""
    return np.random.default_rng(seed).normal(0.0, scale, (d_in, features))


def fourier_fn(b: np.ndarray, activation: Callable):
    """``x -> [cos(2 pi x B), sin(2 pi x B)] -> activation MLP -> linear`` (``B`` closed over)."""

    def fn(params, x):
        z = 2.0 * jnp.pi * (x @ jnp.asarray(b, x.dtype))
        h = jnp.concatenate([jnp.cos(z), jnp.sin(z)], axis=-1)
        for layer in params[:-1]:
            h = activation(h @ layer["kernel"] + layer["bias"])
        return h @ params[-1]["kernel"] + params[-1]["bias"]

    return fn


def _fourier(activation, init):
    def make(key, d_in, hidden, d_out, dtype=jnp.float32, *, features: int, scale: float):
        b = fourier_matrix(d_in, features, scale)
        params = _dense_layers(key, [2 * features, *hidden, d_out], dtype, init)
        return fourier_fn(b, activation), params, None, _kernel_widths

    return make


fourier_tanh = _fourier(jnp.tanh, _lecun)
fourier_relu = _fourier(jax.nn.relu, _he)


def sdf_fn(skip: int, beta: float = SOFTPLUS_BETA):
    """IGR's network: ``h <- softplus(beta (h W + b)) / beta`` on hidden layers, and before layer
    ``skip`` (0-based) ``h <- [h, x] / sqrt(2)``; a linear output."""

    def fn(params, x):
        h = x
        for i, layer in enumerate(params):
            if i == skip:
                h = jnp.concatenate([h, x], axis=-1) / math.sqrt(2.0)
            h = h @ layer["kernel"] + layer["bias"]
            if i < len(params) - 1:
                h = jax.nn.softplus(beta * h) / beta
        return h

    return fn


def sdf_params(key, sizes: Sequence[int], skip: int, *, radius: float = SDF_RADIUS,
               dtype=jnp.float32):
    """Geometric initialisation: the network starts near the SDF of a sphere of ``radius``.

    ``sizes[i]`` is layer ``i``'s output width; layer ``skip`` reads ``sizes[skip] + d_in``."""
    d_in = sizes[0]
    ins = [a + (d_in if i == skip else 0) for i, a in enumerate(sizes[:-1])]
    keys = jax.random.split(key, len(ins))
    out = []
    for i, (k, a, b) in enumerate(zip(keys, ins, sizes[1:], strict=True)):
        if i == len(ins) - 1:
            w = math.sqrt(math.pi / a) + 1e-4 * jax.random.normal(k, (a, b))
            bias = jnp.full((b,), -radius)
        else:
            w = jax.random.normal(k, (a, b)) * math.sqrt(2.0 / b)
            bias = jnp.zeros((b,))
        out.append({"kernel": jnp.asarray(w, dtype), "bias": jnp.asarray(bias, dtype)})
    return out


def sdf_igr(key, d_in, hidden, d_out, dtype=jnp.float32, *, skip: int):
    if not 1 <= skip < len(hidden) + 1:
        raise ValueError(f"sdf_igr: skip must be a layer index in 1..{len(hidden)}, got {skip}")
    return (sdf_fn(skip), sdf_params(key, [d_in, *hidden, d_out], skip, dtype=dtype), None,
            _kernel_widths)


def pinn_fn(params, x):
    """``tanh(x W_1 + b_1) -> ... -> x W_L + b_L`` (``jc.apply(..., activation="tanh")``)."""
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["kernel"] + layer["bias"])
    return x @ params[-1]["kernel"] + params[-1]["bias"]


def pinn_tanh(key, d_in, hidden, d_out, dtype=jnp.float32):
    return pinn_fn, _dense_layers(key, [d_in, *hidden, d_out], dtype, _lecun), None, _kernel_widths


# ------------------------------------------------------------------------------------------------
# Tied groups (issue 23): jaxpi's modified MLP and PirateNet, a residual MLP, a DeepONet
# ------------------------------------------------------------------------------------------------


def weight_fact(key, a: int, b: int, dtype, *, mean: float = 1.0, stddev: float = 0.1):
    """jaxpi's random weight factorisation of a Glorot kernel ``w`` (``a x b``):
    ``g = exp(N(mean, stddev^2))`` per output neuron, ``v = w / g``, so ``w = g * v``."""
    k1, k2 = jax.random.split(key)
    w = jax.random.normal(k1, (a, b)) * math.sqrt(2.0 / (a + b))
    g = jnp.exp(mean + stddev * jax.random.normal(k2, (b,)))
    return {"g": jnp.asarray(g, dtype), "v": jnp.asarray(w / g, dtype),
            "bias": jnp.zeros((b,), dtype)}


def fact_dense(p, x):
    """jaxpi's ``Dense`` with ``reparam = weight_fact``: ``x (g * v) + bias``."""
    return x @ (p["g"] * p["v"]) + p["bias"]


def fourier_embs(b, x):
    """jaxpi's ``FourierEmbs``: ``[cos(x B), sin(x B)]`` with ``B`` a trained parameter."""
    z = x @ b
    return jnp.concatenate([jnp.cos(z), jnp.sin(z)], axis=-1)


def modified_mlp_fn(params, x):
    """jaxpi's ``ModifiedMlp`` (tanh): Fourier embedding ``e``, gates ``U = tanh(D_u e)``,
    ``V = tanh(D_v e)`` shared by every hidden layer ``h <- tanh(D_l h); h <- h U + (1 - h) V``,
    a linear output; every ``D`` weight-factorised."""
    e = fourier_embs(params["fourier"], x)
    u = jnp.tanh(fact_dense(params["u"], e))
    v = jnp.tanh(fact_dense(params["v"], e))
    h = e
    for layer in params["layers"]:
        h = jnp.tanh(fact_dense(layer, h))
        h = h * u + (1 - h) * v
    return fact_dense(params["out"], h)


def _fourier_param(key, d_in, features, scale, dtype):
    return jnp.asarray(scale * jax.random.normal(key, (d_in, features)), dtype)


def modified_mlp(key, d_in, hidden, d_out, dtype=jnp.float32, *, features: int, scale: float):
    if len(set(hidden)) != 1:
        raise ValueError(f"modified_mlp: the gates are shared, so every hidden width must be "
                         f"equal; got {hidden}")
    w = hidden[0]
    keys = jax.random.split(key, len(hidden) + 4)
    params = {"fourier": _fourier_param(keys[0], d_in, features, scale, dtype),
              "u": weight_fact(keys[1], 2 * features, w, dtype),
              "v": weight_fact(keys[2], 2 * features, w, dtype),
              "layers": [weight_fact(k, a, w, dtype) for k, a in
                         zip(keys[3:-1], [2 * features] + list(hidden[:-1]), strict=True)],
              "out": weight_fact(keys[-1], w, d_out, dtype)}

    def widths(p):
        return [int(layer["g"].shape[0]) for layer in p["layers"]]

    return modified_mlp_fn, params, None, widths


def pirate_fn(params, x):
    """jaxpi's ``PirateNet``: Fourier embedding, gates ``U``, ``V`` as in the modified MLP, and
    residual blocks ``f = tanh(D_3 g(tanh(D_2 g(tanh(D_1 s)))))`` (``g(h) = h U + (1 - h) V``),
    ``s <- alpha f + (1 - alpha) s`` with a trained scalar ``alpha`` (0 at initialisation), a
    linear output."""
    s = fourier_embs(params["fourier"], x)
    u = jnp.tanh(fact_dense(params["u"], s))
    v = jnp.tanh(fact_dense(params["v"], s))
    for block in params["blocks"]:
        h = jnp.tanh(fact_dense(block["d1"], s))
        h = h * u + (1 - h) * v
        h = jnp.tanh(fact_dense(block["d2"], h))
        h = h * u + (1 - h) * v
        h = jnp.tanh(fact_dense(block["d3"], h))
        s = block["alpha"] * h + (1 - block["alpha"]) * s
    return fact_dense(params["out"], s)


def pirate_net(key, d_in, hidden, d_out, dtype=jnp.float32, *, features: int, scale: float,
               alpha: float = 0.0):
    """``hidden``: the inner width of every block (the gates' width); the stream is the
    embedding's width ``2 features``. One block per two entries of ``hidden``."""
    if len(set(hidden)) != 1 or len(hidden) % 2:
        raise ValueError(f"pirate_net: hidden must be an even number of equal widths (two "
                         f"inner layers per block), got {hidden}")
    w, stream = hidden[0], 2 * features
    keys = jax.random.split(key, 4 + len(hidden) // 2)
    blocks = []
    for k in keys[4:]:
        k1, k2, k3 = jax.random.split(k, 3)
        blocks.append({"d1": weight_fact(k1, stream, w, dtype),
                       "d2": weight_fact(k2, w, w, dtype),
                       "d3": weight_fact(k3, w, stream, dtype),
                       "alpha": jnp.asarray(alpha, dtype)})
    params = {"fourier": _fourier_param(keys[0], d_in, features, scale, dtype),
              "u": weight_fact(keys[1], stream, w, dtype),
              "v": weight_fact(keys[2], stream, w, dtype),
              "blocks": blocks, "out": weight_fact(keys[3], stream, d_out, dtype)}

    def widths(p):
        return [int(b[n]["g"].shape[0]) for b in p["blocks"] for n in ("d1", "d2")]

    return pirate_fn, params, None, widths


def residual_fn(params, x):
    """``s = tanh(x W_0 + b_0)``, blocks ``s <- s + tanh(s W_i + b_i) W_o + b_o``, a linear
    output of ``tanh(s)``."""
    s = jnp.tanh(x @ params["inp"]["kernel"] + params["inp"]["bias"])
    for block in params["blocks"]:
        h = jnp.tanh(s @ block["inner"]["kernel"] + block["inner"]["bias"])
        s = s + h @ block["outer"]["kernel"] + block["outer"]["bias"]
    return jnp.tanh(s) @ params["out"]["kernel"] + params["out"]["bias"]


def residual_mlp(key, d_in, hidden, d_out, dtype=jnp.float32, *, stream: int):
    """``hidden``: the inner width of each block (one block per entry); ``stream`` its width."""
    keys = jax.random.split(key, 2 + len(hidden))
    blocks = []
    for k, w in zip(keys[2:], hidden, strict=True):
        inner, outer = _dense_layers(k, [stream, w, stream], dtype, _lecun)
        outer = {"kernel": 0.5 * outer["kernel"], "bias": outer["bias"]}
        blocks.append({"inner": inner, "outer": outer})
    (inp,) = _dense_layers(keys[0], [d_in, stream], dtype, _lecun)
    (out,) = _dense_layers(keys[1], [stream, d_out], dtype, _lecun)
    params = {"inp": inp, "blocks": blocks, "out": out}

    def widths(p):
        return [int(b["inner"]["kernel"].shape[1]) for b in p["blocks"]]

    return residual_fn, params, None, widths


def _stream_of(p) -> dict:
    """``residual_mlp``'s stream width (a tied set since issue 32: compressed too)."""
    return {"stream": int(p["inp"]["kernel"].shape[1])}


#: Per model, how :attr:`ZooModel.settings_of` reads its size settings other than ``hidden``.
_SETTINGS_OF = {"residual_mlp": _stream_of}


def operator_family(seed: int = 0, n: int = OPERATOR_FUNCTIONS):
    """``(coef (n, modes + 1), sensors (n, m))``: the input functions and their sensor values
    at ``m`` equispaced points of ``[0, 1]`` (fixed: generated in code)."""
    rng = np.random.default_rng(seed)
    coef = rng.normal(0.0, 1.0, (n, OPERATOR_MODES + 1)) / np.arange(1, OPERATOR_MODES + 2)
    s = np.linspace(0.0, 1.0, OPERATOR_SENSORS)
    k = np.arange(1, OPERATOR_MODES + 1)
    sensors = coef[:, :1] + coef[:, 1:] @ np.cos(np.pi * np.outer(k, s))
    return coef, sensors


def antiderivative(coef, y):
    """``G(u_j)(y) = c_j y + sum_k a_jk sin(k pi y) / (k pi)`` at ``y`` ``(n, 1)``:
    ``(n, functions)``."""
    k = jnp.arange(1, coef.shape[1], dtype=y.dtype)[None]              # (1, modes)
    c = jnp.asarray(coef, y.dtype)
    # y (n, 1) * k (1, modes): (n, modes). (An earlier y[..., None] made the sine part (n, 1, 16),
    # which broadcast against y * c_0 to (n, n, 16) under rank promotion: the DeepONet of
    # benchmarks/zoo.py was trained and scored against that, see benchmarks/README.md.)
    return y * c[None, :, 0] + (jnp.sin(jnp.pi * y * k) / (jnp.pi * k)) @ c[:, 1:].T


def deeponet_fn(sensors: np.ndarray):
    """A DeepONet on the fixed input functions ``sensors`` ``(functions, m)`` (closed over):
    ``y -> trunk(y) . branch(u_j) + b_0`` for every ``j``; trunk: tanh layers (the last one
    too, width ``p``); branch: tanh layers and a linear last layer of width ``p``."""

    def fn(params, y):
        t = y
        for layer in params["trunk"]:
            t = jnp.tanh(t @ layer["kernel"] + layer["bias"])
        b = jnp.asarray(sensors, y.dtype)
        for layer in params["branch"][:-1]:
            b = jnp.tanh(b @ layer["kernel"] + layer["bias"])
        b = b @ params["branch"][-1]["kernel"] + params["branch"][-1]["bias"]
        return t @ b.T + params["b0"]

    return fn


def deeponet(key, d_in, hidden, d_out, dtype=jnp.float32, *, branch: int):
    """``hidden``: the trunk's widths, the last one the latent dimension ``p``; the branch has
    one hidden layer of width ``branch`` and a linear last layer of width ``p``."""
    _, sensors = operator_family()
    if d_out != sensors.shape[0]:
        raise ValueError(f"deeponet: d_out must be the number of input functions "
                         f"{sensors.shape[0]}, got {d_out}")
    latent = hidden[-1]
    k1, k2 = jax.random.split(key)
    params = {"trunk": _dense_layers(k1, [d_in, *hidden], dtype, _lecun),
              "branch": _dense_layers(k2, [sensors.shape[1], branch, latent], dtype, _lecun),
              "b0": jnp.zeros((), dtype)}

    def widths(p):
        return [int(layer["kernel"].shape[1]) for layer in p["trunk"]]

    return deeponet_fn(sensors), params, None, widths


def hamiltonian_fn(params, x):
    """``J grad H = (dH/dp, -dH/dq)`` of the tanh MLP ``H(q, p)`` (:func:`pinn_fn`) at every row
    ``x = (q, p)``: the gradient of the batch's summed energy is each row's own gradient."""
    g = jax.grad(lambda x: pinn_fn(params, x)[:, 0].sum())(x)
    return jnp.stack([g[:, 1], -g[:, 0]], axis=-1)


def hamiltonian(key, d_in, hidden, d_out, dtype=jnp.float32):
    """``d_out`` is the field's size (2 = ``d_in``); ``H`` itself has one output."""
    if d_in != 2 or d_out != 2:
        raise ValueError(f"hamiltonian: (q, p) -> (dq/dt, dp/dt) is 2 -> 2, got {d_in} -> "
                         f"{d_out}")
    return (hamiltonian_fn, _dense_layers(key, [d_in, *hidden, 1], dtype, _lecun), None,
            _kernel_widths)


def neural_ode(key, d_in, hidden, d_out, dtype=jnp.float32):
    """A neural ODE ``y' = f(t, y)`` as Equinox users write one: ``NeuralODE(Func(mlp))``,
    ``Func(t, y, args)`` applying an ``eqx.nn.MLP`` (tanh, equal hidden widths) to ``y``.
    ``params`` are the vector field's MLP (``eqx.partition(model.func.mlp, eqx.is_array)``),
    ``fn`` the field on a batch of states; ``module`` the whole model, whose ``__call__``
    integrates with fixed-step RK4 (:func:`rk4`). ``jc.trace_module(module, y,
    part=lambda m: m.func.mlp)`` traces the same network."""
    import equinox as eqx

    if d_in != d_out or len(set(hidden)) != 1:
        raise ValueError(f"neural_ode: a vector field maps R^d to R^d with one width_size; got "
                         f"{d_in} -> {d_out}, hidden {hidden}")

    class Func(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, t, y, args):
            return self.mlp(y)

    class NeuralODE(eqx.Module):
        func: Func

        def __call__(self, y0, dt: float = 0.1, steps: int = 100):
            return rk4(lambda y: jax.vmap(lambda v: self.func(0.0, v, None))(y), y0, dt, steps)

    mlp = eqx.nn.MLP(d_in, d_out, hidden[0], len(hidden), activation=jnp.tanh, key=key,
                     dtype=dtype)
    params, static = eqx.partition(mlp, eqx.is_array)

    def fn(params, y):
        return jax.vmap(eqx.combine(params, static))(y)

    def widths(params):
        return [int(layer.weight.shape[0]) for layer in params.layers[:-1]]

    return fn, params, NeuralODE(Func(mlp)), widths


def rk4(field: Callable, y0: jax.Array, dt: float, steps: int) -> jax.Array:
    """The trajectory ``(steps + 1, n, d)`` of ``y' = field(y)`` from the states ``y0`` by the
    classical fixed-step Runge-Kutta method (``field`` maps a batch of states to theirs)."""
    def step(y, _):
        k1 = field(y)
        k2 = field(y + 0.5 * dt * k1)
        k3 = field(y + 0.5 * dt * k2)
        k4 = field(y + dt * k3)
        y = y + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return y, y

    _, ys = jax.lax.scan(step, y0, None, length=steps)
    return jnp.concatenate([y0[None], ys], axis=0)


_BUILDERS = {"nnx_custom": nnx_custom, "linen_compact": linen_compact, "eqx_mlp": eqx_mlp,
             "siren": siren, "fourier_tanh": fourier_tanh, "fourier_relu": fourier_relu,
             "sdf_igr": sdf_igr, "pinn_tanh": pinn_tanh, "modified_mlp": modified_mlp,
             "pirate_net": pirate_net, "residual_mlp": residual_mlp, "deeponet": deeponet,
             "hamiltonian": hamiltonian, "neural_ode": neural_ode}


#: The builders whose parameters are arrays drawn from the key, with no module holding them:
#: in float32 (the default), drawn in one compiled program per model and size. Run eagerly,
#: every draw, scale and cast compiled a program of its own (139 programs for the 13 models at
#: size small, 23 now); the float32 draws are the same bits (tests/test_zoo.py checks it). In
#: float64 the compiled program rounds some entries differently (1 ulp: XLA multiplies by the
#: reciprocal of a constant divisor), so float64 models are drawn eagerly, as they always were.
_JITTED = frozenset(_BUILDERS) - {"nnx_custom", "eqx_mlp", "neural_ode"}


@functools.cache
def _compiled_builder(name, d_in, widths, d_out, dtype, cfg):
    """``(draw, parts)``: ``draw(key)`` the parameters of model ``name`` in one ``jax.jit``;
    ``parts["rest"]`` its function, module and width reader (static: made while tracing)."""
    parts = {}

    def draw(key):
        fn, params, module, read = _BUILDERS[name](key, d_in, list(widths), d_out, dtype,
                                                   **dict(cfg))
        parts["rest"] = (fn, module, read)
        return params

    return jax.jit(draw), parts


def build(name: str, size: str = "small", *, seed: int = 0, hidden: Sequence[int] | None = None,
          dtype=jnp.float32, settings: dict | None = None) -> ZooModel:
    """Model ``name`` of :data:`MODELS` at ``size`` ``"small"`` (tests, widths 24-32) or
    ``"bench"`` (``benchmarks/zoo.py``); ``hidden`` overrides the hidden widths (for ``sdf_igr``
    with the skip at the same layer), ``settings`` other size settings
    (:attr:`ZooModel.settings_of`: ``residual_mlp``'s ``stream``)."""
    if name not in _BUILDERS:
        raise ValueError(f"build: name must be one of "
                         f"{MODELS + TIED_MODELS + DERIVATIVE_MODELS + ODE_MODELS}, got {name!r}")
    if size not in ("small", "bench"):
        raise ValueError(f"build: size must be 'small' or 'bench', got {size!r}")
    cfg = dict(SIZES[name][size])
    widths = list(cfg.pop("hidden") if hidden is None else hidden)
    cfg.pop("hidden", None)
    unknown = set(settings or {}) - set(cfg)
    if unknown:
        raise ValueError(f"build: {name} has no settings {sorted(unknown)} (it has "
                         f"{sorted(cfg)})")
    cfg.update(settings or {})
    task = TASKS[name]
    d_in, d_out = D_IN[task], D_OUT[task]
    if name in _JITTED and jnp.dtype(dtype) == jnp.float32:
        draw, parts = _compiled_builder(name, d_in, tuple(widths), d_out, jnp.dtype(dtype),
                                        tuple(sorted(cfg.items())))
        params = draw(jax.random.PRNGKey(seed))
        fn, module, read = parts["rest"]
    else:
        fn, params, module, read = _BUILDERS[name](jax.random.PRNGKey(seed), d_in, widths,
                                                   d_out, dtype, **cfg)
    return ZooModel(name=name, fn=fn, params=params, module=module, d_in=d_in, d_out=d_out,
                    hidden=tuple(widths), hidden_widths=read,
                    config={"size": size, "seed": seed, "hidden": widths, "task": task, **cfg},
                    settings_of=_SETTINGS_OF.get(name, lambda params: {}))


def num_params(params) -> int:
    """The number of scalars in the array leaves of ``params``."""
    return int(sum(np.size(leaf) for leaf in jax.tree_util.tree_leaves(params)
                   if hasattr(leaf, "shape")))
