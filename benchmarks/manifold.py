"""Many inputs, few dimensions: how wide a compressed network must be when its data lie near an
``m``-dimensional manifold of a ``d``-dimensional input space (issue 34).

The paper's effective-dimension corollary (exact analytic parameterisation): if every input is
``x = iota(u)`` with ``u`` in an ``m``-dimensional domain and ``iota`` analytic, the network on
the data is an analytic function of ``u`` and the widths scale with ``D_k = C(m + k, m)``, not
with ``d``. Its outlook: a near-manifold version. Measured here (ours):

**Analytic manifolds**: ``x = sin(u W + c)`` with ``u`` uniform in ``[-1, 1]^m``, ``W`` a fixed
``(m, d)`` Gaussian matrix and ``c`` fixed phases, for ``m = 1, 2, 3`` at ``d = 64`` and
``d = 16, 256`` at ``m = 2``; the task is regression of ``q(u) = sin(2 u_1) prod_j cos(1.5 u_j)
+ 0.3 sum_j u_j u_(j+1)`` (``+ 0.3 u_1^2`` for ``m = 1``). Teachers ``[d, 128, 128, 1]`` tanh
trained with Adam on 4,000 inputs; the task error is the MSE against ``q`` on 2,000 test inputs.
**The issue's case**: ``d = 32``, ``m = 2``, a ``[32, 256, 256, 1]`` teacher.
**Near-manifold**: the ``d = 64``, ``m = 2`` inputs plus normal noise of standard deviation
``sigma = 0.01, 0.03, 0.1`` (train and test inputs noisy, targets ``q(u)``).
**Digits**: scikit-learn's 8 x 8 handwritten digits (1,797 x 64, shipped inside the package: no
download; pixel values / 16), a ``[64, 128, 128, 10]`` tanh classifier trained with softmax
cross-entropy on every row but each fifth, which is the test set; task error = test
cross-entropy (accuracy reported beside it).

For every case and method: the smallest width ``w`` (both hidden layers, scanned upwards over a
grid) whose test task error is at most **1.05x the teacher's**. Methods:

- ``data (OMP, fwd)``: ``jc.data_matching(x_train, widths=[w, w])`` with no domain (the library's
  defaults: OMP selection, forward order; 1/8 of ``x_train`` held out for its estimate);
- ``data (QR, bwd)``: the same with ``selector="pivoted_qr", layer_order="backward"``;
- ``data + polish``: the OMP result polished on ``x_train`` (``jc.polish(points=x_train)``, 500
  Adam steps), scanned up to the unpolished width;
- ``parameterization``: ``jc.collocation(2, widths=[w, w])`` on ``jc.Parameterization(iota,
  Box)``, the route that needs ``iota`` (synthetic cases only; with noise, ``iota`` is the clean
  manifold);
- ``weight norm``: the ``w`` neurons of largest outgoing-weight norm, re-fitted by least squares
  on ``x_train`` (``selector="weight_norm"``: magnitude pruning);
- ``scratch``: a ``[d, w, w, out]`` network trained from a random start with the teacher's
  protocol (widths 1, 2, 4, 8, ...: training is the costly step).

Beside them the data's profile (``jc.data_profile``: intrinsic dimension by TwoNN, numerical
ranks of each layer's activations at ``rtol = 1e-6``) and the paper's width scale
``C(m + k, m)``. Before anything is measured, data matching must reproduce a network at its data
rank (exit status 1 otherwise). Output: ``<out>/manifold_<platform>_float64.{json,png}``.

Run (from the repository root; the digits need ``pip install -e ".[bench]"``)::

    python benchmarks/manifold.py                        # full run (~30-40 min on 2 cores)
    python benchmarks/manifold.py --quick --out /tmp/m   # one tiny case, seconds
    python benchmarks/manifold.py --cases d64_m1 digits  # some cases
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

NAME = "manifold"
ACT = "tanh"
GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128,
        160, 192, 224, 256)
METHODS = ("data (OMP, fwd)", "data (QR, bwd)", "data + polish", "parameterization",
           "weight norm", "scratch")
PAPER = {"source": "Wang, Wang & Ziyin (2026), effective-dimension corollary (exact analytic "
                   "parameterization) and its outlook (near-manifold data)",
         "claim": "with x = iota(u), u in m dimensions, widths scale with C(m + k, m), not with "
                  "d_in; the paper measures no high-dimensional network"}


def synthetic(name, d, m, sigma=0.0, width=128):
    return {"name": name, "kind": "synthetic", "d": d, "m": m, "sigma": sigma, "width": width}


CASES = {
    "issue_d32_m2": synthetic("issue_d32_m2", 32, 2, width=256),
    "d64_m1": synthetic("d64_m1", 64, 1),
    "d64_m2": synthetic("d64_m2", 64, 2),
    "d64_m3": synthetic("d64_m3", 64, 3),
    "d16_m2": synthetic("d16_m2", 16, 2),
    "d256_m2": synthetic("d256_m2", 256, 2),
    "d64_m2_noise0.01": synthetic("d64_m2_noise0.01", 64, 2, 0.01),
    "d64_m2_noise0.03": synthetic("d64_m2_noise0.03", 64, 2, 0.03),
    "d64_m2_noise0.1": synthetic("d64_m2_noise0.1", 64, 2, 0.1),
    "digits": {"name": "digits", "kind": "digits", "d": 64, "m": None, "sigma": None,
               "width": 128},
}

FULL = {"cases": list(CASES), "n_train": 4000, "n_test": 2000, "steps": 3000, "lr": 3e-3,
        "polish_steps": 500, "ratio": 1.05}
QUICK = {"cases": ["d16_m1"], "n_train": 600, "n_test": 300, "steps": 300, "lr": 1e-2,
         "polish_steps": 100, "ratio": 1.05}
CASES["d16_m1"] = synthetic("d16_m1", 16, 1, width=24)


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), default=None,
                   help="which cases (default: all but the quick one)")
    p.add_argument("--cache", type=Path, default=None,
                   help="folder keeping trained teachers between runs")
    p.add_argument("--resume", action="store_true",
                   help="keep the cases of a stopped run (<out>/.manifold_partial.json)")
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.cases:
        cfg["cases"] = list(args.cases)
    return args, cfg


# --- data --------------------------------------------------------------------------------------


def manifold_map(d, m, seed=0):
    """``iota(u) = sin(u W + c)``: an analytic map of ``[-1, 1]^m`` into ``R^d``."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(1000 * d + m + seed)
    w, c = rng.standard_normal((m, d)), rng.uniform(0.0, 2.0 * np.pi, d)

    def iota(u):
        shift = jnp.asarray(c, u.dtype).reshape((1,) * (u.ndim - 1) + (-1,))
        return jnp.sin(u @ jnp.asarray(w, u.dtype) + shift)

    return iota


