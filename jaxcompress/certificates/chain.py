"""Ours: the deviation chain, a sharper proof of how far into the complex domain a network stays
holomorphic than the paper's Eq. 8 (and the float64 network it runs on).

Setting. Hidden layers ``l = 1..L-1``: ``u^l = h^{l-1} K_l + b_l``, ``h^l = sigma(u^l)``,
``h^0 = z`` (Flax layout; column ``i`` of ``K_l`` is the incoming weight vector ``w_i`` of neuron
``i``). The domain is a ball of radius ``R`` around its centre ``c`` (a box is replaced by its
circumscribed ball); we write ``z = x - c`` and fold ``c K_1`` into ``b_1``, so the expansion
point is ``0``. The complex ball is ``B^C_r = {x + iy in C^d : |x|^2 + |y|^2 < r^2}``.

The chain (ours). For ``z in B^C_r`` put ``delta^m_i(r) >= sup |u^m_i(z) - u^m_i(Re z)|``. Since
``u^m(Re z)`` is real, ``|Im u^m_i(z)| <= delta^m_i``, and the segment from ``u^m_i(Re z)`` to
``u^m_i(z)`` stays in the strip ``|Im| <= delta^m_i``; with ``S_i = sup |sigma'|`` there, the
mean-value inequality gives ``|h^m_i(z) - h^m_i(Re z)| <= S_i delta^m_i =: Delta_i``. Hence
(layer 1 exactly: ``u^1(z) - u^1(Re z) = i y K_1``, ``|y| < r``)

.. math:: \\delta^1_i = \\|w_i\\|_2 r, \\quad
          \\delta^{m+1}_i = \\min\\Big(\\sum_j |K_{m+1}|_{ji} \\Delta_j,\\;
          \\|K_{m+1}[:, i]\\|_2 N_m\\Big),

with ``N_m = min(||Delta||_2, max_j S_j E_m)`` a bound on ``|h^m(z) - h^m(Re z)|_2`` and
``E_{m+1} = min(||K_{m+1}||_2 N_m, ||delta^{m+1}||_2)`` on ``|u^{m+1}(z) - u^{m+1}(Re z)|_2``
(``E_1 = ||K_1||_2 r``). Both chains are valid, so their minimum is. The chain is valid (and
every ``h^m`` holomorphic on ``B^C_r``, by induction) while every ``delta^m_i`` lies where the
activation's bound rule is finite. For activations unbounded on the strip the rules also need
``|Re u| <= A_i = |u_i(0)| + a_i + delta_i``, with ``a_i`` a bound on ``|u_i(x) - u_i(0)|`` over
the real ball of radius ``r`` from the same two chains with the real-line Lipschitz constant.
``rho_ours`` of layer ``l`` is the largest ``r`` for which the chain is valid through layer ``l``
(bisection; ``delta`` grows with ``r``); for layer 1 and strip-type rules it is
``rho_sigma / max_i ||w_i||_2`` in closed form (the bias does not enter: the chain measures
deviations from the real point ``Re z``).

Why it is sharper than Eq. 8: Eq. 8 bounds ``|w^T (f(z) - f(0))|`` by ``||w|| r L_f(r)`` over
the whole ball of weights of norm ``<= W_max`` (with the bias), and ``L_f`` by a product of
spectral norms; the chain follows each actual neuron, uses ``|Im|`` rather than the distance to
``f(0)``, and the entrywise ``|K|`` products.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxcompress.activations import get_activation
from jaxcompress.certificates.bounds import BoundRule
from jaxcompress.domains import Domain


@dataclasses.dataclass
class Net:
    """A network in float64 NumPy, centre folded into the first bias."""

    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    u0: list[np.ndarray]  # real pre-activations at the expansion point, per hidden layer
    g0: list[np.ndarray]  # sigma(u0)
    rule: BoundRule
    col2: list[np.ndarray] = dataclasses.field(init=False)
    spec: list[float] = dataclasses.field(init=False)
    absk: list[np.ndarray] = dataclasses.field(init=False)

    def __post_init__(self):
        self.col2 = [np.linalg.norm(k, axis=0) for k in self.kernels]
        self.spec = [spectral_norm(k) for k in self.kernels]
        self.absk = [np.abs(k) for k in self.kernels]

    @property
    def n_hidden(self) -> int:
        return len(self.kernels) - 1


def to_net(params, rule: BoundRule, center: np.ndarray | None) -> Net:
    ks = [np.asarray(layer["kernel"], np.float64) for layer in params]
    bs = [np.asarray(layer["bias"], np.float64) for layer in params]
    if center is not None:
        bs[0] = bs[0] + center @ ks[0]
    fn = rule.cfn
    u0, g0 = [], []
    h = np.zeros((ks[0].shape[0],))
    for k, b in zip(ks[:-1], bs[:-1], strict=True):
        u = h @ k + b
        u0.append(u)
        h = np.real(fn(u.astype(np.complex128)))
        g0.append(h)
    return Net(kernels=ks, biases=bs, u0=u0, g0=g0, rule=rule)


def domain_geometry(domain, d: int, where: str = "certify") -> tuple[float, np.ndarray | None]:
    """``(R, centre or None)`` of a Ball, a Box (its circumscribed ball) or a radius."""
    if isinstance(domain, (int, float, np.floating, np.integer)) and not isinstance(domain, bool):
        radius, center = float(domain), None
    elif isinstance(domain, Domain) and domain.parameter_map is not None:
        raise TypeError(f"{where}: domain must be a jaxcompress.Ball, a jaxcompress.Box or a "
                        "radius; a Parameterization (features in its parameters u, of dimension "
                        f"{domain.dim}, for a network of {d} inputs) has no certificate: certify "
                        "on a Ball or Box that contains its image")
    elif isinstance(domain, Domain):
        if domain.dim != d:
            raise ValueError(f"{where}: domain has dim {domain.dim}; the network takes inputs "
                             f"of size {d}")
        radius = float(np.asarray(domain.radius))
        c = domain.center
        center = None if c is None else np.asarray(c, np.float64).reshape(d)
        if center is not None and not np.any(center):
            center = None
    else:
        raise TypeError(f"{where}: domain must be a jaxcompress.Ball, a jaxcompress.Box or a "
                        f"radius, got {type(domain).__name__}")
    if not (radius > 0 and math.isfinite(radius)):
        raise ValueError(f"{where}: the domain radius must be positive and finite, got {radius}")
    return radius, center


def spectral_norm(k: np.ndarray) -> float:
    """An upper bound on ``||K||_2`` (rounding aside), within 1% of it.

    Small Gram matrices ``G``: the largest eigenvalue. Large ones: power iteration gives
    ``theta <= lambda_max(G)``; a successful Cholesky factorisation of ``t I - G`` then proves
    ``lambda_max(G) < t`` for ``t = 1.01 theta`` (raised by 5% until it succeeds).
    """
    gram = k.T @ k if k.shape[0] >= k.shape[1] else k @ k.T
    n = gram.shape[0]
    if n <= 256:
        return float(np.sqrt(max(float(np.linalg.eigvalsh(gram)[-1]), 0.0)))
    v = np.random.default_rng(0).standard_normal(n)
    for _ in range(30):
        v = gram @ v
        v /= max(float(np.linalg.norm(v)), 1e-300)
    t = max(float(v @ gram @ v), 1e-300) * 1.01
    eye = np.eye(n)
    for _ in range(200):
        try:
            np.linalg.cholesky(t * eye - gram)
            return float(np.sqrt(t))
        except np.linalg.LinAlgError:
            t *= 1.05
    return float(np.sqrt(max(float(np.linalg.eigvalsh(gram)[-1]), 0.0)))


def strip_rho_sigma(rule: BoundRule) -> float:
    """The registry's ``rho_sigma``: half-width of the strip around the real axis on which the
    activation is holomorphic (the distance from the real axis to its nearest singularity)."""
    return float(get_activation(rule.name).rho_sigma)


def deviation_chain(net: Net, radii: np.ndarray) -> list[dict[str, np.ndarray]]:
    """The chain at each radius: per hidden layer ``delta, A, M, Mc, valid, D_up``.

    ``delta[r, i]`` bounds ``|u_i(z) - u_i(Re z)|`` on ``B^C_r``, ``A[r, i]`` the real part on
    the mean-value segments, ``M[r, i]`` = sup |sigma| there, ``Mc[r, i]`` a bound on
    ``sup |g_i(z) - g_i(0)|`` (mean value on the segment ``u_i(0) -> u_i(z)``), ``valid[r]``
    whether the chain proves holomorphy through this layer, ``D_up[r]`` the bound on
    ``|f(z) - f(Re z)|_2`` for the layer's upstream map.
    """
    rule, lip = net.rule, net.rule.lipschitz
    radii = np.asarray(radii, np.float64)
    r = radii[:, None]
    delta = net.col2[0][None, :] * r
    e_norm = net.spec[0] * radii
    a = net.col2[0][None, :] * r
    p_norm = net.spec[0] * radii
    valid = np.ones(radii.shape, bool)
    d_up = radii.copy()
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        for l in range(1, net.n_hidden + 1):
            big_a = np.abs(net.u0[l - 1])[None, :] + a + delta
            m = rule.sup(delta, big_a)
            s = rule.dsup(delta, big_a)
            ok = valid & np.all(np.isfinite(m) & np.isfinite(s), axis=1)
            m = np.where(ok[:, None], m, np.inf)
            g0 = np.abs(net.g0[l - 1])[None, :]
            mc = np.where(ok[:, None], np.minimum(m + g0, s * (a + delta)), np.inf)
            out.append({"delta": delta, "A": big_a, "M": m, "Mc": mc, "valid": ok,
                        "D_up": np.where(valid, d_up, np.inf)})
            if l == net.n_hidden:
                break
            dh = np.where(ok[:, None], s * delta, 0.0)
            smax = np.where(ok, np.max(np.where(ok[:, None], s, 0.0), axis=1), 0.0)
            n_norm = np.minimum(np.linalg.norm(dh, axis=1), smax * e_norm)
            delta = np.minimum(dh @ net.absk[l], net.col2[l][None, :] * n_norm[:, None])
            e_norm = np.minimum(net.spec[l] * n_norm, np.linalg.norm(delta, axis=1))
            q = lip * np.minimum(p_norm, np.linalg.norm(a, axis=1))
            a = np.minimum(lip * (a @ net.absk[l]), net.col2[l][None, :] * q[:, None])
            p_norm = np.minimum(net.spec[l] * q, np.linalg.norm(a, axis=1))
            delta = np.where(ok[:, None], delta, np.inf)
            d_up = np.where(ok, n_norm, np.inf)
            valid = ok
    return out


def bisect_radii(valid_fn, n_layers: int, scale: float) -> list[float]:
    """Per layer, the sup of the radii where ``valid_fn(radii)[l]`` holds (validity must be
    monotone: valid at ``r`` implies valid below). ``valid_fn`` maps an array of radii to a list
    of boolean arrays, one per layer. A geometric grid over ``scale * [1e-8, 1e8]`` brackets the
    boundary, then 60 bisection steps (all layers at once) to relative ``1e-14``."""
    grid = scale * np.geomspace(1e-8, 1e8, 321)
    res = valid_fn(grid)
    lo = np.zeros((n_layers,))
    hi = np.full((n_layers,), np.inf)
    for l in range(n_layers):
        ok = res[l]
        if ok.all():
            lo[l] = np.inf
        elif ok[0]:
            i = int(np.argmin(ok))  # first invalid grid radius
            lo[l], hi[l] = grid[i - 1], grid[i]
    todo = np.isfinite(hi) & (lo > 0)
    for _ in range(60):
        if not todo.any():
            break
        mid = np.where(todo, 0.5 * (lo + hi), 1.0)
        res = valid_fn(mid)
        for l in np.nonzero(todo)[0]:
            if res[l][l]:
                lo[l] = mid[l]
            else:
                hi[l] = mid[l]
        with np.errstate(invalid="ignore"):
            todo &= hi - lo > 1e-14 * hi
    return [float(x) for x in lo]


def radii_of_validity(net: Net) -> list[float]:
    """``rho_ours`` per hidden layer: sup of the radii where the chain is valid through it."""
    scale = 1.0 / max(float(np.max(net.col2[0])), 1e-300)
    rhos = bisect_radii(lambda radii: [c["valid"] for c in deviation_chain(net, radii)],
                        net.n_hidden, scale)
    rule = net.rule
    if rule.strip_only and math.isfinite(rhos[0]):
        # first layer in closed form: delta_i = ||w_i|| r < rho_sigma
        rhos[0] = strip_rho_sigma(rule) / float(np.max(net.col2[0]))
        rhos = [min(rhos[0], r) if i else r for i, r in enumerate(rhos)]
    return rhos


def radius_grid(radius: float, rho: float, n: int = 48) -> np.ndarray:
    """Candidate working radii in ``(R, rho)``, dense near both ends."""
    if math.isinf(rho):
        return radius * np.geomspace(1.0 + 1e-4, 1e3, 2 * n)
    q = np.unique(np.concatenate([np.geomspace(1e-5, 0.5, n), 1.0 - np.geomspace(1e-5, 0.5, n)]))
    return radius + (rho - radius) * q
