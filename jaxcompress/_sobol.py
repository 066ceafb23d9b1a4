"""Unscrambled Sobol low-discrepancy sequence in pure NumPy.

The Sobol sequence in dimension ``k`` is built from a primitive polynomial over
GF(2) of degree ``s``,

    x^s + a_1 x^(s-1) + ... + a_(s-1) x + 1,

whose inner coefficients ``a_1 ... a_(s-1)`` are packed into the integer ``a``,
together with ``s`` odd initial integers ``m_1 ... m_s`` with ``m_j < 2^j``.
The direction numbers are ``v_j = m_j / 2^j``; the remaining ``m_j`` follow
from the recurrence

    m_j = 2 a_1 m_(j-1) XOR 4 a_2 m_(j-2) XOR ... XOR 2^s m_(j-s) XOR m_(j-s).

Points are generated in Gray-code order (Antonov & Saleev): with ``x_0 = 0``,
``x_(n+1) = x_n XOR v_c`` where ``c`` is the (1-based) index of the lowest zero
bit of ``n``. Equivalently, ``x_n`` is the XOR of the ``v_j`` selected by the
set bits of the Gray code ``n XOR (n >> 1)``, which is what is vectorised here.
Dimension 1 uses ``v_j = 2^-j`` and is the base-2 van der Corput sequence.

The embedded table holds the Joe & Kuo "new-joe-kuo-6.21201" direction
numbers for dimensions 2 to 16, the same numbers used by
``scipy.stats.qmc.Sobol``; with ``scramble=False`` the output matches SciPy
exactly (SciPy is not needed at runtime).

References:
    S. Joe and F. Y. Kuo, "Constructing Sobol sequences with better
    two-dimensional projections", SIAM J. Sci. Comput. 30, 2635-2654 (2008).
    P. Bratley and B. L. Fox, "Algorithm 659: Implementing Sobol's
    quasirandom sequence generator", ACM Trans. Math. Softw. 14, 88-100 (1988).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SOBOL_MAX_DIM", "kronecker", "quasi_random", "sobol"]

_BITS = 32

# Joe & Kuo (2008), new-joe-kuo-6.21201, dimensions 2..16: (s, a, (m_1, ..., m_s)).
_JOE_KUO: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (1, 0, (1,)),
    (2, 1, (1, 3)),
    (3, 1, (1, 3, 1)),
    (3, 2, (1, 1, 1)),
    (4, 1, (1, 1, 3, 3)),
    (4, 4, (1, 3, 5, 13)),
    (5, 2, (1, 1, 5, 5, 17)),
    (5, 4, (1, 1, 5, 5, 5)),
    (5, 7, (1, 1, 7, 11, 19)),
    (5, 11, (1, 1, 5, 1, 1)),
    (5, 13, (1, 1, 1, 3, 11)),
    (5, 14, (1, 3, 5, 5, 31)),
    (6, 1, (1, 3, 3, 9, 7, 49)),
    (6, 13, (1, 1, 1, 15, 21, 21)),
    (6, 16, (1, 3, 1, 13, 27, 49)),
)

SOBOL_MAX_DIM: int = 1 + len(_JOE_KUO)
"""Largest dimension supported by :func:`sobol`."""


def _direction_integers(dim: int) -> np.ndarray:
    """Return the ``(dim, 32)`` uint64 table ``V[k, j-1] = v_j * 2^32`` for dimension k+1."""
    v = np.zeros((dim, _BITS), dtype=np.uint64)
    # Dimension 1: m_j = 1 for all j (van der Corput).
    v[0] = [1 << (_BITS - j) for j in range(1, _BITS + 1)]
    for k in range(1, dim):
        s, a, m_init = _JOE_KUO[k - 1]
        m = list(m_init)
        for j in range(s, _BITS):  # compute m_(j+1) (0-based index j)
            new = m[j - s] ^ (m[j - s] << s)
            for i in range(1, s):
                if (a >> (s - 1 - i)) & 1:
                    new ^= m[j - i] << i
            m.append(new)
        v[k] = [mj << (_BITS - j) for j, mj in enumerate(m, start=1)]
    return v


def sobol(n: int, dim: int, *, skip: int = 0) -> np.ndarray:
    """Return points ``skip .. skip+n-1`` of the unscrambled Sobol sequence.

    Point ``i`` (0-based, the first point is the origin) is the XOR of the
    direction numbers ``v_j = m_j / 2^j`` selected by the bits of the Gray code
    ``i XOR (i >> 1)``, i.e. the Gray-code order ``x_(i+1) = x_i XOR v_c`` with
    ``c`` the index of the lowest zero bit of ``i``. The ``m_j`` beyond the
    tabulated initial values follow the primitive-polynomial recurrence (see
    the module docstring). Arithmetic uses 32-bit integers, so at most ``2^32``
    points are available; the result equals
    ``scipy.stats.qmc.Sobol(d=dim, scramble=False).random(skip + n)[skip:]``.

    Args:
        n: Number of points, ``n >= 0``.
        dim: Dimension, ``1 <= dim <= SOBOL_MAX_DIM`` (16).
        skip: Number of leading points to drop, ``skip >= 0``.

    Returns:
        A float64 array of shape ``(n, dim)`` with entries in ``[0, 1)``.

    Raises:
        ValueError: If an argument is out of range.

    References:
        S. Joe and F. Y. Kuo, SIAM J. Sci. Comput. 30, 2635-2654 (2008).
        P. Bratley and B. L. Fox, ACM Trans. Math. Softw. 14, 88-100 (1988).
    """
    n, dim, skip = int(n), int(dim), int(skip)
    if n < 0:
        raise ValueError(f"sobol: n must be non-negative, got {n}")
    if not 1 <= dim <= SOBOL_MAX_DIM:
        raise ValueError(f"sobol: dim must be between 1 and {SOBOL_MAX_DIM}, got {dim}")
    if skip < 0:
        raise ValueError(f"sobol: skip must be non-negative, got {skip}")
    if skip + n > 1 << _BITS:
        raise ValueError(
            f"sobol: skip + n must be at most 2**{_BITS} = {1 << _BITS}, got {skip + n}"
        )

    v = _direction_integers(dim)
    idx = np.arange(skip, skip + n, dtype=np.uint64)
    gray = idx ^ (idx >> np.uint64(1))
    x = np.zeros((n, dim), dtype=np.uint64)
    one = np.uint64(1)
    nbits = int(skip + n - 1).bit_length() if n else 0
    for j in range(nbits):
        bit = ((gray >> np.uint64(j)) & one).astype(bool)
        x[bit] ^= v[:, j]
    return x.astype(np.float64) * (1.0 / (1 << _BITS))


def _prime_root_alphas(dim: int) -> np.ndarray:
    """``alpha_j = frac(sqrt(p_j))`` for the first ``dim`` primes ``p_j``."""
    primes: list[int] = []
    k = 2
    while len(primes) < dim:
        if all(k % p for p in primes if p * p <= k):
            primes.append(k)
        k += 1
    return np.mod(np.sqrt(np.asarray(primes, np.float64)), 1.0)


def kronecker(n: int, dim: int, *, skip: int = 0) -> np.ndarray:
    """Points ``skip .. skip+n-1`` of the Kronecker (Richtmyer) sequence of ``[0, 1)^dim``.

    Point ``i`` is ``frac(1/2 + i * alpha)`` with ``alpha_j = frac(sqrt(p_j))``, ``p_j`` the
    ``j``-th prime: the ``alpha_j`` are linearly independent over the rationals, so the sequence
    is equidistributed with low discrepancy in **any** dimension, extensible (``skip`` offsets
    into it) and deterministic. Used where the embedded Sobol table ends
    (``dim > SOBOL_MAX_DIM``; ours). Square roots of primes rather than the powers of one
    generalised golden ratio (Roberts' ``R_d``): those ``alpha_j`` vary smoothly with ``j``, so in
    hundreds of dimensions the first thousands of points have strongly correlated coordinates
    (measured: the radii of 2,048 points mapped onto a 256-dimensional ball were far from
    uniform), which these are not. ``i * alpha`` is reduced modulo 1 in float64, so coordinates
    are accurate to about ``1e-16 (skip + n)``.

    Returns:
        A float64 array of shape ``(n, dim)`` with entries in ``[0, 1)``.
    """
    n, dim, skip = int(n), int(dim), int(skip)
    if n < 0 or dim < 1 or skip < 0:
        raise ValueError(f"kronecker: need n >= 0, dim >= 1, skip >= 0; got n={n}, dim={dim}, "
                         f"skip={skip}")
    alpha = _prime_root_alphas(dim)
    i = np.arange(skip, skip + n, dtype=np.float64)[:, None]
    return np.mod(0.5 + np.mod(i * alpha[None], 1.0), 1.0)


def quasi_random(n: int, dim: int, *, skip: int = 0) -> np.ndarray:
    """Points ``skip .. skip+n-1`` of the library's low-discrepancy design of ``[0, 1)^dim``:
    :func:`sobol` up to ``SOBOL_MAX_DIM`` dimensions (the paper's Sobol points), the
    Kronecker sequence of :func:`kronecker` beyond (ours: the embedded Joe-Kuo table ends at 16)."""
    if int(dim) <= SOBOL_MAX_DIM:
        return sobol(n, dim, skip=skip)
    return kronecker(n, dim, skip=skip)
