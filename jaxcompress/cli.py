"""The ``jaxcompress`` command.

``jaxcompress demo`` builds the paper's random ``[2, 1024, 1024, 1024, 1024, 2]`` sigmoid network
(Fig. 2), compresses all four hidden layers for ``k = 0..10`` on the ball of radius 1, prints a
table (k, width, parameters, reduction, sup error, seconds) and writes a PNG of error vs width.
Everything is generated in-process; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _print_env(dtype: str) -> None:
    import jax

    dev = jax.devices()[0]
    print(f"# device: {dev.platform} ({getattr(dev, 'device_kind', dev)}), jax {jax.__version__}, "
          f"dtype {dtype}, matmul precision HIGHEST")


def _demo(args: argparse.Namespace) -> int:
    import jax

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxcompress as jc

    _print_env(args.dtype)
    sizes = [2] + [args.width] * args.depth + [2]
    params = jc.init_mlp(jax.random.PRNGKey(args.seed), sizes, dtype=jnp.dtype(args.dtype))
    domain = jc.Ball(2, args.radius)
    n0 = jc.num_params(params)
    print(f"# teacher {sizes}, {n0:,} parameters, activation {args.activation}, "
          f"radius {args.radius}, backward order, pivoted QR, derivative features (taylor)")
    header = (f"{'k':>3} {'width':>6} {'params':>9} {'reduction':>10} {'sup error':>11} "
              f"{'seconds':>8}")
    print(header)
    rows = []
    key = jax.random.PRNGKey(args.seed + 1)
    for k in range(args.kmin, args.kmax + 1):
        t0 = time.perf_counter()
        small, info = jc.compress(params, activation=args.activation, order=k, radius=args.radius)
        jax.block_until_ready(small)
        secs = time.perf_counter() - t0
        err = float(jc.sup_error(params, small, activation=args.activation, domain=domain,
                                 key=key, n_samples=args.samples))
        width = info.layers[0].width_out
        n1 = jc.num_params(small)
        rows.append({"k": k, "width": width, "params": n1, "reduction": n0 / n1,
                     "sup_error": err, "seconds": secs})
        print(f"{k:>3} {width:>6} {n1:>9,} {n0 / n1:>9.1f}x {err:>11.3e} {secs:>8.2f}",
              flush=True)
    print("# seconds: wall clock of compress() including its compilation for that k")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump({"sizes": sizes, "activation": args.activation, "radius": args.radius,
                   "dtype": args.dtype, "device": str(jax.devices()[0]), "rows": rows}, f,
                  indent=2)
    png = os.path.join(args.out, "demo_error_vs_width.png")
    _plot(rows, png, f"{args.activation} {sizes}, R = {args.radius}, {args.dtype}")
    print(f"# wrote {png} and demo.json")
    return 0


def _plot(rows, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.semilogy([r["width"] for r in rows], [max(r["sup_error"], 1e-17) for r in rows], "o-")
    for r in rows:
        ax.annotate(f"k={r['k']}", (r["width"], max(r["sup_error"], 1e-17)), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("hidden width after compression (= D_k)")
    ax.set_ylabel("sup error on the ball")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jaxcompress",
        description="Width-independent compression of analytic MLPs by derivative matching.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compress the paper's random Fig. 2 network for k = 0..10")
    demo.add_argument("--activation", default="sigmoid")
    demo.add_argument("--radius", type=float, default=1.0)
    demo.add_argument("--width", type=int, default=1024)
    demo.add_argument("--depth", type=int, default=4)
    demo.add_argument("--kmin", type=int, default=0)
    demo.add_argument("--kmax", type=int, default=10)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--samples", type=int, default=8192, help="uniform samples for sup error")
    demo.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    demo.add_argument("--out", default="demo_output", help="folder for the JSON and PNG")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"jaxcompress: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
