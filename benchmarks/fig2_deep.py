"""Reproduce the paper's Fig. 2: a deep random network, every hidden layer compressed, both orders.

The network is the paper's random ``[2, 1024, 1024, 1024, 1024, 2]`` MLP (PyTorch-default
uniform init, ``jc.init_mlp(PRNGKey(seed), ...)``) with ``sigmoid`` and ``gelu`` (exact, erf-based)
activations. For every radius R in {0.3, 0.5, 1, 2}, order k = 0..10 (every hidden width
becomes D_k = C(2 + k, 2) = 1, 3, 6, ..., 66) and layer order ``backward`` (deepest layer first,
the paper's default) and ``forward`` it compresses with

    jc.compress(teacher, activation=act, order=k, radius=R, layer_order=order)

and measures ``jc.sup_error(teacher, student, activation=act, domain=jc.Ball(2, R), key=...)``
(``--samples`` uniform points plus ``--steps`` projected gradient-ascent steps from the
``--starts`` worst: the paper's protocol). The rounding floor of each (activation, R) is the error
between the teacher and a copy with permuted hidden neurons (the same function summed in another
order) on 4x the samples.

Should ``jc.sup_error``'s local search ever return a non-finite value (it did in float32 at the
rounding floor before commit 20b780c), the error is re-measured on the samples alone and the row
says so (``sup_error_note``).

``--rtol`` lists the rank thresholds (default: the library's, ``10 eps``; e.g.
``--rtol default,1e-4``). The library's earlier default, ``eps * max(D_k, width)`` (1.2e-4 at width
1024 in float32), truncated the small high-order Taylor rows and left a floor above the paper's
(``benchmarks/width_independence.py``).

Output: ``<out>/fig2_deep_<platform>_<dtype>[_quick].{json,png}``: error vs width D_k (log y), one
column per activation, one row per rtol variant, one colour per radius, solid = backward, dashed
= forward (as in the paper), grey band = rounding floors. The JSON holds every measurement, the
settings, device and load average, what the paper reports and our numbers for each claim.

Run (from the repository root; the same command on CPU and GPU)::

    python benchmarks/fig2_deep.py                      # paper sizes, float32
    python benchmarks/fig2_deep.py --dtype float64
    python benchmarks/fig2_deep.py --quick --out /tmp/fig2   # [2, 24, 24, 2], seconds
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "fig2_deep"
ACTIVATIONS = ("sigmoid", "gelu")
LAYER_ORDERS = ("backward", "forward")
PAPER = {
    "figure": "Fig 2",
    "setting": "random [2, 1024, 1024, 1024, 1024, 2], all four hidden layers compressed, "
               "backward and forward order, R in {0.3, 0.5, 1, 2}, k = 0..10 (widths 1..66), "
               "float32",
    "reports": "orders indistinguishable; sigmoid floor by k ~ 2 (R <= 1), k ~ 5 (R = 2); GELU "
               "< 1e-7 at k = 10 for R <= 1, ~1e-5 at R = 2",
    "claims": {
        "orders_indistinguishable": "backward and forward order give indistinguishable errors",
        "sigmoid_floor": "sigmoid reaches its float floor by k ~ 2 (width 6) for R <= 1 and by "
                         "k ~ 5 (width 21) for R = 2",
        "gelu_k10": "GELU error < 1e-7 at k = 10 (width 66) for R <= 1, ~1e-5 at R = 2",
    },
    "source": "DESIGN.md section 2",
}
FULL = {"sizes": [2, 1024, 1024, 1024, 1024, 2], "radii": [0.3, 0.5, 1.0, 2.0], "kmax": 10,
        "samples": 4096, "steps": 100, "starts": 16}
QUICK = {"sizes": [2, 24, 24, 2], "radii": [0.5, 1.0], "kmax": 1,
         "samples": 256, "steps": 3, "starts": 4}


def _series(rows, act, variant, order, r):
    return sorted((x for x in rows if x["activation"] == act and x["rtol_spec"] == variant
                   and x["layer_order"] == order and x["radius"] == r), key=lambda x: x["k"])


def compare_with_paper(rows, floors, radii, kmax, variants):
    """Our numbers for each of the paper's claims, per rtol variant."""
    out = {}
    for variant in variants:
        per_act = {}
        log_ratios = []
        for act in ACTIVATIONS:
            per_r = {}
            for r in radii:
                entry = {"rounding_floor": floors[act][str(r)]}
                for order in LAYER_ORDERS:
                    sel = _series(rows, act, variant, order, r)
                    ks = [x["k"] for x in sel]
                    errs = [x["sup_error"] for x in sel]
                    k_floor = C.first_floor_k(ks, errs)
                    entry[order] = {
                        "err_k0": errs[0], "err_k2": errs[2] if kmax >= 2 else None,
                        "err_k5": errs[5] if kmax >= 5 else None, "err_kmax": errs[-1],
                        "min_err": min(errs), "first_k_at_floor": k_floor,
                        "width_at_floor": None if k_floor is None else sel[k_floor]["width"],
                        "geometric_rate_per_order": C.decay_rate(ks, errs,
                                                                 floors[act][str(r)]),
                    }
                fwd = _series(rows, act, variant, "forward", r)
                bwd = _series(rows, act, variant, "backward", r)
                ratios = [abs(math.log10(f["sup_error"] / b["sup_error"]))
                          for f, b in zip(fwd, bwd, strict=True)
                          if f["sup_error"] > 0 and b["sup_error"] > 0]
                log_ratios += ratios
                entry["max_abs_log10_fwd_over_bwd"] = max(ratios) if ratios else None
                per_r[str(r)] = entry
            per_act[act] = per_r
        out[variant] = {
            "per_activation": per_act,
            "orders_indistinguishable": {
                "max_abs_log10_fwd_over_bwd": max(log_ratios) if log_ratios else None,
                "median_abs_log10_fwd_over_bwd": (statistics.median(log_ratios)
                                                  if log_ratios else None),
                "max_factor": 10 ** max(log_ratios) if log_ratios else None,
            },
            "sigmoid_floor": {r: {o: {"first_k_at_floor": e[o]["first_k_at_floor"],
                                      "min_err": e[o]["min_err"]} for o in LAYER_ORDERS}
                              for r, e in per_act["sigmoid"].items()},
            "gelu_k10": ({r: {o: e[o]["err_kmax"] for o in LAYER_ORDERS}
                          for r, e in per_act["gelu"].items()} if kmax == 10 else None),
        }
    out["definitions"] = {
        "first_k_at_floor": "first k whose sup error is within 2x of the smallest over k",
        "geometric_rate_per_order": "exp(slope) of a least-squares fit of log(error) vs k over "
                                    "the leading orders whose error is above 3x the rounding "
                                    "floor (None: fewer than 2 such orders)",
        "max_abs_log10_fwd_over_bwd": "max over (activation, R, k) of |log10(forward error / "
                                      "backward error)|",
        "rounding_floor": "max error between the teacher and a neuron-permuted copy on 4x the "
                          "uniform samples (no local search)",
    }
    return out


