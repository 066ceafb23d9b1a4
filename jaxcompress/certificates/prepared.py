"""Everything about (network, activation, domain) that does not depend on the error budget.

Built once by :func:`jaxcompress.certify`, and once per call of
:func:`jaxcompress.compress_to_tolerance` (which asks for many certificates of one teacher): the
float64 network, the paper's eps-independent quantities and their grids of working radii, our
deviation chain on its own grids, and (lazily) the sampled diagnostics and the float64 Taylor
features of the original network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np

from jaxcompress.activations import get_activation, get_bound_rule
from jaxcompress.certificates import chain, paper
from jaxcompress.certificates.diagnostics import appendix_g
from jaxcompress.certificates.records import AppendixG
from jaxcompress.features import derivative_features
from jaxcompress.mlp import layer_sizes, validate_params
from jaxcompress.taylor import num_monomials


def rho0_list(rho0, n_hidden: int) -> list[float] | None:
    if rho0 is None:
        return None
    if isinstance(rho0, (int, float, np.floating, np.integer)):
        return [float(rho0)] * n_hidden
    vals = [float(r) for r in rho0]
    if len(vals) != n_hidden:
        raise ValueError(f"certify: rho0 has {len(vals)} entries; expected one per hidden layer "
                         f"({n_hidden})")
    return vals


class Prepared:
    """The eps-independent part of a certificate (see the module docstring)."""

    def __init__(self, params, activation, domain, rho0: float | Sequence[float] | None = None,
                 n_samples: int = 512, seed: int = 0):
        params = validate_params(params, where="certify")
        if params[0]["kernel"].ndim != 2:
            raise ValueError("certify: expected one network (2-D kernels); certify each "
                             "separately")
        self.params = params
        self.act = get_activation(activation)
        self.rule = get_bound_rule(self.act)
        self.sizes = tuple(layer_sizes(params))
        self.d = self.sizes[0]
        self.n_hidden = len(params) - 1
        self.radius, self.center = chain.domain_geometry(domain, self.d)
        net = self.net = chain.to_net(params, self.rule, self.center)
        n, radius = self.n_hidden, self.radius
        self.lipschitz = float(self.rule.lipschitz)
        self.assumption14 = math.isfinite(self.lipschitz)
        # --- the paper ---------------------------------------------------------------------------
        self.op_norms = [paper.op_inf(k) for k in net.kernels]
        self.w_max = [paper.w_max(net.kernels[l], net.biases[l]) for l in range(n)]
        self.v_max = self.op_norms[1:]
        self.f0_norm = paper.f0_norms(net)
        self.rho_sigma = [paper.rho_sigma(self.rule, self.w_max[l], self.f0_norm[l])
                          for l in range(n)]
        self.rho_f, self.rho = paper.radii(net, self.w_max, self.rho_sigma)
        self.assumption4 = [radius < r for r in self.rho]
        self.rho0_user = rho0_list(rho0, n)
        grids = []
        for l in range(n):
            g = chain.radius_grid(radius, self.rho[l]) if self.assumption4[l] else np.zeros((0,))
            if self.rho0_user is not None:
                r0 = self.rho0_user[l]
                if not (self.assumption4[l] and radius < r0 < self.rho[l]):
                    raise ValueError(
                        f"certify: rho0 = {r0:g} for hidden layer {l + 1} must lie in (R, rho) "
                        f"= ({radius:g}, {self.rho[l]:.6g}) (rho: the paper's Eq. 8)")
                g = np.unique(np.concatenate([g, [r0]]))
            grids.append(g)
        self.grids = grids
        lf_all = paper.jacobian_chain(net, np.concatenate(grids))
        self.lf, self.m_g, self.c0, self.lam = [], [], [], []
        start = 0
        for l in range(n):
            sl = slice(start, start + grids[l].size)
            start += grids[l].size
            lf = lf_all[l][sl]
            mg = paper.m_g(self.rule, self.w_max[l], self.f0_norm[l], grids[l], lf)
            c0, lam = paper.c0_lam(self.v_max[l], mg, grids[l], radius)
            self.lf.append(lf)
            self.m_g.append(mg)
            self.c0.append(c0)
            self.lam.append(lam)
        # --- ours --------------------------------------------------------------------------------
        self.rho_ours = chain.radii_of_validity(net)
        self.holomorphic_ours = [radius < r for r in self.rho_ours]
        ours_grids = [chain.radius_grid(radius, self.rho_ours[l]) if self.holomorphic_ours[l]
                      else np.zeros((0,)) for l in range(n)]
        self.ours_grids = ours_grids
        res = chain.deviation_chain(net, np.concatenate(ours_grids))
        self.chains = []
        start = 0
        for l in range(n):
            sl = slice(start, start + ours_grids[l].size)
            start += ours_grids[l].size
            self.chains.append({key: val[sl] for key, val in res[l].items()})
        self.n_samples, self.seed = int(n_samples), int(seed)
        self._diag: list[AppendixG] | None = None
        self._feats: tuple[int, list[np.ndarray]] | None = None

    def diagnostics(self) -> list[AppendixG]:
        """The sampled Appendix G diagnostics per hidden layer (computed once)."""
        if self._diag is None:
            self._diag = appendix_g(self.net, self.radius, self.w_max, self.rho_sigma,
                                    self.n_samples, self.seed)
        return self._diag

    def features(self, order: int) -> list[np.ndarray]:
        """float64 Taylor coefficients ``Z_l`` (``D_order x d_l``) of the original network."""
        if self._feats is None or self._feats[0] < order:
            with jax.enable_x64(True):
                # device_put, not jnp.asarray: the latter compiles a program per shape
                p64 = [{k: jax.device_put(np.asarray(v, np.float64)) for k, v in layer.items()}
                       for layer in self.params]
                c = np.zeros((self.d,)) if self.center is None else self.center
                z = derivative_features(p64, activation=self.act, order=int(order),
                                        center=jax.device_put(np.asarray(c, np.float64)))
                self._feats = (int(order), [np.asarray(x, np.float64) for x in z])
        n = num_monomials(self.d, order)
        return [f[:n] for f in self._feats[1]]
