"""How tight, how fast: the proven bracket of ``jc.verify`` (ours).

``verify(a, b, domain=...)`` returns ``lower <= sup_x max_j |F_a(x)_j - F_b(x)_j| <= upper``
with proof (Taylor models of the difference, branch and bound over input boxes). For each case
below the script

1. builds the two networks (``jc.init_mlp`` teachers, ``jc.compress(..., jc.collocation(k))``
   students; the ReLU and skip-connection networks written with ``jnp``);
2. measures the **sampled max**: the largest difference over ``--samples`` uniform points of
   the domain plus projected gradient ascent from the best 32 of them (the paper's protocol),
   and takes the "true max" as the larger of it and the verifier's attained ``lower``;
3. warms up (a first call compiles every program: its seconds are reported as ``compile_s``),
   then runs ``verify`` ``--repeats`` times with ``tol = 0.01`` (``--tol target``: the
   target's own ratio, ``1 - 1 / ratio``) and the target's time budget,
   reporting the median time at which ``upper / true max`` first fell below 1.5, 1.2, 1.1,
   1.05 and 1.02, and the boxes bounded;
4. checks soundness before anything else is reported: ``upper >= sampled max`` and
   ``lower <= upper`` on every run (exit status 1 otherwise);
5. saves the median run's certificate (``Verification.save``) and re-proves it with
   ``jc.check`` (Arb ball arithmetic, without the verifier), reporting the check's seconds
   beside the proof's (``--no-check`` skips it).

Targets (2-core CPU, float64): a network against itself with its output bias shifted
by ``delta``: ``upper in [delta, 1.05 delta]``; ``[2, 256, 256, 1]`` tanh vs
``collocation(6)``: ``1.05x`` within 15 s on a box and on a ball; vs ``collocation(10)``:
``1.1x`` within 30 s; ``[3, 128, 128, 1]`` softplus: ``1.2x`` within 60 s; ``[4, 64, 64, 1]``
tanh: ``1.5x`` within 120 s; ReLU ``[2, 64, 64, 1]`` vs a pruned copy: ``1.2x`` within 30 s;
an input skip connection (``y = [tanh(x W1 + b1), x] W2 + b2``) vs a compressed variant:
``1.1x``; and certifying an ``eps`` 10x above the sup costs a fraction of the full bracket's
time. (A first-order mean-value prototype reached 1.02x in 7.5 s on ``collocation(6)``, 1.43x in
49 s on ``collocation(10)``, 1.18x in 21 s on tanh ``[3, 128, 128, 1]``, 1.30x in 87 s on
``[4, 64, 64, 1]``.)

Output: ``<out>/verify_<platform>_<dtype>[_quick].{json,png}``: per case the settings, the
sampled max, the bracket, the times to each ratio and whether the target was met; the PNG shows
every case's bracket (upper and lower over the true max) against time, log scales.

Run (from the repository root)::

    python benchmarks/verify.py                      # every case (~19 min on 2 cores; 5 --no-check)
    python benchmarks/verify.py --quick --out /tmp/v # one small case, under 30 s
    python benchmarks/verify.py --cases col6_box,relu
    python benchmarks/verify.py --depth --repeats 1 --max-seconds 60   # with the depth rows
    python benchmarks/verify.py --cases deep2,deep3,wide2,nerf5 --tol target --samples 50000 \
        --no-check                 # the depth rows as docs/verify.md reports them (~20 min)

The depth rows (``DEPTH_CASES``: random teachers with kernels ``N(0, 1.2^2 / fan_in)`` and
biases ``N(0, 0.1^2)`` against their ``collocation(k)`` compression on the unit box) and their
targets: ``[2, 256x8, 1]`` tanh 1.05x in 30 s, ``[3, 256x8, 1]`` tanh 1.2x in 300 s,
``[2, 512x8, 1]`` tanh 1.1x in 120 s, a SIREN ``[3, 256x3, 1]`` (first kernel times 30)
1.2x in 300 s, ``[5, 128x3, 1]`` tanh 1.5x in 300 s. ``--remainders symbolic`` runs them with
remainder symbols.
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "verify"
RATIOS = (1.5, 1.2, 1.1, 1.05, 1.02)
DELTA = 1e-3


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--cases", default=None,
                   help="comma-separated case names (default: all; quick: the small one)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed runs per case, median reported (default 3; quick 1)")
    p.add_argument("--samples", type=int, default=None,
                   help="uniform samples of the sampled max (default 200000; quick 20000)")
    p.add_argument("--no-check", action="store_true",
                   help="skip saving each case's certificate and re-proving it (jc.check)")
    p.add_argument("--check-max-boxes", type=int, default=250_000,
                   help="re-prove only certificates of at most this many boxes (the check "
                   "takes milliseconds to tens of milliseconds per box on each core; default "
                   "250000: every case's)")
    p.add_argument("--remainders", choices=("auto", "radius", "symbolic"), default="auto",
                   help="verify's remainders= (default auto: symbolic from 3 nonlinear layers, "
                   "4 in 1-2 inputs)")
    p.add_argument("--depth", action="store_true",
                   help="also run the depth rows (DEPTH_CASES: up to 300 s each, 3 repeats)")
    p.add_argument("--tol", default="0.01",
                   help="verify's tol: a number (default 0.01: every run aims at 1.01x and the "
                   "times to each ratio are read from its history), or 'target': each case "
                   "asks for its own target ratio (tol = 1 - 1/ratio, converged there), as a "
                   "user who wants that ratio would")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="cap every case's budget at this many seconds (default: its target's)")
    args = p.parse_args(argv)
    cfg = {"repeats": args.repeats or (1 if args.quick else 3),
           "samples": args.samples or (20_000 if args.quick else 200_000),
           "ascent_starts": 32, "ascent_steps": 200,
           "tol": args.tol if args.tol == "target" else float(args.tol),
           "check": not args.no_check, "check_max_boxes": args.check_max_boxes,
           "out": str(args.out),
           "remainders": None if args.remainders == "auto" else args.remainders,
           "max_seconds": args.max_seconds}
    names = list(QUICK_CASES if args.quick else
                 [n for n in CASES if args.depth or n not in DEPTH_CASES])
    if args.cases:
        names = [s.strip() for s in args.cases.split(",") if s.strip()]
        unknown = [n for n in names if n not in CASES and n not in QUICK_CASES]
        if unknown:
            p.error(f"unknown case(s) {unknown}; known: {sorted(CASES) + sorted(QUICK_CASES)}")
    cfg["cases"] = names
    return args, cfg


# ------------------------------------------------------------------------------------------
# the networks


def _mlp_pair(sizes, k, act, domain_kind, *, dtype):
    """``jc.init_mlp`` teacher, ``jc.collocation(k)`` student (compressed on the unit ball)."""
    import jax

    import jaxcompress as jc

    d = sizes[0]
    teacher = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=dtype)
    student, _ = jc.compress(teacher, jc.collocation(k), activation=act, domain=jc.Ball(d, 1.0))
    widths = [int(layer["kernel"].shape[1]) for layer in student][:-1]
    return (lambda x: jc.apply(teacher, x, activation=act),
            lambda x: jc.apply(student, x, activation=act), _domain(domain_kind, d),
            {"teacher": list(sizes), "student": [d, *widths, sizes[-1]], "activation": act,
             "compression": f"jc.collocation({k}) on jc.Ball({d}, 1.0)"})


def _domain(kind, d):
    import jax.numpy as jnp

    import jaxcompress as jc

    return jc.Ball(d, 1.0) if kind == "ball" else jc.Box(-jnp.ones(d), jnp.ones(d))


def _exact(*, dtype):
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 256, 256, 1], dtype=dtype)
    shifted = [dict(layer) for layer in teacher]
    shifted[-1]["bias"] = shifted[-1]["bias"] + jnp.asarray(DELTA, dtype)
    return (lambda x: jc.apply(shifted, x, activation="tanh"),
            lambda x: jc.apply(teacher, x, activation="tanh"), _domain("box", 2),
            {"teacher": [2, 256, 256, 1], "student": "the teacher, output bias - delta",
             "activation": "tanh", "delta": DELTA})


def _relu(*, dtype):
    """A ReLU ``[2, 64, 64, 1]`` against a copy with the 20% smallest weights of every kernel
    set to zero (magnitude pruning)."""
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 64, 64, 1], dtype=dtype)
    pruned = []
    for layer in params:
        k = layer["kernel"]
        thr = jnp.quantile(jnp.abs(k), 0.2)
        pruned.append({"kernel": jnp.where(jnp.abs(k) < thr, 0.0, k).astype(k.dtype),
                       "bias": layer["bias"]})

    def net(ps):
        def f(x):
            for i, layer in enumerate(ps):
                x = x @ layer["kernel"] + layer["bias"][None]
                if i < len(ps) - 1:
                    x = jax.nn.relu(x)
            return x

        return f

    return net(params), net(pruned), _domain("box", 2), {
        "teacher": [2, 64, 64, 1], "student": "the 20% smallest weights of each kernel zeroed",
        "activation": "relu"}


def _skip(*, dtype):
    """``y = [tanh(x W1 + b1), x] W2 + b2`` (256 neurons) against 30 of its neurons, their
    output weights and the skip weights refitted by least squares on 4,000 points."""
    import jax
    import jax.numpy as jnp

    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
    w1 = jax.random.uniform(k1, (2, 256), dtype, -0.7, 0.7)
    b1 = jax.random.uniform(k2, (256,), dtype, -0.7, 0.7)
    w2 = jax.random.uniform(k3, (258, 1), dtype, -0.06, 0.06)
    b2 = jnp.zeros((1,), dtype)

    def net(w1, b1, w2, b2):
        def f(x):
            h = jnp.tanh(x @ w1 + b1[None])
            return jnp.concatenate([h, x], axis=1) @ w2 + b2[None]

        return f

    idx = jax.random.choice(k4, 256, (30,), replace=False)
    xs = jax.random.uniform(jax.random.PRNGKey(6), (4000, 2), dtype, -1.0, 1.0)
    target = net(w1, b1, w2, b2)(xs)
    feats = jnp.concatenate([jnp.tanh(xs @ w1[:, idx] + b1[idx][None]), xs,
                             jnp.ones((4000, 1), dtype)], axis=1)
    coef = jnp.linalg.lstsq(feats, target)[0]
    small = net(w1[:, idx], b1[idx], coef[:32], coef[32])
    return net(w1, b1, w2, b2), small, _domain("box", 2), {
        "teacher": "y = [tanh(x W1 + b1), x] W2 + b2, 256 neurons",
        "student": "30 neurons, output and skip weights refitted (least squares)",
        "activation": "tanh"}


def _random_pair(sizes, k, act, *, first_scale=1.0, seed=0, dtype):
    """A random teacher (kernels ``N(0, 1.2^2 / fan_in)``, biases ``N(0, 0.1^2)``; the first
    kernel times ``first_scale``: SIREN's ``sin(30 W x)``) against its ``jc.collocation(k)``
    compression on the unit box ``[-1, 1]^d``, the domain verified over (issue 59's depth rows)."""
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    d = sizes[0]
    keys = jax.random.split(jax.random.PRNGKey(seed), 2 * (len(sizes) - 1))
    teacher = []
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        kernel = 1.2 / math.sqrt(m) * jax.random.normal(keys[2 * i], (m, n), jnp.float64)
        teacher.append({"kernel": (kernel * (first_scale if i == 0 else 1.0)).astype(dtype),
                        "bias": (0.1 * jax.random.normal(keys[2 * i + 1], (n,),
                                                         jnp.float64)).astype(dtype)})
    domain = _domain("box", d)
    student, _ = jc.compress(teacher, jc.collocation(k), activation=act, domain=domain)
    widths = [int(layer["kernel"].shape[1]) for layer in student][:-1]
    first = f", first kernel x {first_scale:g}" if first_scale != 1.0 else ""
    return (lambda x: jc.apply(teacher, x, activation=act),
            lambda x: jc.apply(student, x, activation=act), domain,
            {"teacher": list(sizes), "student": [d, *widths, sizes[-1]], "activation": act,
             "init": f"kernels N(0, 1.2^2/fan_in), biases N(0, 0.1^2), seed {seed}{first}",
             "compression": f"jc.collocation({k}) on the unit box"})


CASES = {  # name: (builder, target ratio, target seconds)
    "exact": (_exact, 1.05, 15.0),
    "col6_box": (functools.partial(_mlp_pair, [2, 256, 256, 1], 6, "tanh", "box"), 1.05, 15.0),
    "col6_ball": (functools.partial(_mlp_pair, [2, 256, 256, 1], 6, "tanh", "ball"), 1.05, 15.0),
    "col10_ball": (functools.partial(_mlp_pair, [2, 256, 256, 1], 10, "tanh", "ball"), 1.1,
                   30.0),
    "col10_box": (functools.partial(_mlp_pair, [2, 256, 256, 1], 10, "tanh", "box"), 1.1, 30.0),
    "softplus3": (functools.partial(_mlp_pair, [3, 128, 128, 1], 6, "softplus", "ball"), 1.2,
                  60.0),
    "tanh4": (functools.partial(_mlp_pair, [4, 64, 64, 1], 3, "tanh", "ball"), 1.5, 120.0),
    "relu": (_relu, 1.2, 30.0),
    "skip": (_skip, 1.1, 30.0),
    # depth, width, SIREN and five inputs (random teachers on the unit box)
    "deep2": (functools.partial(_random_pair, [2] + [256] * 8 + [1], 8, "tanh"), 1.05, 30.0),
    "deep3": (functools.partial(_random_pair, [3] + [256] * 8 + [1], 6, "tanh"), 1.2, 300.0),
    "wide2": (functools.partial(_random_pair, [2] + [512] * 8 + [1], 8, "tanh"), 1.1, 120.0),
    "siren3": (functools.partial(_random_pair, [3] + [256] * 3 + [1], 6, "sin",
                                 first_scale=30.0), 1.2, 300.0),
    "nerf5": (functools.partial(_random_pair, [5] + [128] * 3 + [1], 3, "tanh"), 1.5, 300.0),
}
#: The rows of real depth, width, SIREN and five inputs: run with ``--depth`` (or ``--cases``).
DEPTH_CASES = ("deep2", "deep3", "wide2", "siren3", "nerf5")
QUICK_CASES = {
    "quick": (functools.partial(_mlp_pair, [2, 64, 64, 1], 4, "tanh", "ball"), 1.05, 15.0),
}
#: The case whose sup the eps run certifies (10x above), and against whose full bracket.
EPS_CASE = "col10_ball"


# ------------------------------------------------------------------------------------------
# measurements


def sampled_max(fa, fb, domain, *, samples, starts, steps, seed=1):
    """The largest ``max_j |F_a - F_b|`` over uniform samples of the domain, then projected
    gradient ascent (normalised steps, halved on failure) from the best ``starts``."""
    import jax
    import jax.numpy as jnp

    def err(x):
        return jnp.max(jnp.abs(fa(x) - fb(x)), axis=1)

    x = domain.sample(jax.random.PRNGKey(seed), samples, dtype=jnp.float64)
    e = jnp.concatenate([jax.jit(err)(x[i:i + 20_000]) for i in range(0, samples, 20_000)])
    best = jnp.argsort(-e)[:starts]
    radius = float(jnp.max(jnp.abs(jnp.asarray(domain.half_widths(jnp.float64)))))

    @jax.jit
    def climb(x0):
        grad = jax.grad(lambda x: jnp.sum(err(x)))

        def body(_, s):
            x, fx, step = s
            g = grad(x)
            g = g / jnp.maximum(jnp.linalg.norm(g, axis=1, keepdims=True), 1e-300)
            cand = domain.project(x + step[:, None] * g)
            fc = err(cand)
            up = fc > fx
            return (jnp.where(up[:, None], cand, x), jnp.where(up, fc, fx),
                    jnp.where(up, step * 1.5, step * 0.5))

        x, fx, _ = jax.lax.fori_loop(0, steps, body,
                                     (x0, err(x0), jnp.full(x0.shape[0], 0.05 * radius)))
        return fx, x

    fx, xs = climb(x[best])
    i = int(jnp.argmax(fx))
    return max(float(fx[i]), float(e[best[0]])), [float(v) for v in xs[i]]


def time_to(history, truth, ratio):
    """The first time at which ``upper <= ratio * truth`` (None: never)."""
    for t, _, upper in history:
        if upper is not None and upper <= ratio * truth:
            return t
    return None


def _sizes(sizes) -> str:
    """``[3, 256, 256, 256, 1]`` as ``[3, 256x3, 1]`` (a run of equal hidden widths)."""
    hidden = sizes[1:-1]
    if len(hidden) > 1 and len(set(hidden)) == 1:
        return f"[{sizes[0]}, {hidden[0]}x{len(hidden)}, {sizes[-1]}]"
    return str(list(sizes))


def run_case(name, spec, cfg, dtype, log):
    import jax.numpy as jnp

    from jaxcompress.verification import verify

    build, ratio, target_s = spec
    budget = target_s if cfg["max_seconds"] is None else min(target_s, cfg["max_seconds"])
    fa, fb, domain, info = build(dtype=jnp.float64 if dtype == "float64" else jnp.float32)
    t0 = time.perf_counter()
    sampled, where = sampled_max(fa, fb, domain, samples=cfg["samples"],
                                 starts=cfg["ascent_starts"], steps=cfg["ascent_steps"])
    sample_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = verify(fa, fb, domain=domain, max_seconds=1e-3, remainders=cfg["remainders"])
    compile_s = time.perf_counter() - t0
    runs = []
    for _ in range(cfg["repeats"]):
        tol = 1.0 - 1.0 / ratio if cfg["tol"] == "target" else cfg["tol"]
        res = verify(fa, fb, domain=domain, tol=tol, max_seconds=budget,
                     remainders=cfg["remainders"])
        runs.append(res)
    failures = []
    for res in runs:
        if not res.upper >= sampled:
            failures.append(f"{name}: upper {res.upper:.6e} < sampled max {sampled:.6e}")
        if not res.lower <= res.upper:
            failures.append(f"{name}: lower {res.lower:.6e} > upper {res.upper:.6e}")
    truth = max(sampled, max(r.lower for r in runs))
    times = {str(q): [time_to(r.history, truth, q) for r in runs] for q in RATIOS}
    med = {q: (statistics.median(v) if all(t is not None for t in v) else None)
           for q, v in times.items()}
    order = sorted(range(len(runs)), key=lambda i: runs[i].seconds)
    mid = runs[order[len(order) // 2]]
    reached = med[str(ratio)]
    row = {
        "case": name, **info, "domain": type(domain).__name__, "dim": int(domain.dim),
        "order": mid.order, "sampled_max": sampled, "sampled_argmax": where,
        "sample_seconds": sample_s, "compile_s": compile_s, "warm_boxes": warm.boxes,
        "lower": mid.lower, "upper": mid.upper, "true_max": truth,
        "upper_over_true": mid.upper / truth, "upper_over_lower": mid.upper / mid.lower,
        "status": mid.status, "seconds": statistics.median(r.seconds for r in runs),
        "boxes": int(statistics.median(r.boxes for r in runs)),
        "argmax": [float(v) for v in mid.argmax],
        "time_to_ratio": med, "time_to_ratio_runs": times,
        "target": {"ratio": ratio, "seconds": target_s,
                   "met": reached is not None and reached <= target_s},
        "history": [list(h) for h in mid.history],
        "soundness_failures": failures,
    }
    if cfg["check"]:
        row["check"] = run_check(name, mid, Path(cfg["out"]), cfg["check_max_boxes"], log)
    if name == "exact":
        row["target"]["met"] = bool(DELTA <= mid.upper <= 1.05 * DELTA
                                    and abs(mid.lower - DELTA) <= 1e-9)
        row["target"]["what"] = "upper in [delta, 1.05 delta], lower == delta"
    log(f"{name:<11} {row['status']:<9} [{mid.lower:.6e}, {mid.upper:.6e}]  sampled max "
        f"{sampled:.6e}  upper/true {row['upper_over_true']:.4f}  {row['boxes']:>8,} boxes  "
        f"{row['seconds']:6.2f} s (compile {compile_s:.1f} s)  to "
        + "  ".join(f"{q}x {C.fmt(med[str(q)]) if med[str(q)] is None else f'{med[str(q)]:.2f}'}"
                    for q in RATIOS)
        + f"  target {ratio}x in {target_s:g} s: {'met' if row['target']['met'] else 'MISSED'}")
    return row, failures, fa, fb, domain


def run_check(name, res, out: Path, max_boxes: int, log):
    """Save the median run's certificate and re-prove it with ``jc.check`` (Arb ball
    arithmetic, without the verifier): its seconds beside the proof's."""
    import jaxcompress as jc

    if res.boxes > max_boxes:
        log(f"{name:<11} check     not run: {res.boxes:,} boxes > --check-max-boxes {max_boxes:,}")
        return {"saved": False, "reason": f"{res.boxes} boxes > --check-max-boxes {max_boxes}"}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"verify_{name}_certificate.npz"
    try:
        res.save(path)
    except ValueError as e:
        log(f"{name:<11} check     not saved: {e}")
        return {"saved": False, "reason": str(e)}
    report = jc.check(path, workers=None)  # one process per core
    log(f"{name:<11} check     {'confirmed' if report.confirmed else 'REJECTED'} in "
        f"{report.seconds:.2f} s ({report.seconds / res.seconds:.1f}x the proof's "
        f"{res.seconds:.2f} s): {report.leaves:,} leaves, {report.boxes:,} boxes, depth "
        f"{report.depth}" + ("" if report.confirmed else f"; {report.reason}"))
    return {"saved": True, "confirmed": report.confirmed, "reason": report.reason,
            "seconds": report.seconds, "proof_seconds": res.seconds,
            "ratio": report.seconds / res.seconds, "leaves": report.leaves,
            "boxes": report.boxes, "depth": report.depth,
            "bytes": path.stat().st_size}


def run_eps(fa, fb, domain, full_row, log):
    """Certify ``eps = 10 x`` the true max; compare with the full bracket's time."""
    from jaxcompress.verification import verify

    eps = 10.0 * full_row["true_max"]
    res = verify(fa, fb, domain=domain, eps=eps)
    full_t = full_row["seconds"]
    log(f"eps         {res.status:<9} eps = 10 x sup = {eps:.3e}: {res.seconds:.3f} s, "
        f"{res.boxes:,} boxes (the full bracket: {full_t:.2f} s, {full_row['boxes']:,} boxes; "
        f"fraction {res.seconds / full_t:.3f})")
    return {"case": f"eps ({full_row['case']})", "eps": eps, "status": res.status,
            "upper": res.upper, "seconds": res.seconds, "boxes": res.boxes,
            "full_seconds": full_t, "fraction_of_full": res.seconds / full_t,
            "target": {"what": "certified, in a fraction of the full bracket's time",
                       "met": res.status == "certified" and res.seconds < full_t}}


# ------------------------------------------------------------------------------------------
# output


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = result["cases"]
    n = len(rows)
    cols = min(3, n)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.5 * nrows), squeeze=False)
    for ax, row in zip(axes.flat, rows, strict=False):
        h = np.asarray(row["history"], dtype=float).reshape(-1, 3)
        truth = row["true_max"]
        t = np.maximum(h[:, 0], 1e-3)
        ok = np.isfinite(h[:, 2]) & (h[:, 2] > 0)
        ax.step(t[ok], h[ok, 2] / truth, where="post", color="C3", label="upper / true max")
        pos = h[:, 1] > 0
        ax.step(t[pos], h[pos, 1] / truth, where="post", color="C0", label="lower / true max")
        tgt = row["target"]
        ax.axhline(tgt["ratio"], color="gray", ls="--", lw=1,
                   label=f"target {tgt['ratio']}x within {tgt['seconds']:g} s")
        ax.axvline(tgt["seconds"], color="gray", ls=":", lw=1)
        reached = time_to(row["history"], truth, tgt["ratio"])  # of the run drawn
        if reached is not None:
            ax.plot([max(reached, 1e-3)], [tgt["ratio"]], "o", color="C2", ms=5,
                    label=f"{tgt['ratio']}x reached at {reached:.2f} s")
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.9, max(10.0, 1.1 * tgt["ratio"], 1.5 * row["upper_over_true"]))
        ax.set_xlim(left=min(0.01, float(t.min())))
        ax.set_xlabel("seconds since the call (programs compiled before)")
        ax.set_ylabel("bound / true max")
        met = "met" if tgt["met"] else "MISSED"
        teacher = row["teacher"]
        label = teacher if isinstance(teacher, str) else _sizes(teacher)
        ax.set_title(f"{row['case']}: {row['activation']} {label[:28]}, "
                     f"{row['domain'].lower()}\n{row['upper_over_true']:.3f}x at "
                     f"{row['seconds']:.1f} s, {row['boxes']:,} boxes ({met})", fontsize=8.5)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    eps = result.get("eps")
    note = "" if not eps else (f"; eps = 10x sup certified in {eps['seconds']:.2f} s "
                               f"({eps['fraction_of_full']:.2f} of the full bracket's time)")
    fig.suptitle(f"verify: proven bracket over the true max (sampled + ascent): "
                 f"{C.device_label(result['env'])}, {result['dtype']}{note}", fontsize=10)
    C.save_figure(fig, path, rect=(0, 0, 1, 0.96))


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun
    start, args, cfg, env = begun
    import jax

    def log(line):
        print(line, flush=True)

    C.print_header(env, args.dtype, [
        f"cases {cfg['cases']}; {cfg['repeats']} timed run(s) each (median), tol "
        f"{cfg['tol']}; sampled max: {cfg['samples']:,} uniform points + {cfg['ascent_steps']} "
        f"ascent steps from the best {cfg['ascent_starts']}",
        "verify computes in float64 whatever the networks' dtype (jax.enable_x64 inside)"])
    rows, failures, eps_row = [], [], None
    specs = {**CASES, **QUICK_CASES}
    with jax.default_matmul_precision(C.PRECISION):
        for name in cfg["cases"]:
            row, bad, fa, fb, domain = run_case(name, specs[name], cfg, args.dtype, log)
            rows.append(row)
            failures += bad
            if name == EPS_CASE or (args.quick and name == "quick"):
                eps_row = run_eps(fa, fb, domain, row, log)
    if failures:
        log("## soundness check FAILED: " + "; ".join(failures))
    C.finish(env, start)
    result = {"benchmark": NAME, "env": env, "device": env["device"], "dtype": args.dtype,
              "precision": C.PRECISION_NOTE, "quick": args.quick, "config": cfg,
              "ratios": list(RATIOS), "cases": rows, "eps": eps_row,
              "soundness": {"passed": not failures, "failures": failures},
              "targets": {r["case"]: r["target"]["met"] for r in rows}
              | ({"eps": eps_row["target"]["met"]} if eps_row else {})}
    paths = C.save_results(args, env, NAME, result, plot)
    log("\n## targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}"
                                     for k, v in result["targets"].items()))
    C.print_written(paths, env)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
