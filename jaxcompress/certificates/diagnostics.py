"""The paper's Appendix G diagnostics (Eqs. 100-101), sampled where the paper samples.

* ``rho_pole`` (Eq. 100): ``min_j dist(b_j, singularities of sigma) / ||W^(1)_{j,:}||_2`` over
  the layer-1 neurons (for the sigmoid ``sqrt(b_j^2 + pi^2) / ||w_j||``): the image of the
  complex ball ``B_C(0, r)`` under ``z -> w^T z + b`` is exactly the disc of radius ``||w|| r``
  about ``b``, so this is the exact holomorphy radius of ``h^(1)``, i.e. ``rho_f`` of layer 2.
  For layer 1 the same formula is the radius of the layer's own neurons (ours); deeper it
  bounds the radius of ``f`` from above unless singularities cancel.
* ``L_f_sampled`` (Eq. 101's ``Lhat``): ``max ||J f(z)||_2`` over ``n_samples`` points ``z``
  drawn uniformly on the sphere ``|z| = R`` of ``C^d_in`` (``R^{2 d_in}``): ``log ||J f||`` is
  plurisubharmonic, so the supremum over the ball is attained on the sphere. The complex
  Jacobian comes from the chain rule in complex arithmetic. A lower bound on ``L_f(R)``.
* ``q_hat`` (Eq. 101): ``R W_max Lhat_f(R) / rho_sigma``, with the paper's ``W_max`` (Eq. 6)
  and ``rho_sigma`` (Eq. 5); ``q_hat >= 1`` witnesses the failure of Assumption 4 (the paper:
  "Since ``Lhat <= L``, these give ``rho`` upper bounds").
* ``r_violate`` (Appendix G, layer 2): the first grid radius ``r_j = j R / 1000`` at which
  ``r W_max^(2) Lhat_{h^(1)}(r) / rho_sigma`` reaches 1, ``Lhat`` sampled on the sphere of
  radius ``r`` with the same directions at every radius. The scan evaluates every 20th grid
  point until the first crossing, then every grid point of the preceding stretch (the true
  ``L_f`` is nondecreasing in ``r``, and so, up to sampling noise, is ``Lhat``). None when
  ``q_hat < 1`` at ``R``. The paper reports 0.300, 0.287, 0.248, 0.290, 0.261 for its teachers.
* ``strip_ratio`` (ours): the sampled ``max |Im u_i(z)| / rho_sigma`` over the same sphere.
"""

from __future__ import annotations

import math

import numpy as np

from jaxcompress.certificates.chain import Net
from jaxcompress.certificates.records import AppendixG

#: Fine grid of the violating radius: ``r_j = j R / VIOLATE_GRID``.
VIOLATE_GRID = 1000
_COARSE = 20


def sphere_directions(d: int, n: int, seed: int) -> np.ndarray:
    """``n`` points uniform on the unit sphere of ``C^d``, as complex ``(n, d)``."""
    g = np.random.default_rng(seed).standard_normal((n, 2 * d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g[:, :d] + 1j * g[:, d:]


def rho_pole(net: Net) -> float:
    """Eq. 100 over the layer-1 neurons (centre folded into the bias)."""
    return float(np.min(net.rule.singular_distance(net.biases[0]) / net.col2[0]))


def sampled_jacobians(net: Net, z: np.ndarray) -> tuple[list[float], list[float]]:
    """Per hidden layer ``l``: ``max ||J h^(l-1)(z)||_2`` and ``max |Im u^(l)(z)|`` over ``z``."""
    rule = net.rule
    n_samples, d = z.shape
    k1 = net.kernels[0]
    lf, im = [], []
    with np.errstate(all="ignore"):
        u = z @ k1 + net.biases[0][None, :]
        ju = np.broadcast_to(k1.T[None], (n_samples,) + k1.T.shape)
        lf.append(1.0)
        for l in range(1, net.n_hidden + 1):
            im.append(float(np.max(np.abs(u.imag))) if np.all(np.isfinite(u)) else math.inf)
            if l == net.n_hidden:
                break
            jh = rule.cdfn(u)[:, :, None] * ju
            if np.all(np.isfinite(jh)):
                gram = np.swapaxes(jh.conj(), 1, 2) @ jh  # ||J||_2^2 = lambda_max(J^H J)
                lf.append(float(np.sqrt(np.max(np.linalg.eigvalsh(gram)[:, -1]))))
            else:
                lf.append(math.inf)
            kern = net.kernels[l].astype(np.complex128)
            u = rule.cfn(u) @ kern + net.biases[l][None, :]
            flat = np.swapaxes(jh, 1, 2).reshape(n_samples * d, -1) @ kern
            ju = np.swapaxes(flat.reshape(n_samples, d, -1), 1, 2)
    return lf, im


def _layer2_lhat(net: Net, dirs: np.ndarray, r: float) -> float:
    """``max ||J h^(1)(r dir)||_2`` over the directions: ``J^H J = K_1 diag|sigma'(u)|^2
    K_1^T`` is a real ``d x d`` matrix."""
    k1 = net.kernels[0]
    with np.errstate(all="ignore"):
        s = np.abs(net.rule.cdfn(r * dirs @ k1 + net.biases[0][None, :])) ** 2
    if not np.all(np.isfinite(s)):
        return math.inf
    gram = (k1[None, :, :] * s[:, None, :]) @ k1.T  # (n, d, d)
    return float(np.sqrt(max(float(np.max(np.linalg.eigvalsh(gram)[:, -1])), 0.0)))


def violating_radius(net: Net, radius: float, wmax: float, rho_sig: float,
                     dirs: np.ndarray) -> float | None:
    """Appendix G's first sampled violating radius of layer 2 (see the module docstring):
    ``wmax``, ``rho_sig`` are layer 2's ``W_max`` and ``rho_sigma``."""
    if not math.isfinite(rho_sig):
        return None

    def crosses(j: int) -> bool:
        r = radius * j / VIOLATE_GRID
        return r * wmax * _layer2_lhat(net, dirs, r) / rho_sig >= 1.0

    prev = 0
    for j in range(_COARSE, VIOLATE_GRID + 1, _COARSE):
        if crosses(j):
            for i in range(prev + 1, j):
                if crosses(i):
                    return radius * i / VIOLATE_GRID
            return radius * j / VIOLATE_GRID
        prev = j
    return None


def appendix_g(net: Net, radius: float, w_max: list[float], rho_sigma: list[float],
               n_samples: int, seed: int) -> list[AppendixG]:
    """Per hidden layer: ``rho_pole``, ``L_f_sampled``, ``q_hat``, ``r_violate``,
    ``strip_ratio`` (``w_max``, ``rho_sigma``: the paper's Eqs. 6 and 5 per hidden layer)."""
    dirs = sphere_directions(net.kernels[0].shape[0], n_samples, seed)
    lf, im = sampled_jacobians(net, radius * dirs)
    pole = rho_pole(net)
    out = []
    for l in range(net.n_hidden):
        rs = rho_sigma[l]
        finite = math.isfinite(rs)
        out.append(AppendixG(
            rho_pole=pole, L_f_sampled=lf[l],
            q_hat=radius * w_max[l] * lf[l] / rs if finite else 0.0,
            r_violate=violating_radius(net, radius, w_max[1], rho_sigma[1], dirs)
            if l == 1 and finite and (radius * w_max[l] * lf[l] >= rs) else None,
            strip_ratio=im[l] / rs if finite else 0.0))
    return out
