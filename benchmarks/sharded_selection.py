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

import json
import sys
import time
from pathlib import Path

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
    p.add_argument("--before", type=Path, default=None, metavar="JSON",
                   help="an earlier result of this script (e.g. before a change) to show beside "
                        "(with --replot: attach it to that result and redraw)")
    p.add_argument("--before-note", default="", help="what --before measured")
    args = p.parse_args(argv)
    return args, dict(QUICK if args.quick else FULL)


def tournament_of(jc, selector):
    """``selector`` with the default sharded form of :class:`jaxcompress.select.Selector` (the
    tournament), for a same-run comparison."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Tournament(jc.select.Selector):
        inner: jc.select.Selector

        @property
        def name(self):
            return f"tournament({self.inner.name})"

        @property
        def rtol(self):
            return self.inner.rtol

        @property
        def baseline(self):
            return self.inner.baseline

        def __call__(self, z, m, *, out_kernel=None, target=None, layer=0):
            return self.inner(z, m, out_kernel=out_kernel, target=target, layer=layer)

    return Tournament(selector)


def _label(row: dict) -> str:
    sizes = row["sizes"]
    hidden = sizes[1:-1]
    body = (f"{hidden[0]}x{len(hidden)}" if len(set(hidden)) == 1 else
            ",".join(map(str, hidden)))
    method = row["method"].replace("derivative_matching/", "DM/").replace("collocation/", "col/")
    return f"[{sizes[0]},{body},{sizes[-1]}]\nk={row['k']} {method}"


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    before = {(tuple(r["sizes"]), r["k"], r["method"]): r
              for r in (result.get("before") or {}).get("rows", [])}
    old = [before.get((tuple(r["sizes"]), r["k"], r["method"])) for r in rows]
    labels = [_label(r) for r in rows]
    n_dev = result["config"]["devices"]
    same = [r.get("tournament") for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.4))
    x = list(range(len(rows)))
    w = 0.27
    axes[0].bar([i - w for i in x], [o["error_ratio"] if o else 0 for o in old], w,
                color="tab:gray", label="tournament (before, separate run)")
    axes[0].bar(x, [t["error_ratio"] if t else 0 for t in same], w, color="tab:orange",
                label="tournament (same run)")
    axes[0].bar([i + w for i in x], [r["error_ratio"] for r in rows], w, color="tab:blue",
                label=result.get("sharded_label", "distributed greedy"))
    axes[0].axhline(1.1, color="k", ls="--", lw=1, label="1.1x (issue 21)")
    axes[0].set_ylabel(f"sup error, {n_dev} devices / one device")
    axes[0].set_xticks(x, labels, fontsize=7, rotation=35, ha="right")
    axes[0].legend(fontsize=7)
    axes[1].bar([i - w for i in x], [r["one"]["warm_s"] for r in rows], w, color="tab:green",
                label="1 device")
    axes[1].bar(x, [t["warm_s"] if t else 0 for t in same], w, color="tab:orange",
                label=f"{n_dev} devices, tournament (same run)")
    axes[1].bar([i + w for i in x], [r["sharded"]["warm_s"] for r in rows], w,
                color="tab:blue",
                label=f"{n_dev} devices, {result.get('sharded_label', 'distributed greedy')}")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("warm compress time (s, median)")
    axes[1].set_xticks(x, labels, fontsize=7, rotation=35, ha="right")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"Sharded vs one-device selection ({result['dtype']}, "
                 f"{C.device_label(result['env'])}, {n_dev} forced devices; shared machine, "
                 f"load {result['env']['load_avg_1_5_15']['start']})", fontsize=9)
    C.save_figure(fig, path)


def attach_before(result: dict, path: Path, note: str) -> None:
    """Copy the comparison entries of an earlier result (``path``) into ``result["before"]``."""
    old = json.loads(Path(path).read_text())
    keys = ("sizes", "k", "method", "error_ratio", "same_kept_sets", "same_pivot_order")
    result["before"] = {
        "file": Path(path).name, "note": note, "load_avg_1_5_15": old["env"]["load_avg_1_5_15"],
        "rows": [{k: r[k] for k in keys} | {"one": {"warm_s": r["one"]["warm_s"]},
                                            "sharded": {"warm_s": r["sharded"]["warm_s"]}}
                 for r in old["rows"]]}


def main(argv=None) -> int:
    args, _ = parse(argv)
    if args.replot is not None and args.before is not None:  # attach, then redraw below
        result = json.loads(args.replot.read_text())
        attach_before(result, args.before, args.before_note)
        C.write_json(args.replot, result)
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
            runs = [("one", teacher, method), ("sharded", sharded, method)]
            if factory is jc.derivative_matching:  # same-run reference: the tournament
                runs.append(("tournament", sharded,
                             factory(k, selector=tournament_of(jc, jc.select.as_selector(sel)))))
            for where, params, method in runs:
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
            if "tournament" in row:
                row["tournament"]["error_ratio"] = row["tournament"]["sup_error"] / e1
                row["tournament"]["same_pivot_order"] = row["tournament"]["kept"] == kept1
            rows.append(row)
            progress(f"{row['sizes_label']} k={k} {row['method']}: error {C.fmt(e1)} (1) vs "
                     f"{C.fmt(row['sharded']['sup_error'])} ({n_dev}), ratio "
                     f"{row['error_ratio']:.3f}; same sets {row['same_kept_sets']}, same order "
                     f"{row['same_pivot_order']}; warm {row['one']['warm_s']:.2f} s vs "
                     f"{row['sharded']['warm_s']:.2f} s" + (
                         "" if "tournament" not in row else
                         f"; tournament ratio {row['tournament']['error_ratio']:.3f}, warm "
                         f"{row['tournament']['warm_s']:.2f} s"))
    C.finish(env, start)
    result = {"benchmark": "sharded_selection", "env": env, "device": env["device"],
              "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
              "config": {**cfg, "devices": n_dev, "domain": "Ball(2, 1.0)",
                         "activation": "sigmoid", "teacher": "jc.init_mlp(PRNGKey(0), sizes)"},
              "sharded_label": "distributed greedy", "rows": rows}
    if args.before is not None:
        attach_before(result, args.before, args.before_note)
    paths = C.save_results(args, env, "sharded_selection", result, plot, suffix=args.tag)
    C.print_written(paths, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
