"""Every certified bound is at least the measured sup error, on random networks that satisfy the
paper's assumptions.

For each random network (kernels scaled by a random factor in [0.3, 1], a ball of random radius
R in [0.3, 1]; networks whose paper Assumption 4 is not proven by the report are skipped and
counted) and each order k, the network is compressed in backward order with maxvol at
``delta = 0`` (so Lemma 10's ``|C_ij| <= 1`` holds to rounding, as the paper's a priori bounds
assume), and four bounds of the certificate are compared with ``jc.sup_error`` (uniform samples
plus projected local search, a lower bound on the true sup):

* ``a_priori_at_orders``: the paper's a priori bound at those orders (Theorem 16, Lemma 15,
  Eq. 65, Eq. 71);
* ``a_priori_at_orders_ours``: ours;
* ``a_posteriori_paper``: the paper's Theorem 5 (Eq. 16) on the actual weights, with Lemma 15;
* ``a_posteriori_bound``: ours.

Measured by ``python -m pytest tests/test_certify_validity.py -m slow -s`` (200 networks, 50 per
configuration, 1 more skipped; 400 cases, no bound ever below the measurement; bound / measured
sup error, min / median / 90th percentile / max over the finite ratios):

    a_priori_at_orders       1.42e+03  9.64e+04  7.82e+06  1.31e+08  (8 of 400 infinite)
    a_priori_at_orders_ours       467     2e+04  8.96e+05  2.46e+07  (12 of 400 not covered)
    a_posteriori_paper            187  1.31e+04  2.22e+05  8.03e+06  (8 of 400 infinite)
    a_posteriori_bound           1.04      3.49      21.8  2.59e+03  (12 of 400 not covered)

Per configuration, ours a posteriori: sigmoid 1.04 / 2.25 / 9.4 / 51.8, tanh 1.17 / 3.63 / 10.4 /
86.1, tanh-GELU 2.19 / 9.05 / 135 / 2.59e+03, sin 1.25 / 2.7 / 5.77 / 14.3. The infinite and the
not covered cases are all tanh-GELU networks: the paper's bounds are infinite (vacuous) when the
rule's rectangle bound on ``|gelu_tanh|`` is infinite at every working radius, and our chain
proves a radius below R in 12 cases where Eq. 8 proves one above it.

The default run checks the same on 24 networks (48 cases) of the first two configurations.
"""

import math

import jax
import numpy as np
import pytest

import jaxcompress as jc

#: (activation, layer sizes, orders, the a posteriori certificate's Taylor order K_top): one
#: shape per activation, so each compiles once. The default run uses the first two.
CONFIGS = (
    ("sigmoid", [1, 12, 12, 1], (1, 3), 13),
    ("tanh", [2, 12, 8, 1], (1, 3), 13),
    ("gelu_tanh", [3, 12, 10, 1], (1, 2), 8),
    ("sin", [2, 12, 12, 1], (1, 3), 13),
)
#: The paper's bounds exist whenever its assumptions hold; ours may not (its deviation chain is
#: a different proof: for the tanh-GELU it proves a smaller radius than Eq. 8 in layer 1).
PAPER_BOUNDS = ("a_priori_at_orders", "a_posteriori_paper")
BOUNDS = ("a_priori_at_orders", "a_priori_at_orders_ours", "a_posteriori_paper",
          "a_posteriori_bound")


def _network(seed: int, sizes: list[int]):
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.3, 1.0)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / math.sqrt(fan_in)
        params.append({"kernel": jax.numpy.asarray(scale * rng.uniform(-bound, bound,
                                                                       (fan_in, fan_out))),
                       "bias": jax.numpy.asarray(rng.uniform(-bound, bound, (fan_out,)))})
    return params, float(rng.uniform(0.3, 1.0))


