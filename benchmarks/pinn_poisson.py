"""A physics-informed network, compressed: error and PDE residual vs width.

Beyond the paper. A tanh MLP ``[2, 128, 128, 128, 1]`` is trained with optax Adam (float32) to
solve the Poisson problem on the unit square

.. math::
   -\\Delta u = 2 \\pi^2 \\sin(\\pi x) \\sin(\\pi y) \\text{ in } (0, 1)^2, \\qquad
   u = 0 \\text{ on the boundary},

whose exact solution is ``u*(x, y) = sin(pi x) sin(pi y)``: the loss is the mean squared PDE
residual on 1024 uniform interior points plus 100 x the mean squared boundary value on 256
boundary points, both resampled every step, the Laplacian by JAX autodiff (forward-over-reverse).

The trained network is compressed (all hidden layers, domain ``Box([0, 0], [1, 1])``) to the
widths ``D_k = C(2 + k, 2)`` by the four methods of ``benchmarks/_workloads.py``: derivative
matching at the centre (the paper), collocation + OMP in forward order (data-free), the same +
``jc.polish`` (1000 L-BFGS steps on 4096 Sobol points of the square) and the magnitude-pruning
baseline. For every student, on a 101 x 101 grid of the square (float64): the relative L2 and
the max error against the exact solution, the RMS PDE residual ``-Delta u~ - f`` on the interior
grid points (second derivatives by autodiff of the compressed network) and the RMS boundary
value; the same for the teacher.

The teacher is cached as ``results/teachers/pinn_poisson.npz`` (``--quick``: under ``--out``).

Run (from the repository root)::

    python benchmarks/pinn_poisson.py          # 7 min on 2 loaded cores (3.5 to train the teacher)
    python benchmarks/pinn_poisson.py --quick --out /tmp/pinn   # tiny network, a smoke test
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import _workloads as W  # noqa: E402
import teachers as T  # noqa: E402

import jaxcompress as jc  # noqa: E402

NAME = "pinn_poisson"
ACTIVATION = "tanh"
BOUNDARY_WEIGHT = 100.0
FULL = {"sizes": [2, 128, 128, 128, 1],
        "train": W.TrainSpec(steps=6000, lr=1e-3, batch=1024, final=1e-3, warmup=200),
        "boundary_batch": 256, "orders": [2, 3, 4, 5, 6, 7, 8], "grid": 101,
        "polish": {"steps": 1000}}
QUICK = {"sizes": [2, 24, 24, 1],
         "train": W.TrainSpec(steps=200, lr=3e-3, batch=256, warmup=20, chunk=100),
         "boundary_batch": 64, "orders": [3], "grid": 21, "polish": {"steps": 20}}
PAPER = {"figure": "none (beyond the paper)",
         "reports": "nothing: the paper has no physics-informed experiment",
         "source": "issue 14"}


def exact(x):
    """``u*(x, y) = sin(pi x) sin(pi y)`` on ``(..., 2)`` inputs."""
    return jnp.sin(jnp.pi * x[..., 0]) * jnp.sin(jnp.pi * x[..., 1])


def source(x):
    """``f = -Delta u* = 2 pi^2 sin(pi x) sin(pi y)``."""
    return 2.0 * jnp.pi**2 * exact(x)


def laplacian(params, x):
    """``Delta u`` of the network ``u = jc.apply(params, .)[..., 0]`` at ``x`` ``(n, 2)``:
    the trace of the Hessian, one forward-over-reverse product per coordinate."""

    def u(p):
        return jc.apply(params, p, activation=ACTIVATION)[0]

    grad = jax.grad(u)

    def lap(p):
        eye = jnp.eye(2, dtype=p.dtype)
        return sum(jax.jvp(grad, (p,), (eye[i],))[1][i] for i in range(2))

    return jax.vmap(lap)(x)


def boundary_points(key, n, dtype):
    """``n`` uniform points on the boundary of the unit square."""
    ks, kt = jax.random.split(key)
    side = jax.random.randint(ks, (n,), 0, 4)
    t = jax.random.uniform(kt, (n,), dtype)
    zero, one = jnp.zeros_like(t), jnp.ones_like(t)
    x = jnp.select([side == 0, side == 1, side == 2], [t, one, t], zero)
    y = jnp.select([side == 0, side == 1, side == 2], [zero, t, one], t)
    return jnp.stack([x, y], axis=-1)


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--teachers-dir", type=Path, default=None,
                   help="teacher cache (default benchmarks/results/teachers; quick: "
                        "<out>/teachers)")
    args = p.parse_args(argv)
    return args, dict(QUICK if args.quick else FULL)


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = result["teacher"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.0))
    for i, (ax, key, label) in enumerate(zip(
            axes, ("rel_l2", "max_error", "residual_rms"),
            ("relative L2 error vs the exact solution", "max |u~ - u*| on the grid",
             "RMS PDE residual |-Delta u~ - f| (interior grid)"), strict=True)):
        for name in W.METHODS:
            sel = [r for r in result["rows"] if r["method"] == name]
            ax.semilogy([r["width"] for r in sel], [r[key] for r in sel], "o-",
                        color=W.COLORS[name], label=W.LABELS[name] if i == 0 else None)
        ax.axhline(t[key], color="k", ls="--", lw=1,
                   label=f"teacher (width {t['sizes'][1]})" if i == 0 else None)
        ax.set_xlabel("hidden width (every hidden layer)")
        ax.set_title(f"{label}\n(teacher: {t[key]:.2e})", fontsize=10)
        ax.set_xticks(sorted({r["width"] for r in result["rows"]}))
        ax.grid(True, which="both", alpha=0.3)
    fig.legend(fontsize=8, loc="upper center", ncol=5, bbox_to_anchor=(0.5, 0.94))
    env = result["env"]
    fig.suptitle(f"PINN for -Delta u = 2 pi^2 sin(pi x) sin(pi y) on the unit square, teacher "
                 f"{t['sizes']} tanh; compression in {result['dtype']}; {C.device_label(env)}; "
                 f"load avg {env['load_avg_1_5_15']['start']}", fontsize=9)
    C.save_figure(fig, path, rect=(0, 0, 1, 0.9))


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun  # --replot
    start, args, cfg, env = begun
    widths = [jc.taylor.num_monomials(2, k) for k in cfg["orders"]]
    C.print_header(env, args.dtype, [
        f"Poisson on the unit square, exact u = sin(pi x) sin(pi y); teacher {cfg['sizes']} "
        f"{ACTIVATION}, trained in float32 ({cfg['train'].steps} Adam steps); compression and "
        f"evaluation in {args.dtype} on a {cfg['grid']} x {cfg['grid']} grid",
        f"widths {widths}; polish {cfg['polish']}"])
    cache = args.teachers_dir or (args.out / "teachers" if args.quick else T.DEFAULT_CACHE)
    dtype = jnp.dtype(args.dtype)
    box = jc.Box([0.0, 0.0], [1.0, 1.0])

    def loss(params, batch):
        xi, xb = batch
        res = -laplacian(params, xi) - source(xi)
        ub = jc.apply(params, xb, activation=ACTIVATION)[:, 0]
        return jnp.mean(res**2) + BOUNDARY_WEIGHT * jnp.mean(ub**2)

    def sample(key, n):
        ki, kb = jax.random.split(key)
        xi = jax.random.uniform(ki, (n, 2), jnp.float32)
        return xi, boundary_points(kb, cfg["boundary_batch"], jnp.float32)

    g = np.linspace(0.0, 1.0, cfg["grid"])
    grid = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
    on_edge = np.any((grid == 0.0) | (grid == 1.0), axis=1)
    x_grid = jnp.asarray(grid, dtype)
    x_int, x_edge = x_grid[~on_edge], x_grid[on_edge]

    @jax.jit
    def _metrics(params, x_grid, x_int, x_edge):
        u = jc.apply(params, x_grid, activation=ACTIVATION)[:, 0]
        ue = exact(x_grid)
        res = -laplacian(params, x_int) - source(x_int)
        ub = jc.apply(params, x_edge, activation=ACTIVATION)[:, 0]
        return {"rel_l2": jnp.linalg.norm(u - ue) / jnp.linalg.norm(ue),
                "max_error": jnp.max(jnp.abs(u - ue)),
                "residual_rms": jnp.sqrt(jnp.mean(res**2)),
                "boundary_rms": jnp.sqrt(jnp.mean(ub**2))}

    def metrics(params):
        # the grids are arguments, not constants of the jitted function (no constant folding)
        return _metrics(params, x_grid, x_int, x_edge)

    def floats(m):
        return {k: float(v) for k, v in m.items()}

    config = {"sizes": cfg["sizes"], "train": dataclasses.asdict(cfg["train"]),
              "boundary_batch": cfg["boundary_batch"], "boundary_weight": BOUNDARY_WEIGHT,
              "activation": ACTIVATION}
    print(f"\n## teacher {cfg['sizes']}", flush=True)

    def make():
        params = jc.init_mlp(jax.random.PRNGKey(cfg["train"].seed), cfg["sizes"],
                             dtype=jnp.float32)

        def metric(net):
            m = floats(metrics([{k: v.astype(dtype) for k, v in layer.items()}
                                for layer in net]))
            return f"rel. L2 error {m['rel_l2']:.2e}, residual {m['residual_rms']:.2e}"

        return W.train(params, loss, sample, cfg["train"], metric=metric,
                       log=lambda m: print(m, flush=True))

    suffix = "_quick" if args.quick else ""
    params32, record = W.load_or_train(cache / f"pinn_poisson{suffix}.npz", config, make,
                                       log=lambda m: print(m, flush=True))
    teacher = [{k: jnp.asarray(v, dtype) for k, v in layer.items()} for layer in params32]
    t_metrics = floats(metrics(teacher))
    print("  teacher: " + ", ".join(f"{k} {v:.3e}" for k, v in t_metrics.items()), flush=True)
    if not t_metrics["rel_l2"] < 0.5:
        print(f"# FAILED: the teacher does not solve the PDE (relative L2 error "
              f"{t_metrics['rel_l2']:.2e})")
        return 1

    rows = []
    progress = C.Progress(len(cfg["orders"]))
    for k, w in zip(cfg["orders"], widths, strict=True):
        with jax.default_matmul_precision(C.PRECISION):
            res = W.compress_all(jc, teacher, activation=ACTIVATION, order=k, domain=box,
                                 polish_kwargs=cfg["polish"])
        line = []
        for name, r in res.items():
            m = floats(metrics(r["params"]))
            rows.append({"k": k, "width": w, "method": name, **m,
                         "sizes": jc.layer_sizes(r["params"]),
                         "num_params": jc.num_params(r["params"]), "seconds": r["seconds"],
                         "compress_seconds": r["compress_seconds"], "polish": r.get("polish")})
            line.append(f"{name} {m['rel_l2']:.1e}/{m['residual_rms']:.1e}")
        progress(f"width {w:>3}: rel. L2 / residual  " + ", ".join(line))

    C.finish(env, start)
    result = {
        "benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
        "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
        "config": {**cfg, "train": dataclasses.asdict(cfg["train"]), "activation": ACTIVATION,
                   "boundary_weight": BOUNDARY_WEIGHT, "domain": "Box([0, 0], [1, 1])",
                   "methods": {n: {"method": base, "polish": pol}
                               for n, (base, pol) in W.METHODS.items()}},
        "teacher": {"sizes": cfg["sizes"], "num_params": jc.num_params(teacher),
                    "train_seconds": record.get("train_seconds"), **t_metrics},
        "widths": widths, "rows": rows, "checks": {"passed": True},
    }
    paths = C.save_results(args, env, NAME, result, plot)
    print(f"\n## against the exact solution (teacher: rel. L2 {t_metrics['rel_l2']:.2e}, "
          f"residual {t_metrics['residual_rms']:.2e})")
    for key in ("rel_l2", "residual_rms"):
        print(f"{key:<20}" + "".join(f"{w:>9}" for w in widths))
        for name in W.METHODS:
            vals = [next(r[key] for r in rows if r["method"] == name and r["width"] == w)
                    for w in widths]
            print(f"  {name:<18}" + "".join(f"{v:9.1e}" for v in vals))
    C.print_written(paths, env)
    return 0 if all(math.isfinite(r["rel_l2"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
