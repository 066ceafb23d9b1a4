"""The paper's formulas in the certificate against independent plain-NumPy transcriptions.

Each quantity of ``jc.certify`` whose source is a paper equation is recomputed here from the
paper's text (Wang, Wang & Ziyin 2026; equation numbers as in the paper) on small networks with
several activations and d_in = 1, 2, 3, and compared with the report. The working radius rho0 is
the one free choice of the paper ("pick any rho0 in (R, rho)"): the transcription takes the
report's, checks that it lies in (R, rho), and recomputes everything else from it, including
Lemma 19's Lambda_bar (by enumerating its candidate values rather than iterating). The readings
of the ambiguous points (bias absorbed into W_max, V_max without the next bias, rho_sigma over an
interval, the direction of every bound) are tested at the end.
"""

import functools
import math

import numpy as np
import pytest
from scipy.special import erf

import jaxcompress as jc
from jaxcompress.certificates.diagnostics import sphere_directions

# ------------------------------------------------------------------------------------------------
# the activations, written out again (sigma, sigma', distance to singularities, and the rule's
# bounds on |sigma|, |sigma'| over |Im u| <= s, |Re u| <= A: closed forms re-derived here for
# sigmoid, tanh and sin; GELU's come from its BoundRule, which tests/test_certify.py checks
# against samples)
# ------------------------------------------------------------------------------------------------


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


ACT = {
    "sigmoid": (_sig, lambda z: _sig(z) * (1 - _sig(z))),
    "tanh": (np.tanh, lambda z: 1 - np.tanh(z) ** 2),
    "sin": (np.sin, np.cos),
    "gelu": (lambda z: z * 0.5 * (1 + erf(z / math.sqrt(2))),
             lambda z: 0.5 * (1 + erf(z / math.sqrt(2))) + z * np.exp(-z * z / 2) / math.sqrt(
                 2 * math.pi)),
}
LIP = {"sigmoid": 0.25, "tanh": 1.0, "sin": 1.0, "gelu": 1.129, "gelu_tanh": 1.1291}


def _dist(name, u):
    u = np.asarray(u, float)
    if name == "sigmoid":
        return np.sqrt(u**2 + np.pi**2)
    if name == "tanh":
        return np.sqrt(u**2 + (np.pi / 2) ** 2)
    if name == "gelu_tanh":
        return np.min(np.abs(u[..., None] - _gelu_tanh_poles()), axis=-1)
    return np.full(u.shape, np.inf)


@functools.cache
def _gelu_tanh_poles():
    """Roots of c (z + b z^3) = i pi (m + 1/2), |m| < 100: the nearest poles (the omitted ones
    are more than 8 from the real axis, farther than every distance these tests meet)."""
    c, b = math.sqrt(2 / math.pi), 0.044715
    return np.concatenate([np.roots([b, 0, 1, -1j * np.pi * (m + 0.5) / c])
                           for m in range(-100, 100)])


def _sup(name, s, a):
    if name == "sigmoid":
        return np.inf if s >= np.pi else (1.0 if s <= np.pi / 2 else 1 / np.sin(s))
    if name == "tanh":
        return np.inf if s >= np.pi / 2 else (1.0 if s <= np.pi / 4 else np.tan(s))
    if name == "sin":
        with np.errstate(over="ignore"):
            return np.cosh(s)
    return float(jc.certificates.get_bound_rule(name).sup(s, a))


def _dsup(name, s, a):
    if name == "sigmoid":
        return np.inf if s >= np.pi else 0.25 / np.cos(s / 2) ** 2
    if name == "tanh":
        return np.inf if s >= np.pi / 2 else 1 / np.cos(s) ** 2
    if name == "sin":
        with np.errstate(over="ignore"):
            return np.cosh(s)
    return float(jc.certificates.get_bound_rule(name).dsup(s, a))


# ------------------------------------------------------------------------------------------------
# the transcription
# ------------------------------------------------------------------------------------------------


