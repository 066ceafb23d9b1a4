"""Reproduce the paper's Fig. 1: sup error of derivative matching on one wide hidden layer vs k.

The network is the paper's random ``[3, 2048, 2048]`` MLP (input 3, one hidden layer of 2048
neurons, output 2048; PyTorch-default uniform init, ``jc.init_mlp(PRNGKey(seed), ...)``), with
``sigmoid`` and ``gelu`` (exact, erf-based) activations. For every radius R in {0.5, 1, 2, 4}
and order k = 0..9 the script compresses with

    jc.compress(teacher, jc.derivative_matching(k), activation=act, domain=jc.Ball(3, R))

and measures ``jc.sup_error(teacher, student, activation=act, domain=jc.Ball(3, R), key=...)``:
the largest ``max_o |F_o - F~_o|`` over ``--samples`` uniform points of the ball plus
``--steps`` projected gradient-ascent steps from the ``--starts`` worst ones (the paper's
protocol). Before anything else it measures the *rounding floor* of each (activation, R): the
largest error between the teacher and a copy with permuted hidden neurons (the same function,
summed in another order) on 4x the samples, below which no error can be measured in this dtype.

Should ``jc.sup_error``'s local search ever return a non-finite value (it did in float32 at the
rounding floor before commit 20b780c), the error is re-measured on the samples alone and the row
says so (``sup_error_note``).

``--rtol`` lists the rank thresholds to run (default: the library's, ``10 eps``; e.g.
``--rtol default,1eps,1e-4``). Until the float32 issue the library's default was numpy's
matrix-rank tolerance ``eps * max(D_k, width)`` (2.4e-4 at width 2048 in float32), which truncated
the small high-order Taylor rows and left an error floor one order of magnitude above the paper's;
``10 eps`` depends on the dtype only (``benchmarks/width_independence.py``).

Output: ``<out>/fig1_single_layer_<platform>_<dtype>[_quick].{json,png}``: error vs k (log y),
one panel per activation, one colour per radius, solid = library default rtol, dashed = any
further ``--rtol`` variant,
grey band = rounding floors. The JSON holds every measurement, the settings, the device and
load average, what the paper reports and our numbers for each of its claims.

Run (from the repository root; the same command on CPU and GPU)::

    python benchmarks/fig1_single_layer.py                      # paper sizes, float32
    python benchmarks/fig1_single_layer.py --dtype float64
    python benchmarks/fig1_single_layer.py --quick --out /tmp/fig1   # [3, 64, 64], seconds
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "fig1_single_layer"
ACTIVATIONS = ("sigmoid", "gelu")
PAPER = {
    "figure": "Fig 1",
    "setting": "one hidden layer, random [3, 2048, 2048], sigmoid and GELU, radii R, k = 0..9, "
               "float32",
    "reports": "geometric decay in k; float32 floor ~1e-6 by k ~ 5 for R <= 1; < 1e-5 at k = 9 "
               "on the unit ball",
    "claims": {
        "geometric_decay": "the sup error decays geometrically in k",
        "floor_by_k5": "float32 error floor ~1e-6 reached by k ~ 5 for R <= 1",
        "unit_ball_k9": "sup error < 1e-5 at k = 9 on the unit ball (R = 1)",
    },
    "source": "DESIGN.md section 2",
}
FULL = {"sizes": [3, 2048, 2048], "radii": [0.5, 1.0, 2.0, 4.0], "kmax": 9,
        "samples": 4096, "steps": 100, "starts": 16}
QUICK = {"sizes": [3, 64, 64], "radii": [0.5, 1.0], "kmax": 1,
         "samples": 256, "steps": 3, "starts": 4}


def compare_with_paper(rows, floors, radii, kmax, variants):
    """Our numbers for each of the paper's claims, per rtol variant and activation."""
    out = {}
    for variant in variants:
        per_act = {}
        for act in ACTIVATIONS:
            per_r = {}
            for r in radii:
                sel = sorted((x for x in rows if x["activation"] == act and x["radius"] == r
                              and x["rtol_spec"] == variant), key=lambda x: x["k"])
                ks = [x["k"] for x in sel]
                errs = [x["sup_error"] for x in sel]
                floor = floors[act][str(r)]
                per_r[str(r)] = {
                    "err_k0": errs[0], "err_k5": errs[5] if kmax >= 5 else None,
                    "err_kmax": errs[-1], "min_err": min(errs),
                    "first_k_at_floor": C.first_floor_k(ks, errs),
                    "geometric_rate_per_order": C.decay_rate(ks, errs, floor),
                    "rounding_floor": floor,
                }
            per_act[act] = per_r
        small = [str(r) for r in radii if r <= 1.0]
        out[variant] = {
            "per_activation": per_act,
            "floor_by_k5": {act: {r: {"err_k5": per_act[act][r]["err_k5"],
                                      "first_k_at_floor": per_act[act][r]["first_k_at_floor"]}
                                  for r in small} for act in ACTIVATIONS},
            "unit_ball_k9": ({act: per_act[act]["1.0"]["err_kmax"] for act in ACTIVATIONS}
                             if "1.0" in per_act[ACTIVATIONS[0]] and kmax == 9 else None),
        }
    out["definitions"] = {
        "first_k_at_floor": "first k whose sup error is within 2x of the smallest over k",
        "geometric_rate_per_order": "exp(slope) of a least-squares fit of log(error) vs k over "
                                    "the leading orders whose error is above 3x the rounding "
                                    "floor (None: fewer than 2 such orders)",
        "rounding_floor": "max error between the teacher and a neuron-permuted copy on 4x the "
                          "uniform samples (no local search)",
    }
    return out


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, radii = result["rows"], result["config"]["radii"]
    variants = result["config"]["rtol"]
    styles = ["-", "--", "-.", ":"]
    colors = plt.get_cmap("viridis")(
        [0.0, 0.35, 0.65, 0.9] if len(radii) == 4 else [i / max(1, len(radii)) for i in
                                                        range(len(radii))])
    fig, axes = plt.subplots(1, len(ACTIVATIONS), figsize=(12, 4.8), sharey=True)
    for ax, act in zip(axes, ACTIVATIONS, strict=True):
        for r, color in zip(radii, colors, strict=True):
            for v_i, variant in enumerate(variants):
                sel = sorted((x for x in rows if x["activation"] == act and x["radius"] == r
                              and x["rtol_spec"] == variant), key=lambda x: x["k"])
                label = f"R = {r:g}" if v_i == 0 else None
                ax.semilogy([x["k"] for x in sel], [x["sup_error"] for x in sel],
                            styles[v_i % len(styles)], marker="o", ms=3.5, color=color,
                            label=label)
        C.draw_floor(ax, result["rounding_floor"][act].values())
        if result["config"]["kmax"] >= 9 and 1.0 in radii:
            ax.plot([9], [1e-5], marker="v", color="red", ms=8, ls="none",
                    label="paper: < 1e-5 at k = 9, R = 1")
        ax.set_title(act)
        ax.set_xlabel("Taylor order k  (width D_k = C(3 + k, 3))")
        ax.set_xticks(range(result["config"]["kmax"] + 1))
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("sup error on the ball of radius R")
    handles, labels = axes[0].get_legend_handles_labels()
    for v_i, variant in enumerate(variants):
        handles.append(plt.Line2D([], [], color="k", ls=styles[v_i % len(styles)]))
        labels.append(f"rtol {variant}" + (" (library default)" if variant == "default" else ""))
    handles.append(plt.Rectangle((0, 0), 1, 1, color="gray", alpha=0.25))
    labels.append("rounding floor (teacher vs permuted copy)")
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(len(labels), 5))
    sizes = result["config"]["sizes"]
    fig.suptitle(f"Fig 1: {sizes} random network, one layer compressed: "
                 f"{C.device_label(result['env'])}, {result['dtype']}", fontsize=10)
    C.save_figure(fig, path, rect=(0, 0.09, 1, 1))


def main(argv=None) -> int:
    return C.run_error_sweep(argv, doc=__doc__, name=NAME, paper=PAPER, full=FULL, quick=QUICK,
                             activations=ACTIVATIONS, layer_orders=("backward",),
                             compare=compare_with_paper, plot=plot, summary=print_summary)


def print_summary(result) -> None:
    comp = result["comparison"]
    print("\n## sup error by activation, radius and k (columns: rtol variants)")
    for variant in result["config"]["rtol"]:
        print(f"# rtol {variant}")
        for act, per_r in comp[variant]["per_activation"].items():
            for r, s in per_r.items():
                q = s["geometric_rate_per_order"]
                print(f"{act:<8} R={r:<4} k0 {C.fmt(s['err_k0'])}  k5 {C.fmt(s['err_k5'])}  "
                      f"kmax {C.fmt(s['err_kmax'])}  floor reached at k={s['first_k_at_floor']}"
                      f"  rate/order {'n/a' if q is None else f'{q:.3f}'}  rounding floor "
                      f"{C.fmt(s['rounding_floor'])}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
