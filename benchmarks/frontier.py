"""How small can it get? The search for the smallest network that keeps the task (issue 31).

Beyond the paper (ours). ``jc.compress_to_tolerance(net, jc.Measured(metric=task, polish=True),
domain=..., eps=...)`` compresses a traced network at orders ``k = 0, 1, ...`` (collocation,
each polished towards the teacher) until one meets the task budget, then removes neurons one
at a time per layer while it still does (``jaxcompress/search/``). Measured here:

**Table 1** (float64): the five teachers of ``benchmarks/teachers.py`` (``[2, 512, 512, 512, 1]``
sigmoid MLPs trained on ``q(x1, x2) = sin(2 x1) + 0.5 cos(3 x2) + 0.25 x1 x2`` over the unit
disk), traced with ``jc.trace``; the metric is the MSE against ``q`` on the 5,000 validation
points, the budget the paper's criterion ``1.05 x`` the teacher's. The result is then judged on
the 150,000 held-out test points (its test MSE over the teacher's). Beside it: the first
uniform order of the same search that met the budget (what orders alone give), the same search
started from derivative matching (``method=jc.derivative_matching``: why collocation is the
default with polishing), and a network of the found widths trained from scratch with the
teachers' protocol (Adam, 15,000 minibatch steps, best validation checkpoint).

**Zoo** (float32 networks, polished in float64): four models of ``benchmarks/zoo.py``, trained
as it trains them (same specification; ``--cache`` keeps them): ``pinn_tanh`` (a PINN),
``linen_compact`` (an SDF), ``fourier_tanh`` (a Fourier-feature image field) and
``modified_mlp`` (tied gates), each searched with its task's own metric and the zoo's
tolerance (PINN: relative L2 error <= 1.1x the teacher's; SDF: the larger of the surface and
off-surface errors over the teacher's <= 1.1; image: pixel MSE within 0.5 dB of the teacher's
PSNR). Compared with the zoo's hand-written sweep (its committed results: the smallest of its
polished candidates within the same tolerance, and the seconds its compressions and polishes
took) and with a network of the found widths trained from scratch with the teacher's budget.

Before anything is timed, the search must meet its budget on a small network and return the
user's pytree (exit status 1 otherwise). Output: ``<out>/frontier_<platform>_float64.{json,png}``.

Run (from the repository root)::

    python benchmarks/frontier.py                       # full run (about an hour on 2 cores)
    python benchmarks/frontier.py --quick --out /tmp/f  # tiny teachers and one small zoo model
    python benchmarks/frontier.py --parts table1        # only the Table 1 teachers
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import teachers as T  # noqa: E402
import zoo  # noqa: E402
import zoo_models as Z  # noqa: E402

import jaxcompress as jc  # noqa: E402

NAME = "frontier"
ACTIVATION = "sigmoid"
RATIO = 1.05
ZOO_TOLERANCE = 1.1        # the zoo's: 1.1x the teacher's error (SDF: each part)
PSNR_MARGIN = 0.5          # the zoo's: within 0.5 dB of the teacher's PSNR
FULL = {"seeds": [0, 1, 2, 3, 4], "derivative": True, "scratch": True,
        "zoo": ["pinn_tanh", "linen_compact", "fourier_tanh", "modified_mlp"],
        "table1_polish": {}, "zoo_polish": {"dtype": "float64"}, "size": "bench"}
QUICK = {"seeds": [0], "derivative": False, "scratch": True, "zoo": ["pinn_tanh"],
         "table1_polish": {"steps": 40, "shrink_steps": 40, "points": 512},
         "zoo_polish": {"steps": 40, "shrink_steps": 40, "points": 512, "dtype": "float64"},
         "size": "small", "zoo_hidden": [8, 8]}
PAPER = {"figure": "Table 1 (beyond it: the paper compresses to D_k and does not fine-tune)",
         "reports": "median first task-preserving width 28 for derivative matching (1,737 "
                    "parameters); per seed 66, 21, 36, 28, 21",
         "source": "DESIGN.md section 2; issue 31",
         "issue_31_target": "median parameter count below 109 (collocation + polish at the "
                            "best uniform width, by hand), aim about 60, five searches in well "
                            "under 15 minutes"}
#: The zoo's committed results the search is compared with.
ZOO_RESULTS = ("zoo_cpu_float32.json", "zoo_cpu_float32_tied.json",
               "zoo_cpu_float32_sdf_igr-fourier_tanh-fourier_relu_polish_float64_2000.json")


def table1_fn(params, x):
    """The Table 1 teacher as the user writes it (traced with ``jc.trace``)."""
    return jc.apply(params, x, activation=ACTIVATION)


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--parts", default="table1,zoo",
                   help="comma list of table1 and zoo (default both)")
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--zoo-models", default=None, help="comma list of zoo models")
    p.add_argument("--teachers-dir", type=Path, default=None,
                   help="Table 1 teacher cache (default benchmarks/results/teachers; quick: "
                        "<out>/teachers)")
    p.add_argument("--cache", type=Path, default=None,
                   help="zoo teachers and from-scratch networks (see benchmarks/zoo.py)")
    args = p.parse_args(argv)
    if args.dtype != "float64":
        p.error("--dtype: the Table 1 search runs in float64 (the zoo's networks stay float32)")
    cfg = C.mode_config(args, FULL, QUICK, ("seeds",))
    if args.zoo_models:
        cfg["zoo"] = [m.strip() for m in args.zoo_models.split(",") if m.strip()]
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    bad = [s for s in args.parts if s not in ("table1", "zoo")] + [
        m for m in cfg["zoo"] if m not in Z.MODELS + Z.TIED_MODELS]
    if bad:
        p.error(f"unknown parts or zoo models: {bad}")
    return args, cfg


def settings(cfg_polish: dict) -> jc.PolishSettings:
    return jc.PolishSettings(**{k: (jnp.dtype(v) if k == "dtype" else v)
                                for k, v in cfg_polish.items()})


# ------------------------------------------------------------------------------------------------
# The check: the search meets its budget on a small network and returns the user's pytree
# ------------------------------------------------------------------------------------------------


def check(log) -> list[str]:
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1])
    net = jc.trace(table1_fn, params, jnp.zeros((4, 2)))
    disk = jc.Ball(2, 1.0)
    res = jc.compress_to_tolerance(net, jc.Measured(metric="rel_l2", polish=jc.PolishSettings(
        steps=40, shrink_steps=40, points=512)), domain=disk, eps=1e-3)
    failures = []
    got = float(jc.sup_error(net, res.compressed, domain=disk, key=jax.random.PRNGKey(3),
                             n_samples=1024))
    x = disk.sobol(4096, skip=1 << 24)
    rel = float(jnp.linalg.norm(res.compressed(x) - table1_fn(params, x))
                / jnp.linalg.norm(table1_fn(params, x)))
    if not rel <= 1e-3 * (1 + 1e-9):
        failures.append(f"relative L2 {rel:.3e} over the budget 1e-3")
    if jax.tree_util.tree_structure(res.params) != jax.tree_util.tree_structure(params):
        failures.append("the result is not the user's pytree")
    log(f"  a random [2, 24, 24, 1] sigmoid network, rel_l2 <= 1e-3: widths {list(res.widths)}, "
        f"rel L2 {rel:.2e}, sup {got:.2e}: {'ok' if not failures else 'FAILED'}")
    return failures


# ------------------------------------------------------------------------------------------------
# Table 1
# ------------------------------------------------------------------------------------------------


def _mse(f, x, y, chunk=50_000) -> float:
    total = sum(float(jnp.sum((f(x[i:i + chunk]) - y[i:i + chunk]) ** 2))
                for i in range(0, x.shape[0], chunk))
    return total / y.size


def _search_record(res, teacher_val, teacher_test, x_te, y_te, seconds) -> dict:
    small = res.compressed
    order_rows = [r for r in res.frontier.rows if r.stage == "order"]
    uniform = order_rows[-1]
    return {"widths": list(res.widths), "num_params": jc.num_params(small),
            "val_ratio": res.metric_value / teacher_val,
            "test_ratio": _mse(small, x_te, y_te) / teacher_test,
            "sup": res.measured_error, "seconds": seconds,
            "candidates": len(res.frontier.rows),
            "uniform": {"order": uniform.order, "widths": list(uniform.widths),
                        "num_params": uniform.num_params,
                        "val_ratio": uniform.error / teacher_val,
                        "test_ratio": _mse(uniform.network, x_te, y_te) / teacher_test},
            "frontier": res.frontier.to_dict()}


def run_table1(args, cfg, log, checkpoint=lambda part: None) -> dict:
    teacher_cfg = T.QUICK if args.quick else T.FULL
    tdir = args.teachers_dir or (args.out / "teachers" if args.quick else T.DEFAULT_CACHE)
    loaded = T.load_or_train_teachers(cfg["seeds"], tdir, cfg=teacher_cfg, log=log)
    data = T.datasets(teacher_cfg, dtype=jnp.float64)
    data32 = T.datasets(teacher_cfg)          # what the teachers were trained on
    (x_tr, _), (x_val, y_val), (x_te, y_te) = data["train"], data["val"], data["test"]
    disk = jc.Ball(2, 1.0)
    polish = settings(cfg["table1_polish"])
    out = []
    for seed, (params32, _) in zip(cfg["seeds"], loaded, strict=True):
        params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params32)
        net = jc.trace(table1_fn, params, x_tr[:4])
        teacher = functools.partial(table1_fn, params)
        t_val, t_test = _mse(teacher, x_val, y_val), _mse(teacher, x_te, y_te)

        def task_mse(f):
            return _mse(f, x_val, y_val)

        rec = {"seed": seed, "teacher_val_mse": t_val, "teacher_test_mse": t_test}
        variants = {"collocation": None}
        if cfg["derivative"]:
            variants["derivative"] = jc.derivative_matching
        for label, method in variants.items():
            log(f"\n## seed {seed}, search from {label} (eps = {RATIO} x val MSE {t_val:.3e})")
            t0 = time.perf_counter()
            res = jc.compress_to_tolerance(
                net, jc.Measured(metric=task_mse, polish=polish, method=method), domain=disk,
                eps=RATIO * t_val, progress=lambda line: log(f"  {line}"))
            rec[label] = _search_record(res, t_val, t_test, x_te, y_te,
                                        time.perf_counter() - t0)
            r = rec[label]
            log(f"  seed {seed} {label}: widths {r['widths']}, {r['num_params']} params, val "
                f"{r['val_ratio']:.3f}, test {r['test_ratio']:.3f} x teacher, "
                f"{r['seconds']:.0f} s ({r['candidates']} candidates); uniform k = "
                f"{r['uniform']['order']}: {r['uniform']['num_params']} params")
        if cfg["scratch"]:
            widths = tuple(rec["collocation"]["widths"])
            scfg = dataclasses.replace(teacher_cfg, sizes=(2, *widths, 1))
            t0 = time.perf_counter()
            sp, _ = T.train_teacher(seed, scfg, data=data32, log=lambda _: None)
            sp = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), sp)
            ratio = _mse(functools.partial(table1_fn, sp), x_te, y_te) / t_test
            rec["scratch"] = {"widths": list(widths), "test_ratio": ratio,
                              "seconds": time.perf_counter() - t0,
                              "steps": scfg.steps}
            log(f"  seed {seed} from scratch at widths {list(widths)}: test {ratio:.3f} x "
                f"teacher ({rec['scratch']['seconds']:.0f} s)")
        out.append(rec)
        checkpoint({"seeds": out})
    summary = {}
    for label in ("collocation", "derivative"):
        if label not in out[0]:
            continue
        summary[label] = {
            "num_params": [r[label]["num_params"] for r in out],
            "median_num_params": statistics.median(r[label]["num_params"] for r in out),
            "uniform_num_params": [r[label]["uniform"]["num_params"] for r in out],
            "median_uniform_num_params": statistics.median(r[label]["uniform"]["num_params"]
                                                           for r in out),
            "test_ratio": [r[label]["test_ratio"] for r in out],
            "all_keep_task": all(r[label]["test_ratio"] <= RATIO for r in out),
            "seconds": [r[label]["seconds"] for r in out],
            "total_seconds": sum(r[label]["seconds"] for r in out)}
    if cfg["scratch"]:
        summary["scratch_test_ratio"] = [r["scratch"]["test_ratio"] for r in out]
    return {"teachers": {"dir": tdir, "sizes": list(teacher_cfg.sizes)},
            "polish": dataclasses.asdict(polish) | {"dtype": str(polish.dtype)},
            "seeds": out, "summary": summary}


# ------------------------------------------------------------------------------------------------
# The zoo
# ------------------------------------------------------------------------------------------------


class _AsEvaluator:
    """A candidate ``f(x)`` as the zoo's task metrics call it (with a ``dtype``)."""

    def __init__(self, f, dtype):
        self.f, self.dtype = f, dtype

    def __call__(self, x):
        with jax.default_matmul_precision(C.PRECISION):
            return self.f(x.astype(self.dtype))


