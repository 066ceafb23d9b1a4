"""Where one warm ``jc.compress`` call spends its time: features, selection, the rest.

The accelerator suite's roofline step times the whole call (``[2, w, w, 2]`` and the Fig 2
network ``[2, 1024 x 4, 2]`` at k = 10, float32, highest matmul precision); this script splits
it, per network, into

``features``
    ``jc.features.derivative_features`` alone (the multivariate Taylor pass over every hidden
    layer: the FLOP-heavy part the roofline counts);
``select pivoted_qr``
    ``jc.select.select_columns`` with the default selector on the last hidden layer's
    ``D_k x w`` feature matrix, ``m = D_k`` (LAPACK ``geqp3``: on a GPU JAX runs it on the host,
    so the matrix travels there and back);
``select greedy_gs``
    the same with the pure-JAX greedy Gram-Schmidt selector (``jc.select.GreedyGS``: the same
    pivot rule, on the device);
``compress``
    the whole call with each selector (``jc.derivative_matching(k)`` and
    ``jc.derivative_matching(k, selector="greedy_gs")``).

It checks before timing: both selectors keep the same number of neurons and their compressed
networks' error estimates agree within 10x (float32 pivots may differ at rounding), else it
exits with status 1. Each stage: first call (trace + compile + run) and the median of warm calls.

Output: ``<out>/compress_stages_<platform>_<dtype>[_quick].{json,png}`` (stacked warm times per
network, first-call times beside them).

Run (from the repository root)::

    python benchmarks/compress_stages.py                 # w = 1024, 4096, 16384, then Fig 2
    python benchmarks/compress_stages.py --quick --out /tmp/stages   # tiny, seconds
    python benchmarks/compress_stages.py --widths 1024,4096 --no-fig2
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "compress_stages"
ACTIVATION = "sigmoid"
FULL = {"widths": [1024, 4096, 16384], "order": 10, "repeats": 5}
QUICK = {"widths": [48], "order": 3, "repeats": 2}
SELECTORS = ("pivoted_qr", "greedy_gs")
STAGES = ("features", *(f"select {s}" for s in SELECTORS), *(f"compress {s}" for s in SELECTORS))


def parse(argv):
    p = C.parser(__doc__, default_dtype="float32")
    p.add_argument("--widths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help=f"comma-separated widths w of [2, w, w, 2] (default {FULL['widths']})")
    p.add_argument("--order", type=int, default=None, help=f"k (default {FULL['order']})")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"warm calls per stage (default {FULL['repeats']})")
    p.add_argument("--no-fig2", action="store_true", help="leave out [2, 1024 x 4, 2]")
    args = p.parse_args(argv)
    cfg = C.mode_config(args, FULL, QUICK, ("widths", "order", "repeats"))
    if cfg["order"] < 1 or cfg["repeats"] < 1 or min(cfg["widths"]) < 1:
        p.error("--order, --repeats and the widths must be >= 1")
    return args, cfg


def timed(fn, repeats: int) -> dict:
    """First call and warm median of ``fn`` (each blocked until ready)."""
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    warm, times = C.median_time(fn, repeats)
    return {"first_s": first, "warm_s": warm, "warm_all_s": times, "out": out}


def stages(jax, jnp, jc, sizes: list[int], order: int, repeats: int, dtype) -> dict:
    teacher = jax.block_until_ready(jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=dtype))
    domain = jc.Ball(sizes[0], 1.0)
    row: dict = {"sizes": sizes, "k": order}
    feats = jax.jit(lambda p: jc.features.derivative_features(p, activation=ACTIVATION,
                                                              order=order))
    r = timed(lambda: feats(teacher), repeats)
    z = r.pop("out")[-1]
    row["features"] = r
    m = min(z.shape)
    for name in SELECTORS:
        sel = jax.jit(lambda z, name=name: jc.select.select_columns(z, m, name))
        r = timed(lambda sel=sel: sel(z), repeats)
        r["rank"] = int(r.pop("out").rank)
        row[f"select {name}"] = r
    for name in SELECTORS:
        method = jc.derivative_matching(order, selector=name)
        r = timed(lambda method=method: jc.compress(teacher, method, activation=ACTIVATION,
                                                    domain=domain), repeats)
        small, info = r.pop("out")
        r["widths"] = jc.layer_sizes(small)
        r["error_estimate"] = float(info.error_estimate)
        row[f"compress {name}"] = r
    return row


def check(row: dict) -> list[str]:
    a, b = (row[f"compress {s}"] for s in SELECTORS)
    bad = []
    if a["widths"] != b["widths"]:
        bad.append(f"{row['sizes']}: widths {a['widths']} vs {b['widths']}")
    lo, hi = sorted([a["error_estimate"], b["error_estimate"]])
    if not (hi <= 10 * max(lo, 1e-12)):
        bad.append(f"{row['sizes']}: error estimates {lo:.2e} vs {hi:.2e}")
    return bad


def main(argv=None) -> int:
    start = time.perf_counter()
    args, cfg = parse(argv)
    if args.replot is not None:
        return C.replot(args.replot, plot)
    C.configure(args.dtype)
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    env = C.environment()
    C.print_header(env, args.dtype, [f"k = {cfg['order']}, widths {cfg['widths']}, "
                                     f"{cfg['repeats']} warm calls per stage"])
    nets = [[2, w, w, 2] for w in cfg["widths"]]
    if not args.no_fig2:
        nets.append([2, 32, 32, 32, 32, 2] if args.quick else [2, 1024, 1024, 1024, 1024, 2])
    rows, failures = [], []
    stem = f"{NAME}_{env['device']['platform']}_{args.dtype}" + ("_quick" if args.quick else "")
    paths = [args.out / f"{stem}.json", args.out / f"{stem}.png"]
    with jax.default_matmul_precision(C.PRECISION):
        for sizes in nets:
            row = stages(jax, jnp, jc, sizes, cfg["order"], cfg["repeats"], jnp.dtype(args.dtype))
            failures += check(row)
            rows.append(row)
            print(f"  {str(sizes):<32} " + "  ".join(
                f"{name} {1e3 * row[name]['warm_s']:8.2f} ms (first {row[name]['first_s']:5.2f} s)"
                for name in STAGES), flush=True)
            C.finish(env, start)  # written after every network: a run cut short keeps its rows
            C.write_json(paths[0], {
                "benchmark": NAME, "env": env, "device": env["device"], "dtype": args.dtype,
                "precision": C.PRECISION_NOTE, "quick": args.quick, "config": cfg,
                "activation": ACTIVATION, "complete": len(rows) == len(nets), "rows": rows,
                "failures": failures})
    plot({"rows": rows, "config": cfg, "dtype": args.dtype, "env": env}, paths[1])
    C.print_written(paths, env)
    if failures:
        print("# check failed: " + "; ".join(failures), flush=True)
        return 1
    return 0


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = result["rows"]
    labels = ["x".join(str(s) for s in r["sizes"][1:-1]) for r in rows]
    x = np.arange(len(rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    names = STAGES
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar(x + (i - len(names) / 2 + 0.5) * width, [1e3 * r[name]["warm_s"] for r in rows],
               width, label=name)
        bx.bar(x + (i - len(names) / 2 + 0.5) * width, [r[name]["first_s"] for r in rows],
               width, label=name)
    for a, unit, title in ((ax, "warm median, ms", "warm"), (bx, "first call, s", "first call")):
        a.set_xticks(x, labels, fontsize=8)
        a.set_yscale("log")
        a.set_ylabel(unit)
        a.set_xlabel("hidden widths")
        a.set_title(title, fontsize=9)
        a.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"one compress call by stage, k = {result['config']['order']}, "
                 f"{result['dtype']}, {C.device_label(result['env'])}", fontsize=9)
    C.save_figure(fig, path, rect=(0, 0, 1, 0.94))


if __name__ == "__main__":
    sys.exit(main())