class Paper:
    """The paper's quantities for one network, computed from its text."""

    def __init__(self, params, name, radius, eps):
        self.K = [np.asarray(p["kernel"], float) for p in params]
        self.b = [np.asarray(p["bias"], float) for p in params]
        self.name, self.R, self.eps = name, radius, eps
        self.L = len(self.K)  # Eq. 3: L weight matrices, L - 1 hidden layers
        self.d = self.K[0].shape[0]
        h = np.zeros(self.d)
        self.f0, self.u0 = [h], []
        for k, b in zip(self.K[:-1], self.b[:-1], strict=True):
            u = h @ k + b
            self.u0.append(u)
            h = np.real(self._sigma(u.astype(complex)))
            self.f0.append(h)

    def _sigma(self, z):
        if self.name == "gelu_tanh":
            c, b = math.sqrt(2 / math.pi), 0.044715
            return 0.5 * z * (1 + np.tanh(c * (z + b * z**3)))
        return ACT[self.name][0](z)

    # Eq. 6, 7, 5 ---------------------------------------------------------------------------------
    def w_max(self, l):  # hidden layer l = 1..L-1; rows of W^(l) are columns of K[l-1]
        k, b = self.K[l - 1], self.b[l - 1]
        return max(math.sqrt(sum(k[r, i] ** 2 for r in range(k.shape[0])) + b[i] ** 2)
                   for i in range(k.shape[1]))

    def v_max(self, l):
        k = self.K[l]
        return max(sum(abs(k[i, j]) for i in range(k.shape[0])) for j in range(k.shape[1]))

    def fbar0(self, l):
        return math.sqrt(float(self.f0[l - 1] @ self.f0[l - 1]) + 1.0)

    def rho_sigma(self, l):
        u = self.w_max(l) * self.fbar0(l)
        return float(np.min(_dist(self.name, np.linspace(-u, u, 20001))))

    # Eq. 4 (upper bound), Eq. 8 (lower bound) ----------------------------------------------------
    def l_f(self, l, r):
        lf = 1.0
        for m in range(1, l):
            k = self.K[m - 1]
            worst = 0.0
            for i in range(k.shape[1]):
                s = np.linalg.norm(k[:, i]) * r * lf
                u0 = self.u0[m - 1][i]
                if not s < _dist(self.name, u0):
                    return math.inf
                worst = max(worst, _dsup(self.name, s, abs(u0) + s))
            if not math.isfinite(worst):
                return math.inf
            lf = np.linalg.norm(k, 2) * worst * lf
        return lf

    def _bisect(self, ok):
        lo, hi = 0.0, 1.0
        while ok(hi):
            lo, hi = hi, 2 * hi
            if hi > 1e9:
                return math.inf
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo

    def rho_f(self, l):
        return math.inf if l == 1 else self._bisect(lambda r: math.isfinite(self.l_f(l, r)))

    def rho(self, l):
        rs = self.rho_sigma(l)
        if l == 1:
            return rs / self.w_max(1)
        rf = self.rho_f(l)
        with np.errstate(over="ignore"):
            rho = self._bisect(lambda r: r < rf and r * self.w_max(l) * self.l_f(l, r) < rs)
        return min(rho, rf)

    # Eq. 17 (upper bound), Eq. 20 ---------------------------------------------------------------
    def m_g(self, l, rho0):
        s0 = self.w_max(l) * rho0 * self.l_f(l, rho0)
        return _sup(self.name, s0, self.w_max(l) * self.fbar0(l) + s0)

    def c0_lam(self, l, rho0):
        c0 = self.v_max(l) * self.m_g(l, rho0) * rho0 / (rho0 - self.R)
        return c0, math.log(rho0 / self.R)

    # Eq. 21/23, Eq. 72 --------------------------------------------------------------------------
    def k_star(self, c0, lam, eps):
        d = self.d
        k = 0
        while not (k + 1) * lam >= math.log(2 * c0 / eps) + d * math.log(k + d) - math.log(
                math.factorial(d)):
            k += 1
        return k

    def k_cert(self, c0, lam, eps):
        k = 0
        while not (1 + math.comb(self.d + k, self.d)) * c0 * math.exp(-(k + 1) * lam) <= eps:
            k += 1
        return k

    # Lemma 15, Lemma 19, Eq. 62 ------------------------------------------------------------------
    def op(self, j):  # ||W^(j)||_{op,inf}, j = 1..L
        return self.v_max(j - 1) if j >= 2 else float(np.max(np.sum(np.abs(self.K[0]), axis=0)))

    def lemma15(self, l):
        return LIP[self.name] ** (self.L - l - 1) * math.prod(
            self.op(j) for j in range(l + 2, self.L + 1))

    def lemma19(self, c_star, lam_star):
        L, d = self.L, self.d
        lam0 = math.prod(max(1.0, self.op(j)) for j in range(2, L + 1))
        lp = max(1.0, LIP[self.name])

        def psi(lam):
            k = self.k_star(c_star, lam_star, self.eps / ((L - 1) * lam))
            return lp ** (L - 2) * lam0 * math.comb(d + k, d) ** (L - 2)

        # the least feasible Lambda is 1 or a value of psi: enumerate those candidates
        cands = sorted({1.0} | {max(1.0, lp ** (L - 2) * lam0 * math.comb(d + k, d) ** (L - 2))
                                for k in range(200)})
        return next(c for c in cands if psi(c) <= c * (1 + 1e-12))