def zoo_metric(task: zoo.Task, teacher: dict, dtype):
    """``(metric(f), eps, describe)`` of the zoo's tolerance for ``task``."""
    if task.name == "image":
        def pixel_mse(f):
            return 10 ** (-task.metrics(_AsEvaluator(f, dtype))["psnr"] / 10)
        return pixel_mse, 10 ** (-(teacher["psnr"] - PSNR_MARGIN) / 10), \
            f"pixel MSE within {PSNR_MARGIN} dB of the teacher's PSNR"
    if task.name == "sdf":
        def sdf_ratio(f):
            m = task.metrics(_AsEvaluator(f, dtype))
            return max(m["surface"] / teacher["surface"], m["off"] / teacher["off"])
        return sdf_ratio, ZOO_TOLERANCE, "surface and off-surface error each <= 1.1x the teacher's"

    def rel_l2(f):
        return task.metrics(_AsEvaluator(f, dtype))["rel_l2"]
    return rel_l2, ZOO_TOLERANCE * teacher["rel_l2"], "relative L2 error <= 1.1x the teacher's"


def zoo_sweep(name: str, within) -> dict | None:
    """The zoo's committed hand-written sweep of ``name``: the smallest of its polished
    candidates meeting ``within(metrics)``, and the seconds of all its compressions and
    polishes."""
    best, seconds, files = None, 0.0, []
    for fname in ZOO_RESULTS:
        path = C.RESULTS / fname
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        if name not in r["models"]:
            continue
        files.append(fname)
        for row in r["models"][name]["rows"]:
            seconds += sum(c["seconds"] for c in row["candidates"]) + (row["polish_seconds"]
                                                                       or 0.0)
            if within(row["polished"]) and (best is None or row["num_params"]
                                            < best["num_params"]):
                best = {"num_params": row["num_params"], "hidden": row["hidden"], "k": row["k"],
                        "polished": row["polished"], "file": fname}
    if not files:
        return None
    return {"files": files, "best": best, "seconds": seconds}