def target(u):
    import numpy as np

    m = u.shape[-1]
    q = np.sin(2 * u[:, 0]) * np.prod(np.cos(1.5 * u[:, 1:]), axis=1)
    q = q + (0.3 * np.sum(u[:, :-1] * u[:, 1:], axis=1) if m > 1 else 0.3 * u[:, 0] ** 2)
    return q[:, None]


def synthetic_data(case, n_train, n_test):
    import jax.numpy as jnp
    import numpy as np

    d, m, sigma = case["d"], case["m"], case["sigma"]
    iota = manifold_map(d, m)
    rng = np.random.default_rng(7 * d + m)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        u = rng.uniform(-1.0, 1.0, (n, m))
        x = np.asarray(iota(jnp.asarray(u)))
        if sigma:
            x = x + sigma * rng.standard_normal(x.shape)
        out[split] = (x, target(u))
    return out, iota


def digits_data():
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # the benchmark extra
        raise SystemExit("manifold.py: the digits case needs scikit-learn: pip install -e "
                         "\".[bench]\" (or leave it out with --cases)") from e
    import numpy as np

    ds = load_digits()
    x, labels = ds.data / 16.0, ds.target
    y = np.eye(10)[labels]
    test = np.arange(len(x)) % 5 == 4
    return {"train": (x[~test], y[~test]), "test": (x[test], y[test])}


# --- training and the task -------------------------------------------------------------------


def task_error(jc, params, x, y, kind):
    """Test MSE (regression) or cross-entropy (digits), and the accuracy for digits."""
    import jax
    import jax.numpy as jnp

    out = jc.apply(params, jnp.asarray(x), activation=ACT)
    if kind == "digits":
        ce = -jnp.mean(jnp.sum(jnp.asarray(y) * jax.nn.log_softmax(out), axis=1))
        acc = jnp.mean(jnp.argmax(out, axis=1) == jnp.argmax(jnp.asarray(y), axis=1))
        return float(ce), float(acc)
    return float(jnp.mean((out - jnp.asarray(y)) ** 2)), None