# ------------------------------------------------------------------------------------------------
# networks (numpy draws: no compilation per network)
# ------------------------------------------------------------------------------------------------


def _net(seed, sizes, scale, bias_scale=1.0):
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1 / math.sqrt(a)
        out.append({"kernel": scale * rng.uniform(-bound, bound, (a, b)),
                    "bias": bias_scale * rng.uniform(-bound, bound, (b,))})
    return out


CASES = [  # (activation, sizes, kernel scale, R, eps)
    ("sigmoid", [1, 8, 6, 1], 0.5, 0.5, 1e-4),
    ("tanh", [2, 10, 8, 1], 0.5, 0.3, 1e-3),
    ("gelu_tanh", [3, 8, 6, 1], 0.4, 0.3, 1e-3),
    ("gelu", [2, 8, 1], 0.5, 0.5, 1e-5),
    ("sin", [3, 6, 5, 1], 0.5, 0.3, 1e-4),
    ("sigmoid", [2, 8, 8, 6, 1], 0.5, 0.3, 1e-3),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_report_equals_the_papers_equations(case):
    name, sizes, scale, radius, eps = case
    params = _net(sum(sizes), sizes, scale)
    rep = jc.certify(params, activation=name, domain=jc.Ball(sizes[0], radius), eps=eps,
                     n_samples=32)
    ref = Paper(params, name, radius, eps)
    n, d = len(sizes) - 2, sizes[0]
    rel = {"rel": 1e-10}
    for li in rep.layers:
        l = li.layer
        assert li.W_max == pytest.approx(ref.w_max(l), **rel)  # Eq. 6
        assert li.V_max == pytest.approx(ref.v_max(l), **rel)  # Eq. 7
        assert li.rho_sigma == pytest.approx(ref.rho_sigma(l), rel=1e-6)  # Eq. 5 (grid in ref)
        assert li.rho_f == pytest.approx(ref.rho_f(l), rel=1e-9)  # Assumption 1
        assert li.rho == pytest.approx(ref.rho(l), rel=1e-9)  # Eq. 8
        assert li.assumption4 == (radius < ref.rho(l))
        assert li.Lambda == pytest.approx(ref.lemma15(l), **rel)  # Lemma 15
        assert radius < li.rho0 < li.rho  # Theorem 5: rho0 in (R, rho)
        assert li.L_f == pytest.approx(ref.l_f(l, li.rho0), **rel)  # Eq. 4
        assert li.M_g == pytest.approx(ref.m_g(l, li.rho0), **rel)  # Eq. 17
        c0, lam = ref.c0_lam(l, li.rho0)
        assert li.C0 == pytest.approx(c0, **rel) and li.lam == pytest.approx(lam, **rel)
        assert li.rho_pole == pytest.approx(float(np.min(  # Eq. 100
            _dist(name, params[0]["bias"]) / np.linalg.norm(params[0]["kernel"], axis=0))), **rel)
    # Eq. 53, Lemma 19, Eq. 62
    c_star = max(ref.c0_lam(li.layer, li.rho0)[0] for li in rep.layers)
    lam_star = min(ref.c0_lam(li.layer, li.rho0)[1] for li in rep.layers)
    assert rep.C_star == pytest.approx(c_star, **rel)
    assert rep.lam_star == pytest.approx(lam_star, **rel)
    lam_bar = ref.lemma19(c_star, lam_star)
    assert rep.Lambda_bar == pytest.approx(lam_bar, rel=1e-12)
    eps_t = eps / ((ref.L - 1) * lam_bar)
    assert rep.eps_uniform == pytest.approx(eps_t, rel=1e-12)
    # Eq. 54, 68, 69
    k_bar = ref.k_star(c_star, lam_star, eps_t)
    assert rep.k_bar == k_bar
    width = math.comb(d + k_bar, d)
    assert rep.width_bound == width
    assert rep.param_bound == d * width + (n - 1) * width**2 + width * sizes[-1]
    orders, total, eq75 = [], 0.0, []
    for li in rep.layers:
        l = li.layer
        c0, lam = ref.c0_lam(l, li.rho0)
        k_star, k_cert = ref.k_star(c0, lam, eps_t), ref.k_cert(c0, lam, eps_t)
        assert li.eps_layer == pytest.approx(eps_t, rel=1e-12)
        assert li.k_star == k_star and li.k_cert == k_cert <= k_star  # Eq. 21/23, Eq. 72
        dk = math.comb(d + k_cert, d)
        assert li.D_k == dk and li.D_k_star == math.comb(d + k_star, d)
        assert li.coef_bound == min(dk, sizes[l])  # Lemma 10: n <= min(D_k, d_l)
        b71 = (1 + dk) * c0 * math.exp(-(k_cert + 1) * lam)  # Eq. 71
        assert li.bound_layer == pytest.approx(b71, **rel) and b71 <= eps_t
        assert li.eq74 == (dk < sizes[l])  # Eq. 74
        e75 = sizes[l] >= 2 and lam * ((math.factorial(d) * sizes[l]) ** (1 / d) - d) >= math.log(
            (1 + sizes[l]) * c0 / eps_t)
        assert li.eq75 == e75  # Eq. 75
        eq75.append(e75)
        orders.append(k_cert)
    assert rep.orders == tuple(orders) and rep.non_vacuous == all(eq75)
    for li in rep.layers:  # Theorem 16 with Lemma 15 and Eq. 65 at the certified orders
        l = li.layer
        step = LIP[name] ** (ref.L - l - 1) * math.prod(
            math.comb(d + orders[j - 2], d) * ref.op(j) for j in range(l + 2, ref.L + 1))
        assert li.Lambda_step == pytest.approx(step, **rel)
        total += step * li.bound_layer
    assert rep.bound_a_priori == pytest.approx(total, **rel) and total <= eps * (1 + 1e-12)
    # Eq. 101 in layer 1 (exact): R W_max / rho_sigma
    first = rep.layers[0]
    assert first.q_hat == pytest.approx(radius * first.W_max / first.rho_sigma, **rel)


def test_user_rho0_is_used_as_given():
    params = _net(5, [2, 10, 8, 1], 0.5)
    auto = jc.certify(params, activation="tanh", domain=jc.Ball(2, 0.3), eps=1e-3, n_samples=8)
    rho0 = [0.3 + 0.5 * (li.rho - 0.3) for li in auto.layers]
    rep = jc.certify(params, activation="tanh", domain=jc.Ball(2, 0.3), eps=1e-3, rho0=rho0,
                     n_samples=8)
    ref = Paper(params, "tanh", 0.3, 1e-3)
    for li, r0 in zip(rep.layers, rho0, strict=True):
        assert li.rho0 == pytest.approx(r0, rel=1e-14)
        assert li.C0 == pytest.approx(ref.c0_lam(li.layer, r0)[0], rel=1e-10)
    with pytest.raises(ValueError, match=r"must lie in \(R, rho\)"):
        jc.certify(params, activation="tanh", domain=jc.Ball(2, 0.3), eps=1e-3, rho0=0.2)


# ------------------------------------------------------------------------------------------------
# the readings, and the direction of every bound
# ------------------------------------------------------------------------------------------------


def _complex_ball(rng, n, d, r):
    g = rng.standard_normal((n, 2 * d))
    g *= (r * rng.uniform(size=(n, 1)) ** (1 / (2 * d))) / np.linalg.norm(g, axis=1,
                                                                          keepdims=True)
    return g[:, :d] + 1j * g[:, d:]


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "sin"])
def test_bounds_point_the_right_way(name):
    """L_f (Eq. 4) and M_g (Eq. 17) are upper bounds of the suprema they stand for, and the
    radii are lower bounds: sampled |J f| and |sigma(wbar^T fbar(z))| over the balls of Eq. 4 and
    Eq. 17 (every ||wbar|| <= W_max, the bias inside the vector) never exceed them."""
    params = _net(11, [2, 10, 8, 1], 0.6)
    rep = jc.certify(params, activation=name, domain=jc.Ball(2, 0.3), eps=1e-3, n_samples=8)
    sigma, dsigma = ACT[name]
    rng = np.random.default_rng(0)
    k1, b1 = np.asarray(params[0]["kernel"]), np.asarray(params[0]["bias"])
    k2, b2 = np.asarray(params[1]["kernel"]), np.asarray(params[1]["bias"])
    li = rep.layers[1]
    z = _complex_ball(rng, 4000, 2, li.rho0)
    u1 = z @ k1 + b1
    jf = dsigma(u1)[:, :, None] * k1.T[None]  # J h^(1)(z): (n, d_1, d_in)
    lf_sampled = np.max(np.linalg.norm(jf, ord=2, axis=(1, 2)))
    assert lf_sampled <= li.L_f
    fbar = np.concatenate([sigma(u1), np.ones((z.shape[0], 1))], axis=1)
    wbar = rng.standard_normal((4000, k1.shape[1] + 1))
    wbar *= li.W_max * rng.uniform(size=(4000, 1)) ** 0.1 / np.linalg.norm(wbar, axis=1,
                                                                         keepdims=True)
    wbar = np.concatenate([wbar, np.concatenate([k2, b2[None]]).T])  # the actual neurons too
    g = np.abs(sigma(np.einsum("nj,mj->nm", fbar[:400], wbar)))
    assert np.max(g) <= li.M_g
    # radii: layer 2's rho_f is the exact radius of h^(1) (Eq. 100) at most
    assert li.rho <= li.rho_f <= li.rho_pole * (1 + 1e-12)
    assert rep.layers[0].rho <= rep.layers[0].rho_pole * (1 + 1e-12)