def run_zoo(args, cfg, log, checkpoint=lambda part: None) -> dict:
    zcfg = dict(zoo.QUICK if args.quick else zoo.FULL)
    dtype = jnp.float32
    polish = settings(cfg["zoo_polish"])
    out, tasks = {}, {}
    with jax.numpy_rank_promotion("allow"):
        for name in cfg["zoo"]:
            tname = Z.TASKS[name]
            task = tasks.setdefault(tname, zoo._TASKS[tname](zcfg))
            mcfg = zcfg["models"][name]
            spec = mcfg["train"]
            model = Z.build(name, cfg["size"], seed=spec.seed, hidden=cfg.get("zoo_hidden"))
            log(f"\n## {name} ({tname}), hidden {list(model.hidden)}, "
                f"{Z.num_params(model.params):,} parameters")
            params, train_s = zoo.train(model, task, spec, log, args.cache)
            teacher = task.metrics(zoo.Evaluator(model.fn, params, dtype))
            metric, eps, tolerance = zoo_metric(task, teacher, dtype)
            log(f"  teacher {zoo._fmt(teacher)} (trained in {train_s:.0f} s); budget: "
                f"{tolerance} ({metric.__name__} <= {eps:.4g})")
            net = jc.trace(model.fn, params, jnp.zeros((4, model.d_in), dtype))
            t0 = time.perf_counter()
            res = jc.compress_to_tolerance(net, jc.Measured(metric=metric, polish=polish),
                                           domain=task.domain, eps=eps,
                                           progress=lambda line: log(f"  {line}"))
            secs = time.perf_counter() - t0
            small = res.compressed
            found = task.metrics(_AsEvaluator(small, dtype))
            hidden = model.hidden_widths(small.params)
            rec = {"task": tname, "teacher": teacher, "teacher_params": Z.num_params(params),
                   "teacher_hidden": list(model.hidden), "train_seconds": train_s,
                   "metric": metric.__name__, "eps": eps, "tolerance": tolerance,
                   "widths": list(res.widths), "hidden": hidden,
                   "num_params": Z.num_params(small.params), "metrics": found,
                   "metric_value": res.metric_value, "seconds": secs,
                   "candidates": len(res.frontier.rows), "frontier": res.frontier.to_dict()}
            within = _within(task.name, teacher)
            sweep = None if args.quick else zoo_sweep(name, within)
            rec["zoo_sweep"] = sweep
            if sweep is not None and sweep["best"] is not None:
                # seconds until the search first measured a candidate as small and within eps
                elapsed, first = 0.0, None
                for row in res.frontier.rows:
                    elapsed += row.seconds
                    if row.error <= eps and row.num_params <= sweep["best"]["num_params"]:
                        first = elapsed
                        break
                rec["seconds_to_match_sweep"] = first
            if cfg["scratch"]:
                smodel = Z.build(name, cfg["size"], seed=spec.seed + 1, hidden=hidden,
                                 settings=model.settings_of(small.params))
                sp, s_secs = zoo.train(smodel, task, spec, lambda _: None, args.cache)
                rec["scratch"] = {"metrics": task.metrics(zoo.Evaluator(smodel.fn, sp, dtype)),
                                  "seconds": s_secs}
                rec["scratch"]["metric_value"] = metric(jax.jit(functools.partial(smodel.fn,
                                                                                  sp)))
            log(f"  {name}: widths {rec['widths']}, {rec['num_params']:,} params "
                f"({rec['teacher_params'] / rec['num_params']:.0f}x fewer), "
                f"{zoo._fmt(found)}, {secs:.0f} s"
                + ("" if sweep is None or sweep["best"] is None else
                   f"; zoo sweep: {sweep['best']['num_params']:,} params in its "
                   f"{sweep['seconds']:.0f} s") +
                ("" if "scratch" not in rec else
                 f"; from scratch: {zoo._fmt(rec['scratch']['metrics'])}"))
            out[name] = rec
            checkpoint({"models": out})
    return {"config": {"size": cfg["size"], "polish": dataclasses.asdict(polish) | {
        "dtype": str(polish.dtype)}}, "models": out}