PAPER_NOTES = {
    "sigmoid": "paper: floor by k~2 (width 6) for R<=1,\nby k~5 (width 21) for R=2",
    "gelu": "paper: < 1e-7 at k=10 (width 66) for R<=1,\n~1e-5 at R=2",
}


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, radii = result["rows"], result["config"]["radii"]
    variants = result["config"]["rtol"]
    colors = plt.get_cmap("viridis")(
        [0.0, 0.35, 0.65, 0.9] if len(radii) == 4 else [i / max(1, len(radii)) for i in
                                                        range(len(radii))])
    n_rows = len(variants)
    fig, axes = plt.subplots(n_rows, len(ACTIVATIONS), figsize=(12, 4.4 * n_rows),
                             sharey=True, squeeze=False)
    kmax = result["config"]["kmax"]
    for row_i, variant in enumerate(variants):
        for ax, act in zip(axes[row_i], ACTIVATIONS, strict=True):
            for r, color in zip(radii, colors, strict=True):
                for order, ls in zip(LAYER_ORDERS, ("-", "--"), strict=True):
                    sel = _series(rows, act, variant, order, r)
                    ax.semilogy([x["width"] for x in sel], [x["sup_error"] for x in sel],
                                ls=ls, marker="o" if order == "backward" else "x", ms=3.5,
                                color=color, label=f"R = {r:g}" if order == "backward" else None)
            C.draw_floor(ax, result["rounding_floor"][act].values())
            if kmax == 10:
                ax.text(0.98, 0.97, PAPER_NOTES[act], transform=ax.transAxes, ha="right",
                        va="top", fontsize=7.5, color="red")
                if act == "gelu":
                    ax.plot([66, 66], [1e-7, 1e-5], marker="v", color="red", ms=7, ls="none")
            rtol_name = variant + (" (library default)" if variant == "default" else "")
            ax.set_title(f"{act}, rtol {rtol_name}", fontsize=10)
            ax.set_xlabel("hidden width D_k = C(2 + k, 2)")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xscale("log")
            widths = sorted({x["width"] for x in rows})
            ax.set_xticks(widths)
            ax.set_xticklabels([str(w) for w in widths], fontsize=7)
            ax.minorticks_off()
            ax.grid(True, which="major", axis="y", alpha=0.3)
        axes[row_i][0].set_ylabel("sup error on the ball of radius R")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles += [plt.Line2D([], [], color="k", ls="-", marker="o", ms=3.5),
                plt.Line2D([], [], color="k", ls="--", marker="x", ms=3.5)]
    labels += ["backward order", "forward order"]
    handles.append(plt.Rectangle((0, 0), 1, 1, color="gray", alpha=0.25))
    labels.append("rounding floor (teacher vs permuted copy)")
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels))
    fig.suptitle(f"Fig 2: {result['config']['sizes']} random network, all hidden layers "
                 f"compressed: {C.device_label(result['env'])}, {result['dtype']}", fontsize=10)
    C.save_figure(fig, path, rect=(0, 0.06 / n_rows, 1, 1), dpi=110)


def main(argv=None) -> int:
    return C.run_error_sweep(argv, doc=__doc__, name=NAME, paper=PAPER, full=FULL, quick=QUICK,
                             activations=ACTIVATIONS, layer_orders=LAYER_ORDERS,
                             compare=compare_with_paper, plot=plot, summary=print_summary)


def print_summary(result) -> None:
    comp = result["comparison"]
    for variant in result["config"]["rtol"]:
        c = comp[variant]
        oi = c["orders_indistinguishable"]
        print(f"\n## rtol {variant}: forward vs backward: max |log10 ratio| "
              f"{oi['max_abs_log10_fwd_over_bwd']:.3f} (x{oi['max_factor']:.2f}), median "
              f"{oi['median_abs_log10_fwd_over_bwd']:.3f}")
        for act, per_r in c["per_activation"].items():
            for r, e in per_r.items():
                b, f = e["backward"], e["forward"]
                print(f"{act:<8} R={r:<4} backward: k0 {C.fmt(b['err_k0'])} kmax "
                      f"{C.fmt(b['err_kmax'])} min {C.fmt(b['min_err'])} floor at "
                      f"k={b['first_k_at_floor']} | forward: kmax {C.fmt(f['err_kmax'])} min "
                      f"{C.fmt(f['min_err'])} floor at k={f['first_k_at_floor']} | rounding "
                      f"floor {C.fmt(e['rounding_floor'])}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