def test_bias_is_absorbed_into_w_max():
    """Reading 1: with a large bias, an actual GELU neuron exceeds the sup over the bias-free
    ball ||w|| <= max ||w_i|| (so Eq. 17 without the bias would not bound it), while the
    report's M_g (bias absorbed) does."""
    params = [{"kernel": np.array([[0.3]]), "bias": np.array([4.0])},
              {"kernel": np.array([[1.0]]), "bias": np.array([0.0])}]
    rep = jc.certify(params, activation="gelu", domain=jc.Ball(1, 0.5), eps=1e-3, n_samples=8)
    li = rep.layers[0]
    assert li.W_max == pytest.approx(math.hypot(0.3, 4.0), rel=1e-14)
    rho0 = li.rho0
    t = rho0 * np.exp(1j * np.linspace(0, 2 * np.pi, 721))
    actual = np.max(np.abs(ACT["gelu"][0](0.3 * t + 4.0)))
    rule = jc.certificates.get_bound_rule("gelu")
    s0 = 0.3 * rho0  # the bias-free reading: |w| <= 0.3, f(0) = 0
    bias_free = float(rule.sup(s0, s0))
    assert bias_free < actual <= li.M_g


def test_v_max_excludes_the_next_bias_and_rho_sigma_reads_an_interval():
    params = _net(3, [2, 6, 1], 0.3, bias_scale=0.2)
    base = jc.certify(params, activation="gelu_tanh", domain=jc.Ball(2, 0.3), eps=1e-3,
                      n_samples=8)
    shifted = [dict(params[0]), {"kernel": params[1]["kernel"], "bias": params[1]["bias"] + 50}]
    rep = jc.certify(shifted, activation="gelu_tanh", domain=jc.Ball(2, 0.3), eps=1e-3,
                     n_samples=8)
    assert rep.layers[0].V_max == base.layers[0].V_max  # reading 2
    # reading 3: the tanh-GELU's nearest pole is off the imaginary axis, at 0.634 + 2.755i;
    # centres |u| <= W_max ||fbar(0)|| reach its real part only with a large enough bias
    near = jc.activations.get_activation("gelu_tanh").rho_sigma
    assert base.layers[0].W_max < 0.63 and base.layers[0].rho_sigma > near + 1e-3
    big = [{"kernel": params[0]["kernel"], "bias": params[0]["bias"] * 0 + 1.0}, params[1]]
    rep_big = jc.certify(big, activation="gelu_tanh", domain=jc.Ball(2, 0.3), eps=1e-3,
                         n_samples=8)
    assert rep_big.layers[0].rho_sigma == pytest.approx(near, rel=1e-12)
    # the realised disc centres w_i^T f(0) + b_i never come closer than rho_sigma
    for r in (base, rep_big):
        assert r.layers[0].rho_sigma <= float(np.min(_dist("gelu_tanh", np.asarray(
            (big if r is rep_big else params)[0]["bias"]))))