def _within(task: str, teacher: dict):
    if task == "image":
        return lambda m: m["psnr"] >= teacher["psnr"] - PSNR_MARGIN
    if task == "sdf":
        return lambda m: (m["surface"] <= ZOO_TOLERANCE * teacher["surface"]
                          and m["off"] <= ZOO_TOLERANCE * teacher["off"])
    return lambda m: m["rel_l2"] <= ZOO_TOLERANCE * teacher["rel_l2"]


# ------------------------------------------------------------------------------------------------
# Plot, main
# ------------------------------------------------------------------------------------------------


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t1, zr = result.get("table1"), result.get("zoo")
    zoo_names = list(zr["models"]) if zr else []
    panels = (2 if t1 else 0) + len(zoo_names)
    cols = min(3, max(1, panels))
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.3 * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[panels:]:
        ax.set_visible(False)
    i = 0
    if t1:
        first = t1["seeds"][0]
        front = jc.Frontier.from_dict(first["collocation"]["frontier"])
        scratch = None
        if "scratch" in first:
            scratch = [(first["collocation"]["num_params"],
                        first["scratch"]["test_ratio"] * first["teacher_val_mse"])]
        front.draw(flat[i], eps=RATIO * first["teacher_val_mse"], scratch=scratch,
                   title=f"Table 1 seed {first['seed']}: every candidate of the search "
                         "(task MSE on validation points)")
        i += 1
        ax = flat[i]
        seeds = [r["seed"] for r in t1["seeds"]]
        xs = np.arange(len(seeds))
        bars = [("uniform orders (first k within 1.05x)", "C0",
                 [r["collocation"]["uniform"]["num_params"] for r in t1["seeds"]]),
                ("search, from collocation (default)", "C3",
                 [r["collocation"]["num_params"] for r in t1["seeds"]])]
        if "derivative" in t1["seeds"][0]:
            bars.append(("search, from derivative matching", "C1",
                         [r["derivative"]["num_params"] for r in t1["seeds"]]))
        width = 0.8 / len(bars)
        for j, (label, color, vals) in enumerate(bars):
            pos = xs + (j - (len(bars) - 1) / 2) * width
            ax.bar(pos, vals, width, color=color, label=label)
            for x, v in zip(pos, vals, strict=True):
                ax.annotate(str(v), (x, v), ha="center", va="bottom", fontsize=6)
        ax.axhline(1737, color="k", ls=":", lw=1,
                   label="the paper's derivative matching, median width 28 (1,737)")
        ax.axhline(109, color="0.4", ls="--", lw=1, label="best uniform width by hand (109)")
        ax.set_yscale("log")
        ax.set_xticks(xs, [f"seed {s}\ntest {r['collocation']['test_ratio']:.2f}x"
                           for s, r in zip(seeds, t1["seeds"], strict=True)], fontsize=7)
        ax.set_ylabel("parameters (teacher: 527,361)")
        ax.set_title("Table 1: parameters kept within 1.05x the teacher's MSE", fontsize=9)
        ax.legend(fontsize=6)
        i += 1
    for name in zoo_names:
        r = zr["models"][name]
        front = jc.Frontier.from_dict(r["frontier"])
        scratch = None if "scratch" not in r else [(r["num_params"],
                                                     r["scratch"]["metric_value"])]
        front.draw(flat[i], eps=r["eps"], scratch=scratch, legend=(i == panels - 1),
                   title=f"{name} ({r['task']}): {r['metric']}")
        sweep = r.get("zoo_sweep")
        if sweep and sweep["best"] is not None:
            flat[i].axvline(sweep["best"]["num_params"], color="C2", lw=1, ls="-.")
            flat[i].annotate(f"zoo sweep: {sweep['best']['num_params']:,}",
                             (sweep["best"]["num_params"], 1), xycoords=("data", "axes fraction"),
                             rotation=90, va="top", ha="right", fontsize=6, color="C2")
        i += 1
    env = result["env"]
    fig.suptitle(f"How small can it get? jc.compress_to_tolerance with jc.Measured(metric=task, "
                 f"polish=True); {C.device_label(env)}; load avg "
                 f"{env['load_avg_1_5_15']['start']}", fontsize=9)
    C.save_figure(fig, path, rect=(0, 0, 1, 0.96))


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun  # --replot
    start, args, cfg, env = begun

    def log(line):
        print(line, flush=True)

    C.print_header(env, args.dtype, [
        f"parts {args.parts}; Table 1 seeds {cfg['seeds']} (float64, polish "
        f"{cfg['table1_polish'] or 'jc.PolishSettings() defaults'}); zoo {cfg['zoo']} "
        f"({cfg['size']} instances, float32 networks, polish {cfg['zoo_polish']})"])
    with jax.default_matmul_precision(C.PRECISION):
        log("\n## check: the search meets its budget and returns the user's pytree")
        failures = check(log)
        if failures:
            log("## check FAILED: " + "; ".join(failures))
            return 1
        result = {"benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
                  "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
                  "config": {k: v for k, v in cfg.items()} | {"parts": args.parts},
                  "checks": {"passed": True}}
        partial = args.out / f".{NAME}_partial.json"   # what is done so far, if stopped

        def checkpoint(part):
            def save(value):
                C.write_json(partial, result | {part: value})
            return save

        if "table1" in args.parts:
            result["table1"] = run_table1(args, cfg, log, checkpoint("table1"))
        if "zoo" in args.parts:
            result["zoo"] = run_zoo(args, cfg, log, checkpoint("zoo"))
        partial.unlink(missing_ok=True)
    C.finish(env, start)
    result["targets"] = targets(result)
    paths = C.save_results(args, env, NAME, result, plot,
                           suffix="" if args.parts == ["table1", "zoo"] else
                           "_" + "-".join(args.parts))
    summarize(result)
    C.print_written(paths, env)
    return 0


