"""Argument checks shared by the public functions (one place, one wording).

Every check names the function (``where``), the argument, what was expected and what was given,
and lets traced values through (under ``jax.jit`` nothing can be read, let alone refused: the
functions that take traced numbers make their result say so instead, e.g. a NaN error
estimate; see :func:`jaxcompress.compress`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["COMPUTE_DTYPES", "as_real_array", "check_compute_dtype", "check_finite",
           "check_info_matches", "check_key", "check_positive_int", "describe",
           "finite_number", "is_concrete"]

#: Parameter dtypes the compression computes in (LAPACK's QR and least squares have no half
#: precision).
COMPUTE_DTYPES = ("float32", "float64")


def is_concrete(x: Any) -> bool:
    """Whether ``x`` holds readable values (not a tracer of ``jax.jit`` / ``jax.vmap``)."""
    return not isinstance(x, jax.core.Tracer)


def describe(value: Any) -> str:
    """A short description of ``value`` for an error message (never a whole array)."""
    if isinstance(value, jax.core.Tracer):
        return f"a traced {value.dtype}{list(value.shape)}"
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        arr = value
        if arr.size <= 4 and not jax.dtypes.issubdtype(arr.dtype, jax.dtypes.prng_key):
            return f"{arr.dtype}{list(arr.shape)} {np.asarray(arr).tolist()}"
        return f"{arr.dtype}{list(arr.shape)}"
    text = repr(value)
    if isinstance(value, (list, tuple)) and len(text) > 60:
        return f"a {type(value).__name__} of length {len(value)}"
    return text if len(text) <= 60 else f"a {type(value).__name__}"


@functools.cache
def _legacy_key_shape(impl: str) -> tuple[int, ...]:
    del impl  # the cache key: the shape follows jax_default_prng_impl
    return tuple(jax.eval_shape(jax.random.PRNGKey, 0).shape)


def seed_key(seed: int = 0) -> jax.Array:
    """``jax.random.PRNGKey(seed)``, built on the host where its bits are known: the default
    threefry key of a seed ``0 <= seed < 2**31`` is ``[0, seed]`` (``uint32``). ``PRNGKey``
    compiles two small programs of its own, which a command line or a first call waits for;
    another implementation or seed is left to ``PRNGKey``."""
    if (str(jax.config.jax_default_prng_impl) == "threefry2x32"
            and isinstance(seed, (int, np.integer)) and 0 <= seed < 2**31):
        return jax.device_put(np.asarray([0, seed], np.uint32))
    return jax.random.PRNGKey(seed)


def check_key(key: Any, where: str, name: str = "key") -> None:
    """Refuse anything but one PRNG key: ``jax.random.key(s)`` or ``jax.random.PRNGKey(s)``.

    A typed key array of shape ``()`` or a ``uint32`` array of the default implementation's key
    shape (``(2,)`` for threefry) pass, traced or not; ``None``, ints, floats, arrays of another
    dtype or shape raise (``TypeError`` for a non-array, ``ValueError`` for a wrong array).
    """
    hint = f"e.g. {name}=jax.random.PRNGKey(0) or jax.random.key(0)"
    if not isinstance(key, (jax.Array, np.ndarray)):
        raise TypeError(f"{where}: {name} must be a PRNG key ({hint}), got {describe(key)}")
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.ndim == 0:
            return
        expected = "a single typed key of shape ()"
    else:
        shape = _legacy_key_shape(str(jax.config.jax_default_prng_impl))
        if key.dtype == np.uint32 and tuple(key.shape) == shape:
            return
        expected = f"a uint32 array of shape {shape} or a typed key"
    raise ValueError(f"{where}: {name} must be one PRNG key ({expected}; {hint}), got "
                     f"{describe(key)}")


def check_positive_int(value: Any, where: str, name: str, *, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum``; bools, floats and smaller values raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{where}: {name} must be >= {minimum} (an int), got "
                         f"{describe(value)}")
    return int(value)


def check_finite(x: Any, where: str, name: str) -> None:
    """Refuse NaN or Inf entries of a concrete array (a traced one passes: see the module)."""
    if not is_concrete(x):
        return
    arr = np.asarray(x)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))
        raise ValueError(f"{where}: {name} must be finite; it has {len(bad)} NaN or Inf entries "
                         f"(the first at index {tuple(int(i) for i in bad[0])}: "
                         f"{arr[tuple(bad[0])]})")


def as_real_array(x: Any, where: str, name: str) -> Any:
    """``x`` as a real array: lists become NumPy float64 arrays; complex, non-numeric or ragged
    input raises. Tracers and arrays pass through (checked for dtype only)."""
    if isinstance(x, (list, tuple)):
        try:
            x = np.asarray(x)
        except ValueError as e:  # ragged nesting
            raise ValueError(f"{where}: {name} must be a rectangular array of numbers, got a "
                             f"ragged {type(x).__name__} ({str(e).splitlines()[0]})") from None
        if x.dtype == object or not (np.issubdtype(x.dtype, np.number)
                                     or x.dtype == np.bool_):
            raise TypeError(f"{where}: {name} must be an array of real numbers, got a list of "
                            f"{x.dtype}")
        if np.issubdtype(x.dtype, np.complexfloating):
            raise TypeError(f"{where}: {name} must be real, got complex values")
        return x.astype(np.float64)
    if not isinstance(x, (jax.Array, np.ndarray, np.generic)):
        raise TypeError(f"{where}: {name} must be an array, got {describe(x)}")
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{where}: {name} must be real, got dtype {x.dtype} (take the real "
                        "part explicitly if that is what you mean)")
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)):
        raise TypeError(f"{where}: {name} must be an array of real numbers, got dtype {x.dtype}")
    return x


def check_compute_dtype(dtype: Any, where: str) -> None:
    """Refuse parameters in a dtype the compression cannot compute in (float16, bfloat16)."""
    if jnp.dtype(dtype).name not in COMPUTE_DTYPES:
        raise TypeError(f"{where}: params have dtype {jnp.dtype(dtype).name}; expected one of "
                        f"{COMPUTE_DTYPES} (the selection's QR and least squares have no half "
                        "precision): cast with jax.tree.map(lambda a: a.astype(jnp.float32), "
                        "params)")


def check_info_matches(info: Any, sizes: list[int], activation: str | None, where: str) -> None:
    """Refuse a compression record that describes another network than ``sizes``.

    ``info`` is a :class:`~jaxcompress.CompressInfo` (one network): its hidden layers' output
    widths must be the params' hidden widths, and its activation the given one.
    """
    layers = getattr(info, "layers", None)
    if layers is None or not hasattr(info, "activation"):
        raise TypeError(f"{where}: info must be a jc.CompressInfo (the second result of "
                        f"jc.compress), got {type(info).__name__}")
    hidden = list(sizes[1:-1])
    widths = [int(li.width_out) for li in layers]
    if widths != hidden:
        raise ValueError(f"{where}: info describes hidden widths {widths}; the params have "
                         f"{hidden} (info belongs to another network)")
    if activation is not None and info.activation != activation:
        raise ValueError(f"{where}: info says activation {info.activation!r}; the params are "
                         f"given with activation {activation!r}")


def finite_number(value: Any) -> bool:
    """Whether ``value`` is one finite real number (not a string or a bool)."""
    if isinstance(value, (str, bytes, bool)):
        return False
    try:
        return np.ndim(value) == 0 and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