def test_appendix_g_sampled_q_hat_and_violating_radius():
    """Eq. 101 and the first violating radius, recomputed with the report's sample directions."""
    params = _net(2, [2, 12, 10, 1], 3.0)
    radius = 1.0
    rep = jc.certify(params, activation="sigmoid", domain=jc.Ball(2, radius), eps=1e-3,
                     n_samples=256, seed=3)
    dirs = sphere_directions(2, 256, 3)
    k1, b1 = np.asarray(params[0]["kernel"]), np.asarray(params[0]["bias"])
    wmax2 = rep.layers[1].W_max

    def lhat(r):
        jf = ACT["sigmoid"][1](r * dirs @ k1 + b1)[:, :, None] * k1.T[None]
        return float(np.max(np.linalg.norm(jf, ord=2, axis=(1, 2))))

    li = rep.layers[1]
    assert li.L_f_sampled == pytest.approx(lhat(radius), rel=1e-10)
    assert li.q_hat == pytest.approx(radius * wmax2 * lhat(radius) / np.pi, rel=1e-10)
    assert li.q_hat > 1 and li.r_violate is not None
    r = li.r_violate
    assert r * wmax2 * lhat(r) / np.pi >= 1.0
    assert (r - radius / 1000) * wmax2 * lhat(r - radius / 1000) / np.pi < 1.0
    assert rep.layers[0].r_violate is None
    # q_hat >= 1 witnesses that Assumption 4 fails; the certified radius agrees
    assert li.assumption4 is False


