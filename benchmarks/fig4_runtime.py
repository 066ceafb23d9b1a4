"""Reproduce the paper's Fig. 4: wall-clock of the whole compression vs width and vs depth.

End-to-end ``jc.compress(teacher, activation="sigmoid", order=k, radius=1.0)`` (Taylor features
of every hidden layer, R-scaled pivoted QR, re-weighting; backward order) on random float64 sigmoid
networks, as in the paper:

* width sweep: ``[3, d, d, 1]`` for k = 3, 5, 7 and d in {128, 256, 512, 1024, 2048, 4096};
* depth sweep: ``[3, 1024 x L, 1]`` for L = 1..8 at k = 5.

For every network the jit caches are cleared (``jax.clear_caches()``; the persistent compilation
cache is off), then the first call is timed (trace + compile + run), the answer is checked (the
compressed network's sup error on the unit ball, ``jc.sup_error`` with 512 samples and a short
local search, must be finite and below 1e-2; otherwise the script exits with status 1), and then
``--repeats`` warm calls are timed. Reported: the warm median and the compile time
``first call - warm median``, separately, and each warm time as a multiple of its *roofline*:
the time the FLOPs and bytes the compression cannot avoid (``_common.compress_cost``) take at
the median matmul and copy throughput measured during the same run (a ratio of 1 would be
perfect use of the machine). The machine is measured at the start and again after every
network: on the shared development CPU the 1024^2 matmul ran at 69 to 130 GFLOP/s within one
run, so a single measurement at the start made the ratios follow the noise. The median of
~27 is set against the median warm time; each row also keeps the ratio at the fastest
measurement (``warm_over_best_roofline``, the strictest bound) and at the one taken right
after its timing.

The paper timed one CPU thread. By default (``--threads 1``) the script sets
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`` and the BLAS
thread variables to 1 before JAX starts; ``--threads all`` leaves XLA's default. On an
accelerator the flag changes nothing that is timed.

Output: ``<out>/fig4_runtime_<platform>_<dtype>[_quick].{json,png}``: warm time and compile time
vs d (log-log, one colour per k, d and d^2 guide lines) and vs L (k = 5), plus the fitted scaling
exponents, the device, the load average (the development machine is shared) and what the paper
reports.

Run (from the repository root)::

    python benchmarks/fig4_runtime.py                      # paper sizes, float64, one thread
    python benchmarks/fig4_runtime.py --quick --out /tmp/fig4   # tiny, seconds
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "fig4_runtime"
ACTIVATION = "sigmoid"
RADIUS = 1.0
CHECK_TOL = 1e-2
CHECK_KW = {"n_samples": 512, "local_search_steps": 10, "n_starts": 4}
QUICK_CHECK_KW = {"n_samples": 256, "local_search_steps": 0, "n_starts": 4}
PAPER = {
    "figure": "Fig 4",
    "setting": "wall-clock of the whole compression, float64 sigmoid networks, CPU, one thread: "
               "[3, d, d, 1] for k = 3, 5, 7, and [3, 1024 x L, 1] for L = 1..8 at k = 5",
    "reports": "scaling curves (no numbers are quoted in DESIGN.md section 2)",
    "source": "DESIGN.md section 2",
}
FULL = {"widths": [128, 256, 512, 1024, 2048, 4096], "orders": [3, 5, 7],
        "depth_width": 1024, "depths": list(range(1, 9)), "depth_order": 5, "repeats": 3}
QUICK = {"widths": [32, 64], "orders": [3], "depth_width": 32, "depths": [1, 2],
         "depth_order": 3, "repeats": 2}


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--threads", choices=("1", "all"), default="1",
                   help="CPU threads for XLA and BLAS (default 1, as in the paper)")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"warm runs per network (default {FULL['repeats']})")
    p.add_argument("--widths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma-separated widths d of the width sweep")
    p.add_argument("--depths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma-separated depths L of the depth sweep")
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for name in ("repeats", "widths", "depths"):
        if getattr(args, name) is not None:
            cfg[name] = getattr(args, name)
    if cfg["repeats"] < 1:
        p.error("--repeats must be >= 1")
    return args, cfg


def loglog_slope(xs, ys, xmin):
    import numpy as np

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x >= xmin and y > 0]
    if len(pts) < 2:
        return None
    return float(np.polyfit([a for a, _ in pts], [b for _, b in pts], 1)[0])


def linear_fit(xs, ys):
    import numpy as np

    if len(xs) < 2:
        return None
    slope, intercept = np.polyfit(xs, ys, 1)
    return {"per_layer_s": float(slope), "intercept_s": float(intercept)}


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = result["rows"]
    cfg = result["config"]
    fig, (ax_d, ax_r, ax_l) = plt.subplots(1, 3, figsize=(17, 4.8))
    colors = plt.get_cmap("plasma")([0.0, 0.45, 0.8])
    for k, color in zip(cfg["orders"], colors, strict=False):
        sel = sorted((r for r in rows if r["sweep"] == "width" and r["k"] == k),
                     key=lambda r: r["d"])
        ds = [r["d"] for r in sel]
        slope = result["fits"]["width"][str(k)]["warm_loglog_slope"]
        slope_s = "" if slope is None else f", slope {slope:.2f}"
        ax_d.loglog(ds, [r["warm_median_s"] for r in sel], "o-", color=color,
                    label=f"k = {k} (D_k = {sel[0]['num_features']}) warm{slope_s}")
        ax_d.loglog(ds, [r["compile_s"] for r in sel], "s--", color=color, ms=4, alpha=0.7,
                    label=f"k = {k} compile")
    wsel = [r for r in rows if r["sweep"] == "width"]
    if wsel:
        d0 = min(r["d"] for r in wsel)
        d1 = max(r["d"] for r in wsel)
        t0 = min(r["warm_median_s"] for r in wsel if r["d"] == d0)
        for power, ls in ((1, ":"), (2, "-.")):
            ax_d.loglog([d0, d1], [t0, t0 * (d1 / d0) ** power], ls, color="gray", lw=1,
                        label=f"~ d^{power}")
    ax_d.set_xlabel("hidden width d  (network [3, d, d, 1])")
    ax_d.set_ylabel("wall-clock [s]")
    ax_d.set_title(f"width sweep, {ACTIVATION}, R = {RADIUS:g}", fontsize=10)
    ax_d.grid(True, which="both", alpha=0.3)
    widths = sorted({r["d"] for r in wsel})
    fig.legend(*ax_d.get_legend_handles_labels(), fontsize=7.5, loc="lower center", ncol=4)

    # warm / roofline (ours): how far from the work the method cannot avoid
    for k, color in zip(cfg["orders"], colors, strict=False):
        sel = sorted((r for r in rows if r["sweep"] == "width" and r["k"] == k),
                     key=lambda r: r["d"])
        ds = [r["d"] for r in sel]
        ax_r.loglog(ds, [r["warm_over_roofline"] for r in sel], "o-", color=color,
                    label=f"k = {k}")
        if all("warm_over_best_roofline" in r for r in sel):
            ax_r.loglog(ds, [r["warm_over_best_roofline"] for r in sel], "v:", color=color,
                        ms=4, alpha=0.6, label=f"k = {k} at the fastest matmul")
    for target, where in ((2, "d >= 1024"), (5, "d = 128")):
        ax_r.axhline(target, color="gray", lw=1, ls="--")
        ax_r.text(widths[0] if widths else 1, target * 1.06, f"issue 21 target {target}x ({where})",
                  fontsize=7, color="gray")
    ax_r.set_xlabel("hidden width d")
    ax_r.set_ylabel("warm / roofline")
    ax_r.set_title("warm time / roofline (ours; median machine speed of the run)",
                   fontsize=10)
    ax_r.grid(True, which="both", alpha=0.3)
    for ax in (ax_d, ax_r):  # one labelled tick per width (after both log scales)
        ax.set_xticks(widths)
        ax.set_xticklabels([str(w) for w in widths])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax_r.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax_r.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax_r.tick_params(axis="y", which="minor", labelsize=7)
    ax_r.legend(fontsize=7)

    sel = sorted((r for r in rows if r["sweep"] == "depth"), key=lambda r: r["L"])
    ls_ = [r["L"] for r in sel]
    fit = result["fits"]["depth"]
    warm_fit = fit["warm"]
    comp_fit = fit["compile"]
    ax_l.semilogy(ls_, [r["warm_median_s"] for r in sel], "o-", color="C0",
                  label="warm median" + ("" if warm_fit is None else
                                         f" ({1e3 * warm_fit['per_layer_s']:.1f} ms / layer)"))
    ax_l.semilogy(ls_, [r["compile_s"] for r in sel], "s--", color="C3",
                  label="compile (first call - warm)" + ("" if comp_fit is None else
                                                         f" ({comp_fit['per_layer_s']:.2f} s"
                                                         " / layer)"))
    ax_l.set_xlabel(f"hidden layers L  (network [3, {cfg['depth_width']} x L, 1], "
                    f"k = {cfg['depth_order']})")
    ax_l.set_ylabel("wall-clock [s]")
    ax_l.set_xticks(ls_)
    ax_l.set_title("depth sweep", fontsize=10)
    ax_l.grid(True, which="both", alpha=0.3)
    ax_l.legend(fontsize=8)
    env = result["env"]
    fig.suptitle(f"Fig 4: jc.compress wall-clock, {result['dtype']}, {C.device_label(env)}, "
                 f"threads: {cfg['threads']}; load avg {env['load_avg_1_5_15']['start']} "
                 "(shared machine)", fontsize=9)
    C.save_figure(fig, path, rect=(0, 0.13, 1, 1))


def main(argv=None) -> int:
    start = time.perf_counter()
    args, cfg = parse(argv)
    if args.replot is not None:
        return C.replot(args.replot, plot)
    C.configure(args.dtype, single_thread=args.threads == "1")
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    env = C.environment()
    check_kw = QUICK_CHECK_KW if args.quick else CHECK_KW
    C.print_header(env, args.dtype, [
        f"{ACTIVATION}, R = {RADIUS:g}, threads {args.threads}; width sweep [3, d, d, 1] d = "
        f"{cfg['widths']} k = {cfg['orders']}; depth sweep [3, {cfg['depth_width']} x L, 1] "
        f"L = {cfg['depths']} k = {cfg['depth_order']}; {cfg['repeats']} warm runs",
        f"check before timing: sup_error ({check_kw}) < {CHECK_TOL:g}"])
    # --quick: small sizes (the ratios of a quick run are not reported anywhere)
    speed_kw = {"n": 256, "copy_n": 1024, "repeats": 3} if args.quick else {}
    machine = C.machine_throughput(args.dtype, **speed_kw)
    print(f"# measured: matmul {machine['matmul_flops_per_s'] / 1e9:.2f} GFLOP/s, copy "
          f"{machine['copy_bytes_per_s'] / 1e9:.2f} GB/s ({args.dtype}, threads {args.threads})")
    cases = [("width", [3, d, d, 1], k, {"d": d}) for k in cfg["orders"] for d in cfg["widths"]]
    cases += [("depth", [3] + [cfg["depth_width"]] * n + [1], cfg["depth_order"], {"L": n})
              for n in cfg["depths"]]
    progress = C.Progress(len(cases))
    rows, failures, samples = [], [], [machine]
    dtype = jnp.dtype(args.dtype)
    for sweep, sizes, k, extra in cases:
        teacher = jax.block_until_ready(jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=dtype))

        def call(teacher=teacher, k=k):
            return jc.compress(teacher, activation=ACTIVATION, order=k, radius=RADIUS)

        with jax.default_matmul_precision(C.PRECISION):
            jax.clear_caches()
            t0 = time.perf_counter()
            small, info = jax.block_until_ready(call())
            first = time.perf_counter() - t0
            err, note = C.sup_error(jc, teacher, small, activation=ACTIVATION,
                                    domain=jc.Ball(3, RADIUS), key=jax.random.PRNGKey(1),
                                    **check_kw)
            ok = math.isfinite(err) and err < CHECK_TOL
            warm, times = C.median_time(call, cfg["repeats"])
        adjacent = C.machine_throughput(args.dtype, **speed_kw)
        samples.append(adjacent)
        cost = C.compress_cost(sizes, k, dtype.itemsize)
        bound = C.roofline(cost, adjacent)
        row = {"sweep": sweep, **extra, "sizes": sizes, "k": k, "cost": cost,
               "machine_adjacent": adjacent, "roofline_adjacent_s": bound,
               "warm_over_adjacent_roofline": warm / bound,
               "num_features": jc.taylor.num_monomials(3, k), "new_sizes": jc.layer_sizes(small),
               "ranks": [int(layer.rank) for layer in info.layers],
               "first_call_s": first, "warm_median_s": warm, "warm_s": times,
               "compile_s": first - warm, "sup_error": err, "sup_error_note": note,
               "check_passed": ok,
               "load_avg_1min": C.loadavg()[0] if C.loadavg() else None}
        rows.append(row)
        if not ok:
            failures.append(f"{sizes} k={k}: sup error {err:.3e} (tolerance {CHECK_TOL:g})")
        net = str(sizes) if len(sizes) < 6 else f"[3, {sizes[1]} x {len(sizes) - 2}, 1]"
        progress(f"{sweep:<5} {net:<22} k={k} first {first:7.3f} s  warm {1e3 * warm:9.2f} ms"
                 f" ({warm / bound:5.1f}x the roofline at the matmul measured after it, "
                 f"{adjacent['matmul_flops_per_s'] / 1e9:.0f} GFLOP/s)  compile "
                 f"{first - warm:6.2f} s  sup "
                 f"error {err:.2e} {'ok' if ok else 'FAILED'}")
        del teacher, small, info

    # the roofline at the run's median (and fastest) matmul and copy speeds
    import numpy as np

    speeds = {key: [m[key] for m in samples] for key in ("matmul_flops_per_s",
                                                         "copy_bytes_per_s")}
    typical = {key: float(np.median(v)) for key, v in speeds.items()}
    fastest = {key: max(v) for key, v in speeds.items()}
    typical["matmul_n"] = fastest["matmul_n"] = machine["matmul_n"]
    for row in rows:
        row["roofline_s"] = C.roofline(row["cost"], typical)
        row["warm_over_roofline"] = row["warm_median_s"] / row["roofline_s"]
        row["warm_over_best_roofline"] = row["warm_median_s"] / C.roofline(row["cost"], fastest)
    mm = sorted(speeds["matmul_flops_per_s"])
    print(f"# {len(samples)} measurements: matmul median {typical['matmul_flops_per_s'] / 1e9:.2f}"
          f" GFLOP/s (range {mm[0] / 1e9:.2f}-{mm[-1] / 1e9:.2f}), copy median "
          f"{typical['copy_bytes_per_s'] / 1e9:.2f} GB/s; warm / roofline at the median "
          "(at the fastest):")
    for row in rows:
        net = f"[3, {row['sizes'][1]} x {len(row['sizes']) - 2}, 1]"
        print(f"#   {row['sweep']:<5} {net:<18} k={row['k']}  {row['warm_over_roofline']:5.1f}x "
              f"({row['warm_over_best_roofline']:.1f}x)")
    fits = {"width": {}, "depth": {}}
    for k in cfg["orders"]:
        sel = sorted((r for r in rows if r["sweep"] == "width" and r["k"] == k),
                     key=lambda r: r["d"])
        ds = [r["d"] for r in sel]
        xmin = 512 if max(ds) >= 2048 else min(ds)
        fits["width"][str(k)] = {
            "fit_from_d": xmin,
            "warm_loglog_slope": loglog_slope(ds, [r["warm_median_s"] for r in sel], xmin),
            "compile_loglog_slope": loglog_slope(ds, [r["compile_s"] for r in sel], xmin),
        }
    dsel = sorted((r for r in rows if r["sweep"] == "depth"), key=lambda r: r["L"])
    fits["depth"] = {"warm": linear_fit([r["L"] for r in dsel],
                                        [r["warm_median_s"] for r in dsel]),
                     "compile": linear_fit([r["L"] for r in dsel],
                                           [r["compile_s"] for r in dsel])}
    C.finish(env, start)
    result = {
        "benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
        "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
        "config": {**cfg, "threads": args.threads, "activation": ACTIVATION, "radius": RADIUS,
                   "check": {**check_kw, "tolerance": CHECK_TOL},
                   "compile_s": "first call (after jax.clear_caches()) minus the warm median",
                   "shared_machine_note": "the development CPU was shared with other jobs; "
                                          "see load_avg_1_5_15 and the per-row load_avg_1min"},
        "fits": fits,
        "machine": typical, "machine_fastest": fastest, "machine_start": machine,
        "machine_samples": samples,
        "roofline": "warm_over_roofline = warm median / max(flops / matmul FLOP/s, bytes / "
                    "copy bytes/s) of _common.compress_cost (a lower bound on the work), at the "
                    "median matmul and copy speed of machine_samples (measured at the start and "
                    "after every network); warm_over_best_roofline at the fastest of them, "
                    "warm_over_adjacent_roofline at the one taken right after that row's timing",
        "checks": {"passed": not failures, "failures": failures},
        "rows": rows,
    }
    paths = C.save_results(args, env, NAME, result, plot)
    print("\n## fitted scaling")
    for k, f in fits["width"].items():
        print(f"k={k}: warm time ~ d^{C.fmt(f['warm_loglog_slope'])} (d >= {f['fit_from_d']}), "
              f"compile ~ d^{C.fmt(f['compile_loglog_slope'])}")
    if fits["depth"]["warm"] is not None:
        print(f"depth: warm {1e3 * fits['depth']['warm']['per_layer_s']:.2f} ms per layer, "
              f"compile {fits['depth']['compile']['per_layer_s']:.2f} s per layer")
    C.print_written(paths, env)
    if failures:
        print("# FAILED checks: " + "; ".join(failures), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