def targets(result: dict) -> dict:
    out = {}
    t1 = result.get("table1")
    if t1:
        s = t1["summary"]["collocation"]
        out["table1_median_params_below_109"] = s["median_num_params"] < 109
        out["table1_all_keep_task_on_test"] = s["all_keep_task"]
        out["table1_total_seconds"] = s["total_seconds"]
        out["table1_under_15_minutes"] = s["total_seconds"] < 900
    zr = result.get("zoo")
    if zr:
        for name, r in zr["models"].items():
            sweep = r.get("zoo_sweep")
            best = None if not sweep else sweep["best"]
            out[f"{name}_within_budget"] = r["metric_value"] <= r["eps"]
            if best is not None:
                out[f"{name}_no_larger_than_zoo_sweep"] = r["num_params"] <= best["num_params"]
                match = r.get("seconds_to_match_sweep")
                out[f"{name}_matched_sweep_faster"] = (match is not None
                                                       and match < sweep["seconds"])
    return out


def summarize(result: dict) -> None:
    t1 = result.get("table1")
    if t1:
        print("\n## Table 1: parameters within 1.05x the teacher's validation MSE (test ratio)")
        for r in t1["seeds"]:
            line = (f"seed {r['seed']}: uniform {r['collocation']['uniform']['num_params']:>4}, "
                    f"search {r['collocation']['num_params']:>4} {r['collocation']['widths']} "
                    f"(test {r['collocation']['test_ratio']:.3f}x, "
                    f"{r['collocation']['seconds']:.0f} s)")
            if "derivative" in r:
                line += (f"; from derivative matching {r['derivative']['num_params']:>4} "
                         f"(test {r['derivative']['test_ratio']:.3f}x)")
            if "scratch" in r:
                line += f"; from scratch test {r['scratch']['test_ratio']:.3f}x"
            print(line)
        for label, s in t1["summary"].items():
            if isinstance(s, dict):
                print(f"{label}: median {s['median_num_params']} parameters (uniform "
                      f"{s['median_uniform_num_params']}), every test ratio <= {RATIO}: "
                      f"{s['all_keep_task']}, {s['total_seconds']:.0f} s for the five")
    zr = result.get("zoo")
    if zr:
        print("\n## zoo: the search against the zoo's sweep and from scratch")
        for name, r in zr["models"].items():
            sweep = r.get("zoo_sweep") or {}
            best = sweep.get("best")
            scratch = r.get("scratch", {}).get("metric_value")
            print(f"{name:<14} {r['teacher_params']:>7,} -> {r['num_params']:>6,} params, "
                  f"{r['metric']} {r['metric_value']:.4g} (eps {r['eps']:.4g}), "
                  f"{r['seconds']:.0f} s"
                  + ("" if best is None else
                     f"; zoo sweep {best['num_params']:,} params ({sweep['seconds']:.0f} s; "
                     f"matched after {_s(r.get('seconds_to_match_sweep'))})")
                  + ("" if scratch is None else f"; from scratch {scratch:.4g}"))
    print("targets: " + ", ".join(f"{k} {v}" for k, v in result["targets"].items()))


def _s(v) -> str:
    return "never" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0f} s"


if __name__ == "__main__":
    sys.exit(main())