def train(jc, sizes, x, y, kind, *, steps, lr, seed):
    """Full-batch Adam with a cosine schedule from ``init_mlp``; returns the parameters."""
    import jax
    import jax.numpy as jnp
    import optax

    params = jc.init_mlp(jax.random.PRNGKey(seed), sizes)
    opt = optax.adam(optax.cosine_decay_schedule(lr, steps))
    x, y = jnp.asarray(x), jnp.asarray(y)

    def loss(p):
        out = jc.apply(p, x, activation=ACT)
        if kind == "digits":
            return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(out), axis=1))
        return jnp.mean((out - y) ** 2)

    @jax.jit
    def run(p, s):
        def body(carry, _):
            p, s = carry
            g = jax.grad(loss)(p)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None
        return jax.lax.scan(body, (p, s), None, length=steps)[0][0]

    return run(params, opt.init(params))


def teacher_for(jc, case, data, cfg, cache, log):
    import pickle

    import jax

    sizes = [case["d"], case["width"], case["width"], 1 if case["kind"] != "digits" else 10]
    key = f"{case['name']}_{cfg['n_train']}_{cfg['steps']}.pkl"
    if cache is not None and (cache / key).exists():
        return pickle.loads((cache / key).read_bytes()), 0.0
    t = time.perf_counter()
    params = train(jc, sizes, *data["train"], case["kind"], steps=cfg["steps"], lr=cfg["lr"],
                   seed=0)
    params = jax.block_until_ready(params)
    seconds = time.perf_counter() - t
    log(f"  teacher {sizes} trained in {seconds:.0f} s")
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / key).write_bytes(pickle.dumps(jax.device_get(params)))
    return params, seconds


# --- the width scans ----------------------------------------------------------------------------


def scan(candidate, budget, widths):
    """Upwards over ``widths``: the first whose task error meets ``budget``; every tried width's
    error is kept (the curve)."""
    curve = []
    for w in widths:
        t = time.perf_counter()
        err = candidate(w)
        curve.append({"width": w, "task_error": err, "seconds": time.perf_counter() - t})
        if err <= budget:
            return w, curve
    return None, curve


def run_case(jc, case, cfg, args, log):
    import jax
    import numpy as np

    if case["kind"] == "digits":
        data, iota = digits_data(), None
    else:
        data, iota = synthetic_data(case, cfg["n_train"], cfg["n_test"])
    (xtr, ytr), (xte, yte) = data["train"], data["test"]
    teacher, train_s = teacher_for(jc, case, data, cfg, args.cache, log)
    t_err, t_acc = task_error(jc, teacher, xte, yte, case["kind"])
    budget = cfg["ratio"] * t_err
    width = case["width"]
    grid = [w for w in GRID if w < width]
    prof = jc.data_profile(teacher, xtr, activation=ACT, rtol=1e-6)
    log(f"  teacher test error {t_err:.3e}" + (f" (accuracy {t_acc:.3f})" if t_acc else "")
        + f"; intrinsic dimension {prof.intrinsic_dim:.2f}; ranks at 1e-6 {prof.widths}")

    def err_of(params):
        return task_error(jc, params, xte, yte, case["kind"])[0]

    def data_method(**kw):
        def cand(w):
            small, _ = jc.compress(teacher, jc.data_matching(xtr, widths=[w, w], **kw),
                                   activation=ACT)
            return err_of(small)
        return cand

    results = {}

    def record(name, found, curve, note=""):
        results[name] = {"width": found, "curve": curve, "note": note,
                         "num_params": None if found is None else
                         jc.num_params(jc.init_mlp(jax.random.PRNGKey(0),
                                                   [case["d"], found, found,
                                                    len(yte[0])]))}
        seconds = sum(c["seconds"] for c in curve)
        log(f"  {name:<18} width {found if found is not None else '> ' + str(grid[-1]):>6} "
            f"({len(curve)} widths tried, {seconds:.0f} s){' ' + note if note else ''}")

    record("data (OMP, fwd)", *scan(data_method(), budget, grid))
    record("data (QR, bwd)", *scan(data_method(selector="pivoted_qr", layer_order="backward"),
                                   budget, grid))
    top = results["data (OMP, fwd)"]["width"] or grid[-1]

    def polished(w):
        small, _ = jc.compress(teacher, jc.data_matching(xtr, widths=[w, w]), activation=ACT)
        small, _ = jc.polish(small, teacher, activation=ACT, domain=jc.Points(xtr), points=xtr,
                             steps=cfg["polish_steps"])
        return err_of(small)

    record("data + polish", *scan(polished, budget, [w for w in grid if w <= top]))
    if iota is not None:
        dom = jc.Parameterization(iota, jc.Box(-np.ones(case["m"]), np.ones(case["m"])))

        def param(w):
            small, _ = jc.compress(teacher, jc.collocation(2, widths=[w, w]), activation=ACT,
                                   domain=dom)
            return err_of(small)

        note = "the clean manifold's iota; the inputs are noisy" if case["sigma"] else ""
        record("parameterization", *scan(param, budget, grid), note=note)
    record("weight norm", *scan(data_method(selector="weight_norm"), budget, grid))

    def scratch(w):
        sizes = [case["d"], w, w, len(ytr[0])]
        return err_of(train(jc, sizes, xtr, ytr, case["kind"], steps=cfg["steps"],
                            lr=cfg["lr"], seed=1))

    # training is the costly step: a doubling grid (the width found is within 2x of the smallest)
    record("scratch", *scan(scratch, budget, [w for w in grid if w & (w - 1) == 0]),
           note="doubling grid")
    m_est = prof.intrinsic_dim
    return {"case": case, "teacher": {"width": width, "test_error": t_err, "accuracy": t_acc,
                                      "train_seconds": train_s,
                                      "num_params": jc.num_params(teacher)},
            "budget": budget, "profile": prof.to_dict(),
            "width_scale": {str(k): math.comb(round(m_est) + k, k) for k in range(1, 9)}
            if math.isfinite(m_est) else None,
            "methods": results}


