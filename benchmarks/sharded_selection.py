"""Sharded selection against one device: kept neurons, error ratio and time (issue 21, item 3).

Compresses each teacher once on one device and once with its hidden neurons split over the
devices of a mesh (``jc.compress(jc.shard(params, mesh))``), and records per case:

* whether the kept neurons of every layer are the same set, and in the same pivot order;
* the sup error of both compressed networks against the teacher on the ball of radius R = 1
  (``jc.sup_error``: uniform samples plus projected local searches) and their ratio
  sharded / one-device (issue 21 asks for <= 1.1x);
* the wall time of both: the first call (compilation included) and the median of the warm calls.

Cases (float64 by default): ``[2, 2048, 2048, 1]`` at ``k = 6`` (the issue's measurement) and the
Fig 2-like ``[2, 256 x 4, 2]`` at ``k = 2, 5, 10``, derivative matching with the pivoted-QR
selector (``--selectors`` adds others, ``--collocation`` the collocation method with its default
OMP selector). On a CPU host run it with forced devices::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/sharded_selection.py

Writes ``benchmarks/results/sharded_selection_<platform>_<dtype>.json`` and ``.png``.
"""

from __future__ import annotations

import sys
import time

import _common as C

FULL = {"cases": [([2, 2048, 2048, 1], 6), ([2, 256, 256, 256, 256, 2], 2),
                  ([2, 256, 256, 256, 256, 2], 5), ([2, 256, 256, 256, 256, 2], 10)],
        "samples": 4096, "steps": 20, "starts": 4, "repeats": 3}
QUICK = {"cases": [([2, 64, 64, 1], 4), ([2, 32, 32, 32, 2], 3)],
         "samples": 512, "steps": 5, "starts": 2, "repeats": 2}


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--selectors", default="pivoted_qr",
                   help="comma-separated selector names for derivative matching "
                        "(default pivoted_qr)")
    p.add_argument("--collocation", action="store_true",
                   help="also run jc.collocation (its default OMP selector, forward order)")
    p.add_argument("--devices", type=int, default=None,
                   help="devices in the mesh (default: all)")
    p.add_argument("--tag", default="", help="suffix of the result files (e.g. _before)")
    args = p.parse_args(argv)
    return args, dict(QUICK if args.quick else FULL)


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    labels = [f"{r['sizes_label']}\nk={r['k']} {r['method']}" for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    x = range(len(rows))
    axes[0].bar(x, [r["error_ratio"] for r in rows], color="tab:blue")
    axes[0].axhline(1.1, color="k", ls="--", lw=1, label="1.1x (issue 21)")
    axes[0].set_ylabel("sup error, sharded / one device")
    axes[0].set_xticks(list(x), labels, fontsize=7)
    axes[0].legend()
    w = 0.4
    axes[1].bar([i - w / 2 for i in x], [r["one"]["warm_s"] for r in rows], w, label="1 device")
    axes[1].bar([i + w / 2 for i in x], [r["sharded"]["warm_s"] for r in rows], w,
                label=f"{result['config']['devices']} devices")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("warm compress time (s, median)")
    axes[1].set_xticks(list(x), labels, fontsize=7)
    axes[1].legend()
    fig.suptitle(f"Sharded vs one-device selection ({result['dtype']}, "
                 f"{C.device_label(result['env'])})", fontsize=9)
    C.save_figure(fig, path)


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun
    start, args, cfg, env = begun
    import jax
    import numpy as np
    from jax.sharding import Mesh

    import jaxcompress as jc

    n_dev = args.devices or jax.device_count()
    mesh = Mesh(np.array(jax.devices()[:n_dev]), ("neurons",))
    C.print_header(env, args.dtype, [f"mesh: {n_dev} devices on axis 'neurons'"])
    methods = [(name, jc.derivative_matching) for name in args.selectors.split(",")]
    if args.collocation:
        methods.append(("omp", jc.collocation))
    domain = jc.Ball(2, 1.0)
    todo = [(sizes, k, m) for sizes, k in cfg["cases"] for m in methods]
    progress = C.Progress(len(todo))
    rows = []
    with jax.default_matmul_precision(C.PRECISION):
        for sizes, k, (sel, factory) in todo:
            teacher = jc.init_mlp(jax.random.PRNGKey(0), sizes)
            sharded = jc.shard(teacher, mesh)
            method = factory(k, selector=sel)
            row = {"sizes": sizes, "k": k, "method": f"{factory.__name__}/{sel}",
                   "sizes_label": "[" + ", ".join(map(str, sizes)) + "]"}
            out = {}
            for where, params in (("one", teacher), ("sharded", sharded)):
                def run(params=params, method=method):
                    return jc.compress(params, method, activation="sigmoid", domain=domain)
                t0 = time.perf_counter()
                small, info = jax.block_until_ready(run())
                first = time.perf_counter() - t0
                warm, times = C.median_time(run, cfg["repeats"])
                err, note = C.sup_error(jc, teacher, small, activation="sigmoid", domain=domain,
                                        key=jax.random.PRNGKey(1), n_samples=cfg["samples"],
                                        local_search_steps=cfg["steps"], n_starts=cfg["starts"])
                out[where] = (small, info)
                row[where] = {"first_call_s": first, "warm_s": warm, "times_s": times,
                              "sup_error": err, "sup_error_note": note,
                              "widths": jc.layer_sizes(small)[1:-1],
                              "kept": [np.asarray(li.kept).tolist() for li in info.layers]}
            kept1, keptn = row["one"]["kept"], row["sharded"]["kept"]
            row["same_kept_sets"] = all(set(a) == set(b) for a, b in zip(kept1, keptn, strict=True))
            row["same_pivot_order"] = kept1 == keptn
            row["max_kernel_diff"] = max(
                float(np.max(np.abs(np.asarray(a["kernel"]) - np.asarray(b["kernel"]))))
                for a, b in zip(out["one"][0], out["sharded"][0], strict=True))
            e1 = row["one"]["sup_error"]
            row["error_ratio"] = row["sharded"]["sup_error"] / e1 if e1 > 0 else None
            rows.append(row)
            progress(f"{row['sizes_label']} k={k} {row['method']}: error {C.fmt(e1)} (1) vs "
                     f"{C.fmt(row['sharded']['sup_error'])} ({n_dev}), ratio "
                     f"{row['error_ratio']:.3f}; same sets {row['same_kept_sets']}, same order "
                     f"{row['same_pivot_order']}; warm {row['one']['warm_s']:.2f} s vs "
                     f"{row['sharded']['warm_s']:.2f} s")
    C.finish(env, start)
    result = {"benchmark": "sharded_selection", "env": env, "device": env["device"],
              "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
              "config": {**cfg, "devices": n_dev, "domain": "Ball(2, 1.0)",
                         "activation": "sigmoid", "teacher": "jc.init_mlp(PRNGKey(0), sizes)"},
              "rows": rows}
    paths = C.save_results(args, env, "sharded_selection", result, plot, suffix=args.tag)
    C.print_written(paths, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
