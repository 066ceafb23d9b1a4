"""Random test data without a compiled program per shape (a helper of the tests).

``jax.random.normal(key, shape)`` run eagerly compiles a program for every new shape (in the
default test run: ~200 programs, ~14 CPU-seconds). With JAX's partitionable threefry (the
default) entry ``i`` of a draw depends only on the key and ``i``, so a draw of ``shape`` is the
first entries of a longer draw: drawn at a power-of-two length and cut on the host, it is the
same array bit for bit (``tests/test_mlp.py`` checks the same fact for ``jc.init_mlp``) and
every shape up to that length (at least :data:`MIN_LENGTH`) shares one program. A traced
key (inside ``jax.jit`` / ``jax.vmap``) draws directly.
"""

import functools

import jax
import numpy as np

#: The shortest draw: every shape of at most this many entries shares one program per dtype
#: and kind (as ``jc.init_mlp``'s layers do).
MIN_LENGTH = 1 << 14


def normal(key, shape=(), dtype=None):
    """``jax.random.normal(key, shape, dtype)``, bit for bit."""
    return _drawn(key, tuple(shape), dtype, "normal", 0.0, 1.0)


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``, bit for bit."""
    return _drawn(key, tuple(shape), dtype, "uniform", minval, maxval)


def _drawn(key, shape, dtype, kind, lo, hi):
    n = int(np.prod(shape))
    concrete = not any(isinstance(v, jax.core.Tracer) for v in (key, lo, hi))
    if not (concrete and jax.config.jax_threefry_partitionable) or n == 0:
        if kind == "normal":
            return jax.random.normal(key, shape, _dtype(dtype))
        return jax.random.uniform(key, shape, _dtype(dtype), lo, hi)
    length = max(MIN_LENGTH, 1 << (n - 1).bit_length())
    flat = np.asarray(_flat(key, length, _dtype(dtype), kind, lo, hi))
    return jax.device_put(flat[:n].reshape(shape))


def _dtype(dtype):
    return jax.dtypes.canonicalize_dtype(float if dtype is None else dtype)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _flat(key, length, dtype, kind, lo, hi):
    if kind == "normal":
        return jax.random.normal(key, (length,), dtype)
    return jax.random.uniform(key, (length,), dtype, lo, hi)
