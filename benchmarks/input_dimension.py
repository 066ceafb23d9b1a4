"""Higher input dimension: features + compression time, memory and error for m = 1, 2, ... inputs.

Derivative matching keeps ``D_k = C(m + k, m)`` neurons per layer and its Taylor pass multiplies
``C(2m + k, 2m)`` coefficient pairs per neuron, so both grow quickly with the input dimension
``m``. For ``[m, w, w, 1]`` sigmoid teachers (``w`` = ``--width``) at a fixed order ``k`` the
script measures, for m = 1 ... ``--max-dim``:

* ``D_k``, the coefficient pairs, the library's memory estimate
  (:func:`jaxcompress.planning.memory_estimate`) and XLA's per-device memory of the compiled
  compression (arguments + temporaries, :meth:`jax.stages.Compiled.memory_analysis`);
* the first call (compile + run) and the warm median of ``jc.compress(teacher,
  jc.derivative_matching(k), ...)``, after checking its answer;
* the sup error on the unit ball (``jc.sup_error``) and the error estimate;

on one device and, when the process sees several devices (``--devices N`` forces ``N`` CPU
devices), with the neurons sharded over all of them (``jc.shard``), recording how many kept
neurons the sharded selection shares with the single-device one. Dimensions whose estimate
exceeds the memory limit are recorded as refused (the library's own check), not run.

Output: ``<out>/input_dimension_<platform>[_quick].{json,png}``: time, memory and error versus m.

Run (from the repository root)::

    python benchmarks/input_dimension.py           # k = 4, w = 2048, m = 1..10, 4 CPU devices
    python benchmarks/input_dimension.py --quick   # seconds
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "input_dimension"
FULL = {"order": 4, "width": 2048, "max_dim": 10, "repeats": 3, "samples": 2048}
QUICK = {"order": 2, "width": 64, "max_dim": 3, "repeats": 2, "samples": 256}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of seconds")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    p.add_argument("--order", type=int, default=None, help=f"k (default {FULL['order']})")
    p.add_argument("--width", type=int, default=None, help=f"w (default {FULL['width']})")
    p.add_argument("--max-dim", type=int, default=None,
                   help=f"largest m (default {FULL['max_dim']})")
    p.add_argument("--devices", type=int, default=4,
                   help="force this many CPU devices for the sharded runs (0: the real ones)")
    p.add_argument("--out", type=Path, default=C.RESULTS, help="results folder")
    p.add_argument("--replot", type=Path, default=None, metavar="JSON")
    args = p.parse_args(argv)
    cfg = C.mode_config(args, FULL, QUICK, ("order", "width", "max_dim"))
    cfg["repeats"] = QUICK["repeats"] if args.quick else FULL["repeats"]
    cfg["samples"] = QUICK["samples"] if args.quick else FULL["samples"]
    return args, cfg


def main(argv=None) -> int:
    start = time.perf_counter()
    args, cfg = parse(argv)
    if args.replot is not None:
        return C.replot(args.replot, plot)
    if args.devices and "device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_"
                                   f"platform_device_count={args.devices}").strip()
    C.configure(args.dtype)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh

    import jaxcompress as jc
    from jaxcompress.driver import run_jit
    from jaxcompress.graph import Network
    from jaxcompress.planning import memory_estimate
    from jaxcompress.sharding import params_placement
    from jaxcompress.taylor import memory_limit

    env = C.environment()
    k, w = cfg["order"], cfg["width"]
    n_dev = jax.device_count()
    mesh = Mesh(np.array(jax.devices()), ("neurons",)) if n_dev > 1 else None
    C.print_header(env, args.dtype, [
        f"teachers [m, {w}, {w}, 1], sigmoid, unit ball, derivative matching at k = {k}, "
        f"m = 1..{cfg['max_dim']}; sharded over {n_dev} devices" if mesh else
        "one device only (sharded runs need several devices)"])
    progress = C.Progress(cfg["max_dim"])
    rows = []
    dtype = jnp.dtype(args.dtype)
    key = jax.random.PRNGKey(1)
    limit = memory_limit()
    for m in range(1, cfg["max_dim"] + 1):
        sizes = [m, w, w, 1]
        domain = jc.Ball(m, 1.0)
        method = jc.derivative_matching(k)
        d_k = jc.taylor.num_monomials(m, k)
        row = {"m": m, "sizes": sizes, "D_k": d_k, "pairs": math.comb(2 * m + k, 2 * m),
               "estimate_bytes": memory_estimate(method, sizes, dtype, domain),
               "limit_bytes": limit}
        if sum(row["estimate_bytes"].values()) > limit:
            row["refused"] = True
            rows.append(row)
            progress(f"m={m}: D_k {d_k}, estimate over the limit: refused")
            continue
        teacher = jax.block_until_ready(jc.init_mlp(jax.random.PRNGKey(m), sizes, dtype=dtype))
        runs = {"one": (teacher, None)}
        if mesh is not None and w % n_dev == 0:
            placed = jc.shard(teacher, mesh)
            runs["sharded"] = (placed, params_placement(placed))
        kept_one = None
        for name, (params, spec) in runs.items():
            with jax.default_matmul_precision(C.PRECISION):
                jax.clear_caches()
                t0 = time.perf_counter()
                small, info = jax.block_until_ready(
                    jc.compress(params, method, activation="sigmoid", domain=domain))
                first = time.perf_counter() - t0
                err = float(jc.sup_error(teacher, [{n: jnp.asarray(np.asarray(v)) for n, v in
                                                    layer.items()} for layer in small],
                                         activation="sigmoid", domain=domain, key=key,
                                         n_samples=cfg["samples"], local_search_steps=20))
                if not math.isfinite(err):
                    print(f"# FAILED: m={m} {name}: non-finite error", flush=True)
                    return 1
                warm, _ = C.median_time(
                    lambda params=params, method=method, domain=domain: jc.compress(
                        params, method, activation="sigmoid", domain=domain), cfg["repeats"])
                stats = run_jit.lower(jax.tree.leaves(params), method, domain,
                                      plan=Network.from_params(params, "sigmoid").plan(),
                                      placement=spec).compile().memory_analysis()
            kept = [set(np.asarray(li.kept).tolist()) for li in info.layers]
            entry = {"first_call_s": first, "warm_median_s": warm, "sup_error": err,
                     "error_estimate": float(np.asarray(info.error_estimate)),
                     "device_bytes": int(stats.argument_size_in_bytes
                                         + stats.temp_size_in_bytes),
                     "widths": jc.layer_sizes(small)[1:-1]}
            if name == "one":
                kept_one = kept
            else:
                entry["devices"] = n_dev
                entry["kept_shared_with_one_device"] = [len(a & b) for a, b in
                                                        zip(kept, kept_one, strict=True)]
            row[name] = entry
        rows.append(row)
        one = row["one"]
        line = (f"m={m}: D_k {d_k:>5}, pairs {row['pairs']:>7,}: one device first "
                f"{one['first_call_s']:.2f} s warm {1e3 * one['warm_median_s']:.1f} ms "
                f"{one['device_bytes'] / 2**20:.1f} MiB error {one['sup_error']:.2e}")
        if "sharded" in row:
            sh = row["sharded"]
            line += (f" | {n_dev} devices warm {1e3 * sh['warm_median_s']:.1f} ms "
                     f"{sh['device_bytes'] / 2**20:.1f} MiB/device error {sh['sup_error']:.2e}"
                     f" shared kept {sh['kept_shared_with_one_device']}")
        progress(line)
    C.finish(env, start)
    result = {"benchmark": NAME, "env": env, "device": env["device"], "dtype": args.dtype,
              "precision": C.PRECISION_NOTE, "quick": args.quick, "config": cfg, "rows": rows}
    stem = f"{NAME}_{env['device']['platform']}" + ("_quick" if args.quick else "")
    paths = (args.out / f"{stem}.json", args.out / f"{stem}.png")
    C.write_json(paths[0], result)
    plot(result, paths[1])
    C.print_written(paths, env)
    return 0


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if not r.get("refused")]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for name, style in (("one", "o-"), ("sharded", "s--")):
        sel = [r for r in rows if name in r]
        if not sel:
            continue
        label = "one device" if name == "one" else f"{sel[0][name]['devices']} devices"
        ms = [r["m"] for r in sel]
        axes[0].semilogy(ms, [r[name]["warm_median_s"] for r in sel], style, label=f"{label}: warm")
        axes[0].semilogy(ms, [r[name]["first_call_s"] for r in sel], style, alpha=0.4,
                         label=f"{label}: first call")
        axes[1].semilogy(ms, [r[name]["device_bytes"] / 2**20 for r in sel], style,
                         label=f"{label}: XLA, per device")
        axes[2].semilogy(ms, [max(r[name]["sup_error"], 1e-17) for r in sel], style, label=label)
    axes[1].semilogy([r["m"] for r in rows],
                     [sum(r["estimate_bytes"].values()) / 2**20 for r in rows], ":", color="k",
                     label="library estimate (one device)")
    titles = ("compress time (s)", "memory (MiB)", "sup error on the unit ball")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel("input dimension m")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    cfg = result["config"]
    fig.suptitle(f"[m, {cfg['width']}, {cfg['width']}, 1] sigmoid, derivative matching k = "
                 f"{cfg['order']} (D_k = C(m + k, m)); {C.device_label(result['env'])}, "
                 f"{result['dtype']}", fontsize=10)
    C.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