# --- the check ----------------------------------------------------------------------------------


def check(jc, log) -> list[str]:
    """Data matching at the data's numerical rank reproduces a network on its data (a curve in
    32 dimensions), with no domain and no order."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    iota = manifold_map(32, 1)
    x = np.asarray(iota(jnp.asarray(np.linspace(-1, 1, 400)[:, None])))
    params = [{"kernel": 0.3 * p["kernel"], "bias": p["bias"]}
              for p in jc.init_mlp(jax.random.PRNGKey(3), [32, 24, 24, 1])]
    small, info = jc.compress(params, jc.data_matching(x, rtol=1e-10), activation=ACT)
    scale = float(jnp.max(jnp.abs(jc.apply(params, x, activation=ACT))))
    failures = []
    widths = jc.layer_sizes(small)[1:-1]
    if not max(widths) < 24:
        failures.append(f"the data rank of a curve should be below 24, got widths {widths}")
    if not float(info.error_estimate) < 1e-7 * scale:
        failures.append(f"held-out error {float(info.error_estimate):.2e} at the data rank")
    log(f"  widths {widths} of 24 at rtol 1e-10; held-out max error "
        f"{float(info.error_estimate):.2e} (scale {scale:.2f})")
    return failures


# --- report -------------------------------------------------------------------------------------


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = result["cases"]
    fig, axes = plt.subplots(1, 5, figsize=(21, 4.6))
    styles = {name: dict(marker=mk, color=f"C{i}") for i, (name, mk) in
              enumerate(zip(METHODS, "osD^vx", strict=True))}

    def width(r, name):
        w = r["methods"].get(name, {}).get("width")
        return np.nan if w is None else w

    def panel(ax, keys, xs, xlabel, title, logx=False):
        for name in METHODS:
            ys = [width(rows[k], name) if k in rows else np.nan for k in keys]
            if all(np.isnan(ys)):
                continue
            ax.plot(xs, ys, label=name, **styles[name])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("smallest width within 1.05x the teacher's task error")
        ax.set_yscale("log")
        if logx:
            ax.set_xscale("symlog", linthresh=0.01)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)

    first = "issue_d32_m2" if "issue_d32_m2" in rows else next(iter(rows))
    ax, r = axes[0], rows[first]
    for name in METHODS:
        curve = r["methods"].get(name, {}).get("curve", [])
        if curve:
            ax.plot([c["width"] for c in curve],
                    [c["task_error"] / r["teacher"]["test_error"] for c in curve],
                    label=name, **styles[name])
    ax.axhline(result["config"]["ratio"], color="k", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("hidden width (both layers)")
    ax.set_ylabel("test task error / teacher's")
    c = r["case"]
    ax.set_title(f"{first}: d = {c['d']}, m = {c['m']}, teacher width {c['width']}", fontsize=9)
    ax.grid(alpha=0.3)
    panel(axes[1], ["d64_m1", "d64_m2", "d64_m3"], [1, 2, 3], "manifold dimension m",
          "d = 64 inputs, teacher width 128")
    axes[1].set_xticks([1, 2, 3])
    panel(axes[2], ["d16_m2", "d64_m2", "d256_m2"], [16, 64, 256], "input dimension d",
          "m = 2, d = 16 to 256 (teachers differ in error)")
    axes[2].set_xscale("log")
    axes[2].set_xticks([16, 32, 64, 256], ["16", "32", "64", "256"])
    axes[2].minorticks_off()
    panel(axes[3], ["d64_m2", "d64_m2_noise0.01", "d64_m2_noise0.03", "d64_m2_noise0.1"],
          [0, 0.01, 0.03, 0.1], "noise sigma off the manifold", "d = 64, m = 2, noisy inputs",
          logx=True)
    ax = axes[4]
    if "digits" in rows:
        r = rows["digits"]
        names = [n for n in METHODS if n in r["methods"]]
        ws = [width(r, n) for n in names]
        ax.bar(range(len(names)), [0 if np.isnan(w) else w for w in ws],
               color=[styles[n]["color"] for n in names])
        for i, w in enumerate(ws):
            ax.annotate("none" if np.isnan(w) else str(int(w)), (i, 0 if np.isnan(w) else w),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
        ax.set_title(f"digits (64 inputs, TwoNN m ~ {r['profile']['intrinsic_dim']:.1f}), "
                     "teacher 128", fontsize=9)
        ax.set_ylabel("smallest width within 1.05x test cross-entropy")
    else:
        ax.set_axis_off()
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    env = result["env"]
    fig.suptitle(f"Width needed on data near an m-dimensional manifold (tanh teachers, "
                 f"float64); {C.device_label(env)}", fontsize=10)
    C.save_figure(fig, path, rect=(0, 0.07, 1, 0.95))


def summarize(result: dict) -> None:
    print("\n# smallest width within "
          f"{result['config']['ratio']}x the teacher's task error (teacher width in brackets)")
    head = f"{'case':<18} {'m~':>5} {'ranks':>10} " + " ".join(f"{n[:14]:>14}" for n in METHODS)
    print(head)
    for name, r in result["cases"].items():
        ws = []
        for n in METHODS:
            rec = r["methods"].get(n)
            ws.append("n/a" if rec is None else ("none" if rec["width"] is None
                                                  else str(rec["width"])))
        ranks = ",".join(str(s["rank"]) for s in r["profile"]["sets"])
        print(f"{name + ' [' + str(r['teacher']['width']) + ']':<18} "
              f"{r['profile']['intrinsic_dim']:>5.2f} {ranks:>10} "
              + " ".join(f"{w:>14}" for w in ws))


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun  # --replot
    start, args, cfg, env = begun
    import jax

    import jaxcompress as jc

    def log(line):
        print(line, flush=True)

    C.print_header(env, args.dtype, [
        f"cases {cfg['cases']}; {cfg['n_train']} training / {cfg['n_test']} test inputs; "
        f"teachers: full-batch Adam, {cfg['steps']} steps; budget {cfg['ratio']}x the teacher's "
        "task error"])
    result = {"benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
              "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
              "config": cfg, "cases": {}}
    with jax.default_matmul_precision(C.PRECISION):
        log("\n## check: data matching at the data's rank reproduces a network on a curve in "
            "32-D")
        failures = check(jc, log)
        if failures:
            log("## check FAILED: " + "; ".join(failures))
            return 1
        partial = args.out / f".{NAME}_partial.json"
        if args.resume and partial.exists():
            import json

            done = json.loads(partial.read_text())["cases"]
            result["cases"] = {k: v for k, v in done.items() if k in cfg["cases"]}
            log(f"\n## resumed: {', '.join(result['cases'])} from {partial}")
        for name in cfg["cases"]:
            if name in result["cases"]:
                continue
            log(f"\n## {name}")
            result["cases"][name] = run_case(jc, CASES[name], cfg, args, log)
            C.write_json(partial, result)
        partial.unlink(missing_ok=True)
    C.finish(env, start)
    full = cfg["cases"] == FULL["cases"]
    paths = C.save_results(args, env, NAME, result, plot,
                           suffix="" if full else "_" + "-".join(cfg["cases"]))
    summarize(result)
    C.print_written(paths, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
