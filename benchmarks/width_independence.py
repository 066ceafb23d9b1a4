"""The paper's central claim, measured: the compression error does not depend on the teacher width.

For teachers of growing width ``w`` at a fixed order ``k`` the script compresses with the library
defaults,

    jc.compress(teacher, activation="sigmoid", order=k, radius=1.0)      (width D_k, any w)

and measures the sup error on the unit disk. Two families, each in float32 and float64:

* one hidden layer, ``[2, w, 1]``, ``k = 8`` (``D_8 = 45``), ``w = 256 ... 65536``;
* three hidden layers, ``[2, w, w, w, 1]``, ``k = 6`` (``D_6 = 28``), ``w = 256 ... 4096``.

Two rank thresholds are compared: the library default ``rtol = 10 eps`` (dtype only) and the
rule it replaced, numpy's matrix-rank tolerance ``eps * max(D_k, w)``, which grows with the width
(``--no-old`` and ``--quick`` skip it). The sup error is measured as in the paper (uniform
samples plus projected gradient ascent from the worst ones) **with both networks evaluated in
float64**, so it is the
error of the compression itself, not the float32 rounding of evaluating either network; the
float32 rounding floor (the float32 teacher against a copy with permuted neurons, both evaluated
in float32) is recorded beside it.

It then checks the targets of the float32 issue (the compressions with the library defaults):

====================================================  ==========
``[2, w, 1]`` sigmoid, ``k = 8``, float32, every w       <= 1e-6
Fig 2 net ``[2, 1024 x 4, 2]`` sigmoid, R = 1, k = 3, f32  <= 3e-6
Fig 1 net ``[3, 2048, 2048]``, k = 9, unit ball, f32      <= 3e-6 (sigmoid and GELU)
Fig 2 net, float64, R = 0.5, k = 10                        <= 1e-13
====================================================  ==========

Output: ``<out>/width_independence_<platform>[_quick].{json,png}``: sup error versus teacher width
(log-log), one panel per family, solid = default threshold, dashed = the old rule, one colour per
dtype, grey = float32 rounding floor. Exit status 1 when a target is missed.

Run (from the repository root)::

    python benchmarks/width_independence.py            # full run (~25 min on 2 CPU cores)
    python benchmarks/width_independence.py --quick    # seconds: a smoke test
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "width_independence"
FULL = {
    "families": {
        "one layer": {"depth": 1, "order": 8, "widths": [256, 1024, 4096, 16384, 65536]},
        "three layers": {"depth": 3, "order": 6, "widths": [256, 1024, 4096]},
    },
    "samples": 4096, "steps": 50, "starts": 16, "targets": True, "old": True,
}
QUICK = {
    "families": {
        "one layer": {"depth": 1, "order": 4, "widths": [32, 128]},
        "three layers": {"depth": 3, "order": 2, "widths": [16, 32]},
    },
    "samples": 256, "steps": 3, "starts": 4, "targets": False, "old": False,
}
DTYPES = ("float32", "float64")
#: (name, sizes, activation, order, radius, dtype, bound): the float32 issue's targets.
TARGETS = (
    ("[2, w, 1] sigmoid k=8 float32, every w", None, "sigmoid", 8, 1.0, "float32", 1e-6),
    ("Fig 2 net sigmoid R=1 k=3 float32", [2, 1024, 1024, 1024, 1024, 2], "sigmoid", 3, 1.0,
     "float32", 3e-6),
    ("Fig 1 net sigmoid k=9 R=1 float32", [3, 2048, 2048], "sigmoid", 9, 1.0, "float32", 3e-6),
    ("Fig 1 net GELU k=9 R=1 float32", [3, 2048, 2048], "gelu", 9, 1.0, "float32", 3e-6),
    ("Fig 2 net sigmoid R=0.5 k=10 float64", [2, 1024, 1024, 1024, 1024, 2], "sigmoid", 10,
     0.5, "float64", 1e-13),
)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of seconds")
    p.add_argument("--out", type=Path, default=C.RESULTS, help="results folder")
    p.add_argument("--replot", type=Path, default=None, metavar="JSON",
                   help="only redraw the PNG of a saved result JSON and exit")
    p.add_argument("--no-old", action="store_true",
                   help="skip the old width-dependent threshold eps * max(D_k, w)")
    C.add_sup_error_options(p, FULL, QUICK)
    args = p.parse_args(argv)
    return args, C.mode_config(args, FULL, QUICK, C.SUP_ERROR_OPTIONS)


def main(argv=None) -> int:
    start = time.perf_counter()
    args, cfg = parse(argv)
    if args.replot is not None:
        return C.replot(args.replot, plot)
    C.configure("float64")  # float64 enabled; each teacher is built in its own dtype
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxcompress as jc

    env = C.environment()
    C.print_header(env, "float32 and float64", [
        "teachers [2, w, 1] and [2, w, w, w, 1], sigmoid, unit disk; both networks evaluated "
        "in float64 for the sup error",
        f"sup_error: {cfg['samples']} uniform samples + {cfg['steps']} projected ascent steps "
        f"from the {cfg['starts']} worst"])
    key = jax.random.PRNGKey(1)
    err_kw = {"n_samples": cfg["samples"], "local_search_steps": cfg["steps"],
              "n_starts": cfg["starts"]}
    variants = ("default", "old") if cfg["old"] and not args.no_old else ("default",)
    n_rows = sum(len(f["widths"]) for f in cfg["families"].values()) * len(DTYPES)
    progress = C.Progress(n_rows * (len(variants) + 1) + (len(TARGETS) if cfg["targets"] else 0))

    def cast(params, dtype):
        return [{n: jnp.asarray(v, dtype) for n, v in layer.items()} for layer in params]

    def measure(teacher, student, act, domain):
        err, note = C.sup_error(jc, cast(teacher, jnp.float64), cast(student, jnp.float64),
                                activation=act, domain=domain, key=key, **err_kw)
        return err, note

    rows = []
    with jax.default_matmul_precision(C.PRECISION):
        for family, fam in cfg["families"].items():
            k = fam["order"]
            d_k = jc.taylor.num_monomials(2, k)
            for dtype in DTYPES:
                eps = float(np.finfo(dtype).eps)
                for w in fam["widths"]:
                    sizes = [2] + [w] * fam["depth"] + [1]
                    teacher = jax.block_until_ready(jc.init_mlp(
                        jax.random.PRNGKey(0), sizes, dtype=jnp.dtype(dtype)))
                    domain = jc.Ball(2, 1.0)
                    floor = float(jc.sup_error(teacher, C.permuted_copy(teacher),
                                               activation="sigmoid", domain=domain, key=key,
                                               n_samples=cfg["samples"], local_search_steps=0))
                    progress(f"{family:<12} {dtype} w={w:<6} rounding floor {floor:.2e}")
                    for variant in variants:
                        rtol = None if variant == "default" else eps * max(d_k, w)
                        t0 = time.perf_counter()
                        method = jc.derivative_matching(k, selector=jc.PivotedQR(rtol=rtol))
                        small, info = jax.block_until_ready(jc.compress(
                            teacher, method, activation="sigmoid", domain=domain))
                        secs = time.perf_counter() - t0
                        err, note = measure(teacher, small, "sigmoid", domain)
                        ranks = [int(li.rank) for li in info.layers]
                        rows.append({
                            "family": family, "dtype": dtype, "width": w, "order": k,
                            "D_k": d_k, "rtol_spec": variant,
                            "rtol": eps * 10 if rtol is None else rtol, "ranks": ranks,
                            "sup_error": err, "sup_error_note": note,
                            "error_estimate": float(info.error_estimate),
                            "rounding_floor_own_dtype": floor, "compress_s": round(secs, 3)})
                        progress(f"{family:<12} {dtype} w={w:<6} rtol {variant:<7} ranks "
                                 f"{ranks} sup error {err:.3e} (estimate "
                                 f"{float(info.error_estimate):.2e})")
        targets = run_targets(jc, jax, jnp, rows, measure, progress) if cfg["targets"] else []
    C.finish(env, start)
    result = {"benchmark": NAME, "env": env, "device": env["device"],
              "precision": C.PRECISION_NOTE, "quick": args.quick,
              "config": {**cfg, "variants": list(variants),
                         "measure": "jc.sup_error with both networks cast to float64"},
              "rows": rows, "targets": targets,
              "width_ratio": width_ratio(rows)}
    stem = f"{NAME}_{env['device']['platform']}" + ("_quick" if args.quick else "")
    paths = (args.out / f"{stem}.json", args.out / f"{stem}.png")
    C.write_json(paths[0], result)
    plot(result, paths[1])
    print_summary(result)
    C.print_written(paths, env)
    missed = [t for t in targets if not t["met"]]
    if missed:
        print(f"# MISSED {len(missed)} target(s): {[t['name'] for t in missed]}")
    bad = [r for r in rows if not math.isfinite(r["sup_error"])]
    return 1 if missed or bad else 0


def run_targets(jc, jax, jnp, rows, measure, progress) -> list[dict]:
    out = []
    for name, sizes, act, k, radius, dtype, bound in TARGETS:
        if sizes is None:  # read off the width sweep
            errs = [r["sup_error"] for r in rows if r["family"] == "one layer"
                    and r["dtype"] == dtype and r["rtol_spec"] == "default"]
            value = max(errs)
        else:
            teacher = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=jnp.dtype(dtype))
            small, _ = jc.compress(teacher, activation=act, order=k, radius=radius)
            value, _ = measure(teacher, small, act, jc.Ball(sizes[0], radius))
        out.append({"name": name, "bound": bound, "value": value, "met": value <= bound})
        progress(f"target {name}: {value:.2e} <= {bound:g}? {'yes' if value <= bound else 'NO'}")
    return out


def width_ratio(rows) -> dict:
    """Per (family, dtype, threshold): largest error over the widths / smallest."""
    out = {}
    for r in rows:
        out.setdefault(f"{r['family']} {r['dtype']} {r['rtol_spec']}", []).append(r["sup_error"])
    return {key: max(v) / min(v) for key, v in out.items() if min(v) > 0}


def print_summary(result) -> None:
    print("\n## sup error (both networks in float64) by width")
    for family in result["config"]["families"]:
        for dtype in DTYPES:
            for variant in result["config"]["variants"]:
                sel = [r for r in result["rows"] if r["family"] == family and r["dtype"] == dtype
                       and r["rtol_spec"] == variant]
                if sel:
                    print(f"{family:<12} {dtype} rtol {variant:<7} " + "  ".join(
                        f"w={r['width']}: {r['sup_error']:.2e}" for r in sel))
    for t in result["targets"]:
        print(f"target {t['name']}: {t['value']:.2e} <= {t['bound']:g}: "
              f"{'met' if t['met'] else 'MISSED'}")
    sys.stdout.flush()


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(result["config"]["families"])
    fig, axes = plt.subplots(1, len(families), figsize=(5.2 * len(families), 4.2), squeeze=False)
    colours = {"float32": "tab:blue", "float64": "tab:red"}
    for ax, family in zip(axes[0], families, strict=True):
        fam = result["config"]["families"][family]
        for dtype in DTYPES:
            for variant, style in (("default", "o-"), ("old", "s--")):
                sel = [r for r in result["rows"] if r["family"] == family
                       and r["dtype"] == dtype and r["rtol_spec"] == variant]
                if not sel:
                    continue
                label = (f"{dtype}, rtol = 10 eps (default)" if variant == "default"
                         else f"{dtype}, old rtol = eps max(D_k, w)")
                ax.loglog([r["width"] for r in sel], [max(r["sup_error"], 1e-17) for r in sel],
                          style, color=colours[dtype], label=label, alpha=0.9 if
                          variant == "default" else 0.6)
        floors = [r["rounding_floor_own_dtype"] for r in result["rows"]
                  if r["family"] == family and r["dtype"] == "float32"]
        if floors:
            C.draw_floor(ax, floors)
        ax.set_xticks(fam["widths"], [f"{w:,}" for w in fam["widths"]])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        depth = fam["depth"]
        ax.set_title(f"{family}: [2, {'w, ' * depth}1], sigmoid, k = {fam['order']}, R = 1",
                     fontsize=9)
        ax.set_xlabel("teacher width w")
        ax.set_ylabel("sup error on the disk (both nets in float64)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"width independence, {C.device_label(result['env'])}; grey: float32 rounding "
                 "floor of the teacher", fontsize=9)
    C.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