def test_assumption_14_is_required_by_lemmas_15_and_19():
    """exp is entire but not globally Lipschitz: Theorem 6's radius and constants exist, the
    downstream factors of Lemma 15 and the budget of Lemma 19 do not."""
    import jax.numpy as jnp

    from jaxcompress import activations

    jc.register_activation("test_exp", jnp.exp, rho_sigma=math.inf, overwrite=True)
    with np.errstate(over="ignore"):
        rule = jc.certificates.BoundRule(
            name="test_exp", sup=lambda s, a: np.exp(np.asarray(a, float)) + 0 * np.asarray(s),
            dsup=lambda s, a: np.exp(np.asarray(a, float)) + 0 * np.asarray(s),
            lipschitz=math.inf, singular_distance=lambda b: np.full(np.shape(b), np.inf),
            cfn=np.exp, cdfn=np.exp, interval_distance=lambda u: math.inf)
    jc.certificates.register_bound_rule(rule, overwrite=True)
    try:
        params = _net(4, [2, 6, 5, 1], 0.5)
        rep = jc.certify(params, activation="test_exp", domain=jc.Ball(2, 0.5), eps=1e-3,
                         n_samples=8)
        assert all(li.assumption4 for li in rep.layers) and rep.layers[0].rho == math.inf
        assert all(li.Lambda is None and li.k_cert is None for li in rep.layers)
        assert rep.Lambda_bar is None and rep.orders is None and rep.orders_ours is None
        assert any("Assumption 14 fails" in note for note in rep.notes)
    finally:
        activations._REGISTRY.pop("test_exp", None)  # its bound rule lives on the record
