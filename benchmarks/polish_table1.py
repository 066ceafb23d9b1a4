"""Data-free polishing on the Table 1 teachers: collocation + ``jc.polish`` vs collocation alone.

Beyond the paper (which does not fine-tune). The five Table 1 teachers (``benchmarks/teachers.py``:
``[2, 512, 512, 512, 1]`` sigmoid MLPs trained on ``q(x1, x2) = sin(2 x1) + 0.5 cos(3 x2) +
0.25 x1 x2`` over the unit disk; test MSE on 150,000 held-out Sobol points) are compressed with
the best data-free method (``jc.collocation(k)``: Sobol nodes, OMP, forward order) to the
widths ``D_k = C(2 + k, 2)``, and each student is then polished by ``jc.polish`` (default
optimizer: L-BFGS, memory 100, on 4096 fixed Sobol points of the disk; ``--steps`` steps). For
every seed and width: the test MSE over the teacher's, the sup fidelity ``sup |F - F~|`` on the
disk (``jc.sup_error``), and the wall time of compression and of polishing (each includes the
compilation on its first call for a shape: the first seed). The first task-preserving width is
the smallest width whose test MSE is <= 1.05 x the teacher's (the paper's criterion).

An optimizer comparison at one width (default 15) measures the choice of ``jc.polish``'s
default: L-BFGS with memory 100 (the default) and 10 (optax's default), Adam with a cosine decay
on the same fixed points, and Adam on minibatches of 1024 resampled every step from a pool of
65,536 Sobol points.

Before anything is measured, polish must recover a small network from a perturbed copy of
itself (error estimate down 100x) and never return a student worse on its points than the start;
otherwise exit status 1. Float64 by default.

Run (from the repository root)::

    python benchmarks/polish_table1.py                     # full run (~12 min on 2 cores)
    python benchmarks/polish_table1.py --quick --out /tmp/p   # tiny teachers, a smoke test
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import teachers as T  # noqa: E402

import jaxcompress as jc  # noqa: E402

NAME = "polish_table1"
ACTIVATION = "sigmoid"
RATIO_TARGET = 1.05
TARGET_MEDIAN_WIDTH = 15
FULL = {"seeds": [0, 1, 2, 3, 4], "orders": [1, 2, 3, 4, 5, 6], "steps": 1000,
        "compare_order": 4, "compare_steps": {"lbfgs": 1000, "adam": 3000},
        "sup_samples": 8192, "sup_steps": 100}
#: quick: one width and two optimizers, shapes shared with the check (compilations dominate)
QUICK = {"seeds": [0, 1], "orders": [2], "steps": 40,
         "compare_order": 2, "compare_steps": {"lbfgs": 40, "adam": 40},
         "compare": ["lbfgs m100, 4096 fixed (default)", "adam cosine 1e-3, batch 1024 of 65536"],
         "sup_samples": 512, "sup_steps": 10}
PAPER = {
    "figure": "Table 1 (beyond it: the paper's students are not fine-tuned)",
    "reports": "median first task-preserving width 28 for derivative matching; per seed 66, 21, "
               "36, 28, 21",
    "first_width_per_seed": [66, 21, 36, 28, 21],
    "target_issue14": f"collocation + polish: median first width <= {TARGET_MEDIAN_WIDTH} "
                      "(28 without polish, benchmarks/README.md)",
    "source": "DESIGN.md section 2; issue 14",
}


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--steps", type=int, default=None,
                   help=f"polish steps (default {FULL['steps']}; quick {QUICK['steps']})")
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--orders", type=int, nargs="+", default=None,
                   help=f"Taylor orders k: widths D_k (default {FULL['orders']})")
    p.add_argument("--no-compare", action="store_true", help="skip the optimizer comparison")
    p.add_argument("--teachers-dir", type=Path, default=None,
                   help="teacher cache (default benchmarks/results/teachers; quick: "
                        "<out>/teachers)")
    args = p.parse_args(argv)
    cfg = C.mode_config(args, FULL, QUICK, ("steps", "seeds", "orders"))
    if cfg["steps"] < 1 or min(cfg["orders"]) < 0:
        p.error("need --steps >= 1 and orders >= 0")
    return args, cfg


def optimizers(cfg):
    """name -> (polish keyword arguments) of the comparison."""
    import optax

    lb, ad = cfg["compare_steps"]["lbfgs"], cfg["compare_steps"]["adam"]
    cosine = optax.adam(optax.cosine_decay_schedule(1e-3, ad, alpha=1e-3))
    configs = {
        "lbfgs m100, 4096 fixed (default)": {"steps": lb},
        "lbfgs m10, 4096 fixed": {"steps": lb, "optimizer": optax.lbfgs(memory_size=10)},
        # the zoom line search is ~0.6 s of the polishing loop's 0.85 s compile; backtracking
        # (Armijo only) compiles in ~0.36 s, but polishes worse (benchmarks/README.md)
        "lbfgs m100 backtracking, 4096 fixed": {"steps": lb, "optimizer": optax.lbfgs(
            memory_size=100, linesearch=optax.scale_by_backtracking_linesearch(
                max_backtracking_steps=15, store_grad=True))},
        "adam cosine 1e-3, 4096 fixed": {"steps": ad, "optimizer": cosine},
        "adam cosine 1e-3, batch 1024 of 65536": {"steps": ad, "optimizer": cosine,
                                                  "points": 65536, "batch": 1024},
    }
    return {name: configs[name] for name in cfg.get("compare", configs)}


def check_polish(jc, jax, dtype, sizes, steps) -> list[str]:
    """Polish must recover a network from a perturbed copy, and never return a worse one."""
    disk = jc.Ball(2, 1.0)
    teacher = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=dtype)
    noise = jc.init_mlp(jax.random.PRNGKey(1), sizes, dtype=dtype)
    start = jax.tree_util.tree_map(lambda a, b: a + 0.02 * b, teacher, noise)
    failures = []
    _, hist = jc.polish(start, teacher, activation=ACTIVATION, domain=disk, steps=steps)
    ratio = float(hist.error_after / hist.error_before)
    status = "ok" if ratio < 1e-2 else "FAILED"
    print(f"  perturbed copy: error estimate {float(hist.error_before):.2e} -> "
          f"{float(hist.error_after):.2e}  {status}", flush=True)
    if status != "ok":
        failures.append(f"perturbed copy not recovered (error ratio {ratio:.2e})")
    losses = [float(v) for v in hist.chunk_loss]
    if not losses[-1] <= losses[0]:
        failures.append(f"polish returned a worse student ({losses[0]:.2e} -> {losses[-1]:.2e})")
    return failures


def first_width(widths, ratios):
    return next((w for w, r in zip(widths, ratios, strict=True) if r <= RATIO_TARGET), None)


def median_width(ws):
    import math

    med = statistics.median([math.inf if w is None else w for w in ws])
    return None if med == math.inf else med


def fmt_w(w, wmax):
    return f">{wmax}" if w is None else f"{w:g}"


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = result["widths"]
    rows = result["rows"]
    seeds = result["config"]["seeds"]
    fig, (ax_r, ax_s, ax_t) = plt.subplots(1, 3, figsize=(15, 4.6))
    for key, color, label in (("plain", "C0", "collocation+omp/fwd"),
                              ("polished", "C3", "collocation+omp/fwd + jc.polish")):
        for seed in seeds:
            sel = [r for r in rows if r["seed"] == seed]
            ax_r.semilogy(widths, [r[key]["ratio"] for r in sel], "-", color=color, alpha=0.25,
                          lw=1)
            ax_s.semilogy(widths, [r[key]["sup"] for r in sel], "-", color=color, alpha=0.25,
                          lw=1)
        med = result["summary"][key]
        ax_r.semilogy(widths, med["median_ratio_per_width"], "o-", color=color,
                      label=f"{label} (median first width "
                            f"{fmt_w(med['median_first_width'], widths[-1])})")
        ax_s.semilogy(widths, med["median_sup_per_width"], "o-", color=color, label=label)
    ax_r.axhline(RATIO_TARGET, color="k", ls="--", lw=1, label="1.05 x teacher")
    ax_r.set_ylabel("test MSE / teacher test MSE")
    ax_s.set_ylabel("sup |F - F~| on the disk")
    for ax in (ax_r, ax_s):
        ax.set_xlabel("hidden width (all three layers)")
        ax.set_xticks(widths)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_r.set_title("task preservation (thin: seeds, thick: median)", fontsize=10)
    ax_s.set_title("fidelity to the teacher", fontsize=10)
    timing = result["summary"]["timing"]
    ax_t.semilogy(widths, timing["median_compress_s"], "o-", color="C0",
                  label="jc.compress (median over seeds)")
    ax_t.semilogy(widths, timing["median_polish_s"], "o-", color="C3",
                  label=f"jc.polish, {result['config']['steps']} steps (median)")
    ax_t.semilogy(widths, timing["first_polish_s"], "s:", color="C3", alpha=0.6,
                  label="jc.polish, first seed (with compilation)")
    ax_t.set_xlabel("hidden width")
    ax_t.set_ylabel("wall time [s]")
    ax_t.set_xticks(widths)
    ax_t.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=8)
    ax_t.set_title("cost", fontsize=10)
    env = result["env"]
    fig.suptitle(f"Table 1 teachers {result['sizes']}: data-free polishing, {result['dtype']}, "
                 f"{C.device_label(env)}; load avg {env['load_avg_1_5_15']['start']}",
                 fontsize=9)
    C.save_figure(fig, path)


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun  # --replot
    start, args, cfg, env = begun
    teacher_cfg = T.QUICK if args.quick else T.FULL
    teachers_dir = args.teachers_dir or (args.out / "teachers" if args.quick
                                         else T.DEFAULT_CACHE)
    widths = [jc.taylor.num_monomials(2, k) for k in cfg["orders"]]
    C.print_header(env, args.dtype, [
        f"teachers {list(teacher_cfg.sizes)} seeds {cfg['seeds']} ({teachers_dir}); widths "
        f"{widths}; polish: {cfg['steps']} steps of jc.polish's default (L-BFGS, memory 100, "
        "4096 fixed Sobol points of the disk)",
        f"sup_error: {cfg['sup_samples']} samples + {cfg['sup_steps']} ascent steps"])
    dtype = jnp.dtype(args.dtype)
    disk = jc.Ball(2, 1.0)
    key = jax.random.PRNGKey(1)
    apply = jax.jit(functools.partial(jc.apply, activation=ACTIVATION))

    def test_mse(params, x, y, chunk=50_000):
        total = sum(float(jnp.sum((apply(params, x[i:i + chunk]) - y[i:i + chunk]) ** 2))
                    for i in range(0, x.shape[0], chunk))
        return total / y.size

    def sup(teacher, student):
        return C.sup_error(jc, teacher, student, activation=ACTIVATION, domain=disk, key=key,
                           n_samples=cfg["sup_samples"], local_search_steps=cfg["sup_steps"])[0]

    with jax.default_matmul_precision(C.PRECISION):
        print("\n## check: polish recovers a perturbed copy and never returns a worse student")
        # the shapes and steps of the first student, so the compilation is shared
        w0 = jc.taylor.num_monomials(2, cfg["orders"][0])
        sizes = [2] + [w0] * (len(teacher_cfg.sizes) - 2) + [1]
        failures = check_polish(jc, jax, dtype, sizes, cfg["steps"])
        if failures:
            print("## check FAILED: " + "; ".join(failures), flush=True)
            return 1
        loaded = T.load_or_train_teachers(cfg["seeds"], teachers_dir, cfg=teacher_cfg,
                                          log=lambda s: print(s, flush=True))
        x_te, y_te = T.datasets(teacher_cfg, dtype=dtype)["test"]
        teachers = []
        for seed, (params, record) in zip(cfg["seeds"], loaded, strict=True):
            params = [{n: jnp.asarray(v, dtype) for n, v in layer.items()} for layer in params]
            teachers.append({"seed": seed, "params": params, "record": record,
                             "test_mse": test_mse(params, x_te, y_te)})
            print(f"  seed {seed}: teacher test MSE ({args.dtype}) "
                  f"{teachers[-1]['test_mse']:.3e}", flush=True)

        n_compare = 0 if args.no_compare else len(cfg["seeds"]) * len(optimizers(cfg))
        progress = C.Progress(len(cfg["seeds"]) * len(widths) + n_compare)
        rows = []
        students = {}
        print(f"\n## collocation+omp/fwd, then jc.polish ({cfg['steps']} steps)")
        for t in teachers:
            for k, w in zip(cfg["orders"], widths, strict=True):
                t0 = time.perf_counter()
                small, info = jc.compress(t["params"], jc.collocation(k),
                                          activation=ACTIVATION, domain=disk)
                small = jax.block_until_ready(small)
                compress_s = time.perf_counter() - t0
                students[(t["seed"], k)] = small
                polished, hist = jc.polish(small, t["params"], activation=ACTIVATION,
                                           domain=disk, info=info, steps=cfg["steps"])
                assert jc.layer_sizes(polished) == jc.layer_sizes(small)
                plain = {"ratio": test_mse(small, x_te, y_te) / t["test_mse"],
                         "sup": sup(t["params"], small), "seconds": compress_s,
                         "error_estimate": float(hist.error_before)}
                pol = {"ratio": test_mse(polished, x_te, y_te) / t["test_mse"],
                       "sup": sup(t["params"], polished), "seconds": hist.seconds,
                       "error_estimate": float(hist.error_after), "history": hist.to_dict()}
                rows.append({"seed": t["seed"], "k": k, "width": w,
                             "sizes": jc.layer_sizes(small), "num_params": jc.num_params(small),
                             "plain": plain, "polished": pol})
                progress(f"seed {t['seed']} width {w:>3}: MSE ratio {plain['ratio']:9.3f} -> "
                         f"{pol['ratio']:7.3f}, sup {plain['sup']:.2e} -> {pol['sup']:.2e}; "
                         f"compress {compress_s:5.1f} s, polish {hist.seconds:5.1f} s")

        compare = None
        if not args.no_compare:
            k = cfg["compare_order"]
            w = jc.taylor.num_monomials(2, k)
            print(f"\n## optimizer comparison at width {w}")
            compare = {"width": w, "configs": {}}
            for name, kwargs in optimizers(cfg).items():
                res = {"ratio": [], "loss": [], "seconds": [], "steps": kwargs["steps"]}
                for t in teachers:
                    small = students.get((t["seed"], k))
                    if small is None:
                        small, _ = jc.compress(t["params"], jc.collocation(k),
                                               activation=ACTIVATION, domain=disk)
                    p, h = jc.polish(small, t["params"], activation=ACTIVATION, domain=disk,
                                     **kwargs)
                    res["ratio"].append(test_mse(p, x_te, y_te) / t["test_mse"])
                    res["loss"].append(float(h.chunk_loss[-1]))
                    res["seconds"].append(h.seconds)
                    progress(f"{name:<40} seed {t['seed']}: MSE ratio {res['ratio'][-1]:.3f}, "
                             f"loss {res['loss'][-1]:.2e}, {h.seconds:.1f} s")
                res["median_ratio"] = statistics.median(res["ratio"])
                res["passing_seeds"] = sum(r <= RATIO_TARGET for r in res["ratio"])
                compare["configs"][name] = res

    summary = {}
    for key in ("plain", "polished"):
        firsts = []
        for seed in cfg["seeds"]:
            sel = [r for r in rows if r["seed"] == seed]
            firsts.append(first_width(widths, [r[key]["ratio"] for r in sel]))
        summary[key] = {
            "first_width_per_seed": firsts,
            "median_first_width": median_width(firsts),
            "median_ratio_per_width": [statistics.median(r[key]["ratio"] for r in rows
                                                         if r["width"] == w) for w in widths],
            "median_sup_per_width": [statistics.median(r[key]["sup"] for r in rows
                                                       if r["width"] == w) for w in widths],
        }
    first_seed = cfg["seeds"][0]
    summary["timing"] = {
        "median_compress_s": [statistics.median(r["plain"]["seconds"] for r in rows
                                                if r["width"] == w) for w in widths],
        "median_polish_s": [statistics.median(r["polished"]["seconds"] for r in rows
                                              if r["width"] == w) for w in widths],
        "first_polish_s": [next(r["polished"]["seconds"] for r in rows
                                if r["width"] == w and r["seed"] == first_seed) for w in widths],
    }
    med = summary["polished"]["median_first_width"]
    targets = {"median_first_width_polished": med, "target": TARGET_MEDIAN_WIDTH,
               "met": med is not None and med <= TARGET_MEDIAN_WIDTH}
    C.finish(env, start)
    result = {
        "benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
        "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
        "config": {**cfg, "activation": ACTIVATION, "ratio_target": RATIO_TARGET,
                   "compress": "jc.collocation(k) (Sobol nodes, OMP, forward) on Ball(2, 1.0)",
                   "polish": "jc.polish defaults (L-BFGS memory 100, 4096 fixed Sobol points)",
                   "teachers": {"dir": teachers_dir, "sizes": list(teacher_cfg.sizes)}},
        "sizes": list(teacher_cfg.sizes), "widths": widths,
        "teachers": [{"seed": t["seed"], "test_mse": t["test_mse"]} for t in teachers],
        "checks": {"passed": True}, "rows": rows, "summary": summary,
        "optimizer_comparison": compare, "targets": targets,
    }
    paths = C.save_results(args, env, NAME, result, plot)
    wmax = widths[-1]
    print("\n## first task-preserving width (test MSE <= 1.05 x teacher)")
    for key in ("plain", "polished"):
        s = summary[key]
        print(f"{key:<9} per seed {[fmt_w(w, wmax) for w in s['first_width_per_seed']]}, "
              f"median {fmt_w(s['median_first_width'], wmax)}")
    print(f"target: median <= {TARGET_MEDIAN_WIDTH} with polish: "
          f"{'met' if targets['met'] else 'MISSED'}"
          + (" (quick: tiny teachers, not the target's)" if args.quick else ""))
    print("width  " + "  ".join(f"{w:>7}" for w in widths))
    for name, vals in summary["timing"].items():
        print(f"{name:<18}" + "  ".join(f"{v:7.2f}" for v in vals))
    if compare:
        print(f"\n## optimizers at width {compare['width']}: median MSE ratio, seeds passing")
        for name, res in compare["configs"].items():
            print(f"{name:<40} {res['steps']:>5} steps  median {res['median_ratio']:.3f}  "
                  f"passing {res['passing_seeds']}/{len(cfg['seeds'])}  median "
                  f"{statistics.median(res['seconds']):.1f} s")
    C.print_written(paths, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
