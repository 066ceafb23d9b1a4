"""Compare compression methods on the paper's trained teachers (Table 1) and random network (Fig 2).

Every method is one ``jc.compress`` call at the widths ``D_k = C(2 + k, 2)``, ``k = 0..10``
(1, 3, 6, 10, 15, 21, 28, 36, 45, 55, 66), all hidden layers, backward order, no fine-tuning:

=====================  =========================================================================
``derivative``         the paper's derivative matching (Taylor features at the centre, R-scaled
                       pivoted QR)
``derivative+maxvol``  the same with maxvol swaps (``|C_ij| <= 1.01``)
``derivative+omp``     derivative features, output-aware greedy selection (``selector="omp"``)
``taylor_multi``       derivative features at 5 centres (centre and half-way to the boundary)
``collocation``        activations at ``4 D_k`` Sobol points of the disk, pivoted QR (data-free)
``collocation+maxvol`` the same with maxvol swaps
``collocation+omp``    collocation features, output-aware greedy selection
``collocation+omp/fwd`` the same in forward order, each layer re-fitted to the teacher
``data``               activations at the 20,000 training inputs, pivoted QR (Chee et al. 2022)
``data+omp/fwd``       training inputs, output-aware selection, forward re-fit
``weight_norm+lstsq``  keep the largest outgoing-weight norms, least squares on collocation
``random+lstsq``       keep random neurons, least squares on collocation
=====================  =========================================================================

Table 1 protocol (``benchmarks/teachers.py``): five seeds of a ``[2, 512, 512, 512, 1]`` sigmoid
MLP trained on ``q(x1, x2) = sin(2 x1) + 0.5 cos(3 x2) + 0.25 x1 x2`` over 20,000 Sobol points
of the unit disk; test MSE on 150,000 held-out Sobol points. Per seed, method and width it
records the test MSE over the teacher's test MSE, the sup fidelity ``sup |F - F~|`` on the disk
(``jc.sup_error``: 8192 uniform samples plus projected gradient ascent) and the first
task-preserving width (the smallest width with test MSE <= 1.05 x the teacher's). Fig 2: the
random ``[2, 1024, 1024, 1024, 1024, 2]`` sigmoid network on the unit disk, sup fidelity and RMS
fidelity on 20,000 test points per method and width.

Before anything is measured each method must compress a polynomial network of degree 4 exactly
at k = 4 (otherwise exit status 1). Teachers are trained once and cached as .npz
(``benchmarks/results/teachers/``); the compression runs in ``--dtype`` (float64 by default).
Results: ``<out>/compare_methods_<platform>[_float32][_quick].json`` and ``.png``.

Run (from the repository root)::

    python benchmarks/compare_methods.py            # full run (teachers cached: ~1 h on 2 cores)
    python benchmarks/compare_methods.py --resume   # continue an interrupted full run
    python benchmarks/compare_methods.py --quick --out /tmp/cm   # tiny, seconds: a smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import teachers as T  # noqa: E402

import jaxcompress as jc  # noqa: E402

ACTIVATION = "sigmoid"
RATIO_TARGET = 1.05
TARGET_FIRST_WIDTH = 21
TARGET_SUP_AT_66 = 1e-4
PAPER = {"first_width_per_seed": [66, 21, 36, 28, 21], "median_first_width": 28,
         "median_sup_at_66": 2.3e-3}
CHECK_ACT = "compare_methods_poly2"

METHODS = C.METHODS


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="tiny teachers (2 seeds), a width-32 random network, k = 0..2 (a smoke "
                        "test)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--teachers", choices=("full", "long", "short"), default="full",
                   help="teacher configuration (benchmarks/teachers.py): full (default; test MSE "
                        "~1e-5), long (harder, ~1e-6) or short (lightly trained, ~4e-4)")
    p.add_argument("--kmax", type=int, default=None, help="largest order (default 10)")
    p.add_argument("--oversample", type=int, default=4, help="collocation points per feature")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--sup-samples", type=int, default=None, help="default 8192 (quick: 512)")
    p.add_argument("--sup-steps", type=int, default=None, help="default 100 (quick: 10)")
    p.add_argument("--no-fig2", action="store_true", help="skip the random Fig 2 network")
    p.add_argument("--resume", action="store_true",
                   help="reuse the rows an interrupted run with the same settings saved in "
                        "<out>/<stem>.partial.json")
    p.add_argument("--out", type=Path, default=T.RESULTS, help="results folder")
    p.add_argument("--teachers-dir", type=Path, default=None,
                   help="teacher cache (default benchmarks/results/teachers; quick: "
                        "<out>/teachers)")
    args = p.parse_args(argv)
    quick = {"seeds": [0, 1], "kmax": 1, "sup_samples": 512, "sup_steps": 10}
    full = {"seeds": list(T.SEEDS), "kmax": 10, "sup_samples": 8192, "sup_steps": 100}
    for name, value in C.mode_config(args, full, quick, tuple(full)).items():
        setattr(args, name, value)
    if args.teachers_dir is None:
        args.teachers_dir = args.out / "teachers" if args.quick else T.DEFAULT_CACHE
    if not 0 <= args.kmax or args.oversample < 1:
        p.error("need --kmax >= 0 and --oversample >= 1")
    return args


def _compress(params, name, k, *, data, seed, oversample):
    method = C.make_method(jc, name, k, data=data, seed=seed, oversample=oversample)
    return jc.compress(params, method, activation=ACTIVATION, domain=jc.Ball(2, 1.0))


def check_methods(methods, dtype, tol) -> list[str]:
    """Every method must reproduce a degree-4 polynomial network exactly at k = 4."""
    import jax.numpy as jnp

    if CHECK_ACT not in jc.activations.registered_activations():
        jc.register_activation(CHECK_ACT, lambda u: u + 0.3 * u * u)
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 20, 20, 1], dtype=dtype)
    data = jc.Ball(2, 1.0).sobol(200, dtype=dtype)
    x = jc.Ball(2, 1.5).sample(jax.random.PRNGKey(1), 512, dtype)
    failures = []
    for name in methods:
        method = C.make_method(jc, name, 4, data=data, seed=-1000)
        small, _ = jc.compress(params, method, activation=CHECK_ACT, domain=jc.Ball(2, 1.0))
        ref = jc.apply(params, x, activation=CHECK_ACT)
        err = float(jnp.max(jnp.abs(jc.apply(small, x, activation=CHECK_ACT) - ref))
                    / jnp.max(jnp.abs(ref)))
        status = "ok" if err < tol else "FAILED"
        print(f"  {name:<20} widths {jc.layer_sizes(small)}  rel. error {err:.1e}  {status}",
              flush=True)
        if not err < tol:
            failures.append(f"{name}: rel. error {err:.2e} >= {tol:g}")
    return failures


#: compiled once per shape; a fresh ``jax.jit(lambda ...)`` per call would recompile every time
_apply = jax.jit(functools.partial(jc.apply, activation=ACTIVATION))


def _predict(params, x, chunk=50_000):
    import jax.numpy as jnp

    return jnp.concatenate([_apply(params, x[i:i + chunk]) for i in range(0, x.shape[0], chunk)])


def _first_width(widths, ratios):
    for w, r in zip(widths, ratios, strict=True):
        if r <= RATIO_TARGET:
            return w
    return None


def _median_width(ws):
    vals = [np.inf if w is None else w for w in ws]
    med = float(np.median(vals))
    return None if not np.isfinite(med) else med


def _fmt_w(w):
    return f">{WMAX}" if w is None else f"{w:g}"


WMAX = 66


def run_table1(args, dtype, methods, ks):
    import jax.numpy as jnp

    cfg = _teacher_cfg(args)
    print(f"\n## Table 1 teachers {list(cfg.sizes)} ({args.teachers}; cache {args.teachers_dir})",
          flush=True)
    loaded = T.load_or_train_teachers(args.seeds, args.teachers_dir, cfg=cfg,
                                      log=lambda s: print(s, flush=True))
    data = T.datasets(cfg, dtype=dtype)
    x_tr, _ = data["train"]
    x_te, y_te = data["test"]
    disk = jc.Ball(2, 1.0)
    key = jax.random.PRNGKey(1)
    teachers = []
    for seed, (params, record) in zip(args.seeds, loaded, strict=True):
        params = [{n: jnp.asarray(v, dtype) for n, v in layer.items()} for layer in params]
        mse = float(jnp.mean((_predict(params, x_te) - y_te) ** 2))
        teachers.append({"seed": seed, "test_mse": mse, "record": record, "params": params})
        print(f"  seed {seed}: teacher test MSE ({np.dtype(dtype).name}) {mse:.3e}", flush=True)
    widths = [jc.taylor.num_monomials(2, k) for k in ks]
    per = {}
    for name in methods:
        per[name] = {}
        for t in teachers:
            cache_key = f"table1/{name}/{t['seed']}"
            if cache_key in args.partial:
                row = per[name][str(t["seed"])] = args.partial[cache_key]
                print(f"  {name:<20} seed {t['seed']}: first width "
                      f"{_fmt_w(row['first_width']):>4} (resumed from {args.partial_path.name})",
                      flush=True)
                continue
            row = {"width": [], "test_mse": [], "ratio": [], "sup": [], "seconds": []}
            for k in ks:
                t0 = time.perf_counter()
                small, info = _compress(t["params"], name, k, data=x_tr, seed=t["seed"],
                                        oversample=args.oversample)
                small = jax.block_until_ready(small)
                secs = time.perf_counter() - t0
                mse = float(jnp.mean((_predict(small, x_te) - y_te) ** 2))
                sup = float(jc.sup_error(t["params"], small, activation=ACTIVATION, domain=disk,
                                         key=key, n_samples=args.sup_samples,
                                         local_search_steps=args.sup_steps))
                row["width"].append(info.layers[0].width_out)
                row["test_mse"].append(mse)
                row["ratio"].append(mse / t["test_mse"])
                row["sup"].append(sup)
                row["seconds"].append(secs)
            row["first_width"] = _first_width(row["width"], row["ratio"])
            per[name][str(t["seed"])] = row
            _save_partial(args, cache_key, row)
            print(f"  {name:<20} seed {t['seed']}: first width {_fmt_w(row['first_width']):>4}, "
                  f"MSE ratio at {row['width'][-1]} {row['ratio'][-1]:.4f}, sup at "
                  f"{row['width'][-1]} {row['sup'][-1]:.2e}  ({sum(row['seconds']):.0f} s)",
                  flush=True)
    summary = {}
    for name in methods:
        rows = [per[name][str(s)] for s in args.seeds]
        firsts = [r["first_width"] for r in rows]
        summary[name] = {
            "data_free": not METHODS[name][1],
            "first_width_per_seed": firsts,
            "median_first_width": _median_width(firsts),
            "median_ratio_per_width": [statistics.median(r["ratio"][i] for r in rows)
                                       for i in range(len(ks))],
            "median_sup_per_width": [statistics.median(r["sup"][i] for r in rows)
                                     for i in range(len(ks))],
            "median_seconds_per_width": [statistics.median(r["seconds"][i] for r in rows)
                                         for i in range(len(ks))],
        }
        summary[name]["median_sup_at_max_width"] = summary[name]["median_sup_per_width"][-1]
    teachers_out = [{"seed": t["seed"], "test_mse": t["test_mse"], "training": t["record"]}
                    for t in teachers]
    return {"widths": widths, "teachers": teachers_out, "per_seed": per, "summary": summary,
            "sizes": list(cfg.sizes)}


def _partial_settings(args) -> dict:
    """What a resumed row must share with this run."""
    return {"dtype": args.dtype, "kmax": args.kmax, "oversample": args.oversample,
            "sup_samples": args.sup_samples, "sup_steps": args.sup_steps,
            "teachers": "quick" if args.quick else args.teachers,
            "jaxcompress": jc.__version__}


def _load_partial(args) -> None:
    """Rows finished by an interrupted run with the same settings (``--resume``)."""
    args.partial = {}
    if args.resume and args.partial_path.exists():
        saved = json.loads(args.partial_path.read_text())
        if saved.get("settings") == _partial_settings(args):
            args.partial = saved["rows"]
            print(f"# resuming: {len(args.partial)} finished rows from {args.partial_path}")


def _save_partial(args, key: str, row: dict) -> None:
    args.partial[key] = row
    args.partial_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.partial_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"settings": _partial_settings(args), "rows": args.partial}))
    tmp.replace(args.partial_path)


def _teacher_cfg(args):
    return T.QUICK if args.quick else T.CONFIGS[args.teachers]


def run_fig2(args, dtype, methods, ks):
    import jax.numpy as jnp

    # quick: the quick teachers' shapes, so the compilations are shared
    sizes = [2, 32, 32, 32, 1] if args.quick else [2, 1024, 1024, 1024, 1024, 2]
    print(f"\n## Fig 2 random network {sizes} {ACTIVATION}, unit disk", flush=True)
    params = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=dtype)
    data = T.datasets(_teacher_cfg(args), dtype=dtype)
    x_tr = data["train"][0]
    x_te = data["test"][0][:20_000]
    ref = _predict(params, x_te)
    disk = jc.Ball(2, 1.0)
    key = jax.random.PRNGKey(1)
    out = {"sizes": sizes, "widths": [jc.taylor.num_monomials(2, k) for k in ks], "methods": {}}
    for name in methods:
        cache_key = f"fig2/{name}"
        if cache_key in args.partial:
            out["methods"][name] = args.partial[cache_key]
            print(f"  {name:<20} (resumed from {args.partial_path.name})", flush=True)
            continue
        row = {"sup": [], "rms": [], "seconds": []}
        for k in ks:
            t0 = time.perf_counter()
            small, _ = _compress(params, name, k, data=x_tr, seed=0, oversample=args.oversample)
            small = jax.block_until_ready(small)
            row["seconds"].append(time.perf_counter() - t0)
            row["rms"].append(float(jnp.sqrt(jnp.mean((_predict(small, x_te) - ref) ** 2))))
            row["sup"].append(float(jc.sup_error(params, small, activation=ACTIVATION,
                                                 domain=disk, key=key,
                                                 n_samples=args.sup_samples,
                                                 local_search_steps=args.sup_steps)))
        out["methods"][name] = row
        _save_partial(args, cache_key, row)
        print(f"  {name:<20} sup by width: "
              + " ".join(f"{s:.1e}" for s in row["sup"]), flush=True)
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t1 = result["table1"]
    fig2 = result.get("fig2")
    ncols = 3 if fig2 else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 4.4))
    widths = t1["widths"]
    markers = "os^vDP*Xh"
    colors = plt.get_cmap("tab20").colors  # one distinct colour for each of up to 20 methods
    for i, (name, s) in enumerate(t1["summary"].items()):
        style = dict(marker=markers[i % len(markers)], ms=4, lw=1.2, color=colors[i % 20],
                     ls="-" if s["data_free"] else "--")
        axes[0].semilogy(widths, s["median_ratio_per_width"], label=name, **style)
        axes[1].semilogy(widths, s["median_sup_per_width"], label=name, **style)
        if fig2:
            axes[2].semilogy(fig2["widths"], fig2["methods"][name]["sup"], label=name, **style)
    axes[0].axhline(RATIO_TARGET, color="k", ls=":", lw=1)
    axes[0].annotate("1.05 x teacher MSE", (widths[0], RATIO_TARGET), fontsize=7,
                     xytext=(2, 3), textcoords="offset points")
    axes[0].set_ylabel("test MSE / teacher test MSE (median over seeds)")
    axes[1].set_ylabel("sup |F - F~| on the disk (median over seeds)")
    tag = result.get("protocol", {}).get("teachers", "full")
    axes[0].set_title(f"Table 1 teachers {t1['sizes']} ({tag}): task error", fontsize=9)
    axes[1].set_title(f"Table 1 teachers ({tag}): sup fidelity", fontsize=9)
    if fig2:
        axes[2].set_ylabel("sup |F - F~| on the disk")
        axes[2].set_title(f"Fig 2 random network {fig2['sizes']}", fontsize=9)
    for ax in axes:
        ax.set_xlabel("hidden width D_k")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"compare_methods: {result['device']['device_kind']} "
                 f"({result['device']['platform']}), {result['dtype']}; dashed: uses data",
                 fontsize=10)
    C.save_figure(fig, path)


def print_tables(result: dict) -> dict:
    t1 = result["table1"]
    seeds = [t["seed"] for t in t1["teachers"]]
    print("\n## first task-preserving width (test MSE <= 1.05 x teacher), per seed")
    head = f"{'method':<20}" + "".join(f"{'s' + str(s):>6}" for s in seeds)
    w_last = t1["widths"][-1]
    head += f"{'median':>8}{'sup@' + str(w_last):>11}{'ratio@' + str(w_last):>11}"
    print(head)
    for name, s in t1["summary"].items():
        line = f"{name:<20}" + "".join(f"{_fmt_w(w):>6}" for w in s["first_width_per_seed"])
        line += (f"{_fmt_w(s['median_first_width']):>8}{s['median_sup_at_max_width']:>11.2e}"
                 f"{s['median_ratio_per_width'][-1]:>11.4f}")
        print(line)
    print(f"{'paper (derivative)':<20}" + "".join(
        f"{w:>6}" for w in PAPER["first_width_per_seed"][:len(seeds)])
          + f"{PAPER['median_first_width']:>8}{PAPER['median_sup_at_66']:>11.2e}")
    print("\n## median test MSE / teacher MSE by width")
    print(f"{'method':<20}" + "".join(f"{w:>9}" for w in t1["widths"]))
    for name, s in t1["summary"].items():
        print(f"{name:<20}" + "".join(f"{r:>9.3g}" for r in s["median_ratio_per_width"]))
    print("\n## median sup fidelity by width")
    print(f"{'method':<20}" + "".join(f"{w:>9}" for w in t1["widths"]))
    for name, s in t1["summary"].items():
        print(f"{name:<20}" + "".join(f"{r:>9.1e}" for r in s["median_sup_per_width"]))
    # targets: the best data-free method
    free = {n: s for n, s in t1["summary"].items() if s["data_free"]}
    targets = {}
    if free:
        def rank(item):
            _, s = item
            w = s["median_first_width"]
            return (np.inf if w is None else w, s["median_sup_at_max_width"])

        best, bs = min(free.items(), key=rank)
        w_ok = bs["median_first_width"] is not None and \
            bs["median_first_width"] <= TARGET_FIRST_WIDTH
        at66 = t1["widths"][-1] == 66
        sup_best = min(free.items(), key=lambda it: it[1]["median_sup_at_max_width"])
        targets = {
            "best_data_free_method": best,
            "median_first_width": bs["median_first_width"],
            "target_median_first_width": TARGET_FIRST_WIDTH,
            "first_width_met": bool(w_ok),
            "median_sup_at_66": bs["median_sup_at_max_width"] if at66 else None,
            "target_median_sup_at_66": TARGET_SUP_AT_66,
            "sup_met": bool(at66 and bs["median_sup_at_max_width"] <= TARGET_SUP_AT_66),
            "best_sup_data_free_method": sup_best[0],
            "best_sup_at_66": sup_best[1]["median_sup_at_max_width"] if at66 else None,
        }
        print(f"\n## targets (best data-free method: {best})")
        print(f"median first task-preserving width {_fmt_w(bs['median_first_width'])} "
              f"(target <= {TARGET_FIRST_WIDTH}; paper {PAPER['median_first_width']}): "
              + ("MET" if w_ok else "MISSED"))
        if at66:
            print(f"median sup fidelity at width 66 {bs['median_sup_at_max_width']:.2e} "
                  f"(target <= {TARGET_SUP_AT_66:g}; paper {PAPER['median_sup_at_66']:g}): "
                  + ("MET" if targets["sup_met"] else "MISSED"))
        else:
            print("median sup fidelity at width 66: not measured (kmax < 10)")
    fig2 = result.get("fig2")
    if fig2:
        print(f"\n## Fig 2 random network {fig2['sizes']}: sup fidelity by width")
        print(f"{'method':<20}" + "".join(f"{w:>9}" for w in fig2["widths"]))
        for name, row in fig2["methods"].items():
            print(f"{name:<20}" + "".join(f"{r:>9.1e}" for r in row["sup"]))
    return targets


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jaxlib

    global WMAX
    dtype = jnp.dtype(args.dtype)
    ks = list(range(args.kmax + 1))
    WMAX = jc.taylor.num_monomials(2, args.kmax)
    dev = jax.devices()[0]
    device = {"device": str(dev), "platform": dev.platform,
              "device_kind": getattr(dev, "device_kind", str(dev)),
              "host_cpus": os.cpu_count(), "host_cpu": C.cpu_model()}
    print(f"# device: {device['device']}, platform {device['platform']}, device_kind "
          f"{device['device_kind']} (host: {device['host_cpus']} x {device['host_cpu']})")
    print(f"# jax {jax.__version__}, jaxlib {jaxlib.__version__}, jaxcompress {jc.__version__}, "
          f"dtype {args.dtype}, matmul precision HIGHEST (library Precision.HIGHEST + "
          "jax.default_matmul_precision('highest'))")
    print(f"# methods {args.methods}; k = 0..{args.kmax}; seeds {args.seeds}; oversample "
          f"{args.oversample}; sup_error {args.sup_samples} samples + {args.sup_steps} ascent "
          "steps", flush=True)
    stem = f"compare_methods_{device['platform']}"
    stem += "" if args.dtype == "float64" else f"_{args.dtype}"
    stem += f"_{args.teachers}" if args.teachers != "full" and not args.quick else ""
    stem += "_quick" if args.quick else ""
    args.partial_path = args.out / f"{stem}.partial.json"
    _load_partial(args)
    t_start = time.perf_counter()
    with jax.default_matmul_precision("highest"):
        print("\n## correctness check: a degree-4 polynomial network at k = 4 must be exact")
        tol = 1e-8 if args.dtype == "float64" else 1e-3
        failures = check_methods(args.methods, dtype, tol)
        if failures:
            print("## correctness check FAILED: " + "; ".join(failures), flush=True)
            return 1
        table1 = run_table1(args, dtype, args.methods, ks)
        fig2 = None if args.no_fig2 else run_fig2(args, dtype, args.methods, ks)
    result = {
        "benchmark": "compare_methods",
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "device": device, "jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
        "jaxcompress_version": jc.__version__, "dtype": args.dtype, "precision": "HIGHEST",
        "quick": args.quick, "orders": ks, "oversample": args.oversample,
        "sup_error": {"n_samples": args.sup_samples, "local_search_steps": args.sup_steps},
        "methods": {n: {"method": C.make_method(jc, n, 1, data=np.zeros((1, 2)), seed=0)
                        .describe(), "uses_data": METHODS[n][1]}
                    for n in args.methods},
        "protocol": {"ratio_target": RATIO_TARGET, "seeds": args.seeds,
                     "teachers": "quick" if args.quick else args.teachers,
                     "teacher_config": dataclasses.asdict(_teacher_cfg(args))},
        "paper": PAPER,
        "table1": table1,
        "fig2": fig2,
    }
    result["targets"] = print_tables(result)
    result["wall_seconds"] = time.perf_counter() - t_start
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / f"{stem}.json", args.out / f"{stem}.png"
    json_path.write_text(json.dumps(result, indent=2, default=float) + "\n")
    plot(result, png_path)
    args.partial_path.unlink(missing_ok=True)
    print(f"\n# wrote {json_path} and {png_path} ({result['wall_seconds']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