def _padded(params, small, info):
    """The compressed network with the teacher's shapes (dropped neurons: zero outgoing weight):
    the same function, and one sup_error compilation for every order."""
    kept = [np.asarray(li.kept) for li in info.layers]
    out = []
    for l, (layer, new) in enumerate(zip(params, small, strict=True)):
        kern = np.zeros(np.shape(layer["kernel"]))
        rows = kept[l - 1] if l else np.arange(kern.shape[0])
        cols = kept[l] if l < len(kept) else np.arange(kern.shape[1])
        kern[np.ix_(rows, cols)] = np.asarray(new["kernel"])
        out.append({"kernel": jax.numpy.asarray(kern), "bias": layer["bias"]})
    return out


def _ratios(per_config: int, configs) -> tuple[dict, int, int, int]:
    """Bound / measured sup error per configuration and bound, over ``per_config`` accepted
    networks of each configuration; also the numbers of accepted and skipped networks and of
    cases that our certificate does not cover."""
    ratios = {name: {b: [] for b in BOUNDS} for name, *_ in configs}
    accepted = skipped = not_ours = 0
    for ci, (name, sizes, orders, k_top) in enumerate(configs):
        seed, done = 1000 * ci, 0
        while done < per_config:
            params, radius = _network(seed, sizes)
            seed += 1
            domain = jc.Ball(sizes[0], radius)
            for k in orders:
                method = jc.derivative_matching(k, selector=jc.MaxVol(delta=0.0))
                small, info = jc.compress(params, method, activation=name, domain=domain)
                rep = jc.certify(params, activation=name, domain=domain, eps=1e-3,
                                 compressed=small, info=info, extra_orders=k_top - k,
                                 n_samples=8)
                if not all(li.assumption4 for li in rep.layers):
                    break
                assert max(li.max_coef for li in rep.layers) <= 1 + 1e-9  # Lemma 10
                err = float(jc.sup_error(params, _padded(params, small, info), activation=name,
                                         domain=domain, key=jax.random.PRNGKey(seed),
                                         n_samples=2048, local_search_steps=50))
                not_ours += rep.a_posteriori_bound is None
                for b in BOUNDS:
                    bound = rep.values[b]
                    assert bound is not None or b not in PAPER_BOUNDS, (name, seed, k, b)
                    if bound is not None:
                        assert err <= bound, (name, seed, k, b, err, bound)
                        ratios[name][b].append(bound / err)
            else:
                done += 1
                accepted += 1
                continue
            skipped += 1
    return ratios, accepted, skipped, not_ours


def _summary(ratios: dict) -> str:
    lines = []
    for name, per in [("all", {b: sum((r[b] for r in ratios.values()), []) for b in BOUNDS}),
                      *ratios.items()]:
        lines.append(f"{name}:")
        for b, vals in per.items():
            r = np.array(vals)
            fin = r[np.isfinite(r)]
            lines.append(
                f"  {b:<24} min {fin.min():9.3g}  median {np.median(fin):9.3g}  90% "
                f"{np.percentile(fin, 90):9.3g}  max {fin.max():9.3g}  ({r.size - fin.size} of "
                f"{r.size} infinite)")
    return "\n".join(lines)


def _check(per_config: int, configs):
    ratios, accepted, skipped, not_ours = _ratios(per_config, configs)
    cases = sum(len(r[BOUNDS[0]]) for r in ratios.values())
    print(f"\n{accepted} networks ({skipped} skipped: Assumption 4 not proven), {cases} cases "
          f"({not_ours} not covered by our chain); bound / measured sup error:\n"
          f"{_summary(ratios)}")
    assert accepted == per_config * len(configs)
    for per in ratios.values():
        for vals in per.values():
            assert min(vals) >= 1.0
    # on sigmoid and tanh networks ours stays within two orders of magnitude of the measurement
    for name in ("sigmoid", "tanh"):
        assert max(ratios[name]["a_posteriori_bound"]) <= 100.0


def test_bounds_dominate_measured_error():
    _check(12, CONFIGS[:2])  # 24 networks, 48 cases


@pytest.mark.slow
def test_bounds_dominate_measured_error_200_networks():
    _check(50, CONFIGS)  # 200 networks, 400 cases
