"""A neural image field of a real photograph, compressed: PSNR and inference time vs width.

Beyond the paper: a coordinate network (2-D pixel position in, RGB out) fitted to
``grace_hopper.jpg``, the 600 x 512 photograph that ships with matplotlib
(``matplotlib.cbook.get_sample_data``; nothing is downloaded). Two tanh teachers are trained with
optax Adam on random pixel minibatches (float32):

``fourier``
    a Fourier-feature input map ``x -> [sin(B x), cos(B x)]`` (``B``: 64 x 2, Gaussian entries
    of standard deviation 20, fixed) into ``[128, 256, 256, 3]``. The map is analytic, so for
    compression the domain is ``jc.Parameterization(fourier, Box([-1, -1], [1, 1]))``: the
    effective input dimension stays 2 however many features the map has.
``plain``
    the raw coordinates into ``[2, 256, 256, 256, 3]`` (domain ``Box([-1, -1], [1, 1])``): the
    spectral bias of a plain MLP shows in its PSNR.

Each teacher is compressed (all hidden layers) to the widths ``D_k = C(2 + k, 2)`` by four
methods (``benchmarks/_workloads.py``): derivative matching (the paper), collocation + OMP in
forward order (data-free), the same + ``jc.polish`` (16,384 Sobol points of the domain, 500
L-BFGS steps) and the magnitude-pruning baseline (largest outgoing weights, least squares on
collocation points). Reported per width: PSNR against the photograph (outputs clipped to
[0, 1]) and against the teacher (fidelity), the compression and polish times, and the float32
inference time per million pixels of the whole field (Fourier map included), teacher vs
student, measured on 10^6 random coordinates (median of 7 jitted runs after a warm-up, the
models interleaved; the jitted float32 output is first checked against the float64 reference).

Teachers are cached as ``results/teachers/image_<kind>.npz`` (``--quick``: under ``--out``); the
example images of the figure are saved beside it (``<stem>_images.npz``) so ``--replot`` redraws
them.

Run (from the repository root)::

    python benchmarks/image_field.py            # 18 min on 2 loaded cores, + 5 to train teachers
    python benchmarks/image_field.py --quick --out /tmp/img   # 75 x 64 pixels, tiny networks
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import _workloads as W  # noqa: E402
import teachers as T  # noqa: E402

import jaxcompress as jc  # noqa: E402

NAME = "image_field"
ACTIVATION = "tanh"
FULL = {
    "stride": 1,
    "teachers": {
        "fourier": {"features": 64, "sigma": 20.0, "hidden": [256, 256],
                    "train": W.TrainSpec(steps=3000, lr=1e-3, batch=4096)},
        "plain": {"hidden": [256, 256, 256],
                  "train": W.TrainSpec(steps=1500, lr=3e-3, batch=4096)},
    },
    "orders": [4, 6, 8, 10, 12, 14],
    "polish": {"steps": 500, "points": 16384},
    "timing_pixels": 1_000_000, "repeats": 7,
    # collocation with more points (N = oversample x D_k; the last: as many as polish uses)
    "study": {"orders": [4, 8], "oversample": [64, "polish"]},
}
QUICK = {
    "stride": 8,
    "teachers": {
        "fourier": {"features": 8, "sigma": 5.0, "hidden": [32, 32],
                    "train": W.TrainSpec(steps=200, lr=3e-3, batch=512, warmup=20, chunk=100)},
        "plain": {"hidden": [32, 32],
                  "train": W.TrainSpec(steps=100, lr=3e-3, batch=512, warmup=20, chunk=100)},
    },
    "orders": [3],
    "polish": {"steps": 20, "points": 1024},
    "timing_pixels": 20_000, "repeats": 2,
    "study": {"orders": [3], "oversample": ["polish"]},
}
BOX = ([-1.0, -1.0], [1.0, 1.0])
PAPER = {"figure": "none (beyond the paper)",
         "reports": "nothing: the paper has no coordinate-network experiment",
         "source": "issue 14"}


def load_image(stride: int):
    """``(pixels (H, W, 3) float32 in [0, 1], coords (H W, 2) in [-1, 1]^2, rgb (H W, 3))``."""
    import matplotlib.cbook as cbook
    import matplotlib.pyplot as plt

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        img = plt.imread(f, format="jpg")[::stride, ::stride].astype(np.float32) / 255.0
    h, w, _ = img.shape
    ys, xs = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    coords = np.stack([xs, ys], axis=-1).reshape(-1, 2)
    return img, coords, img.reshape(-1, 3)


def fourier_map(features: int, sigma: float):
    """``u -> [sin(B u), cos(B u)]`` with a fixed Gaussian ``B`` (``features x 2``, seed 0)."""
    b = np.random.default_rng(0).normal(0.0, sigma, (features, 2))

    def fourier(u):
        z = jnp.matmul(u, jnp.asarray(b, u.dtype).T, precision="highest")
        return jnp.concatenate([jnp.sin(z), jnp.cos(z)], axis=-1)

    return fourier


def psnr(mse: float) -> float:
    return 10.0 * math.log10(1.0 / mse) if mse > 0 else math.inf


def points_study(jc, jax, teacher, setup, cfg, pixel_mse, x, y) -> list[dict]:
    """Collocation (OMP, forward) with more points than the library's ``4 D_k``: PSNR and time.

    Tells whether the gap between collocation and collocation + polish is the number of points
    (it is not, on the Fourier field: benchmarks/README.md).
    """
    import math

    out = []
    for k in cfg["study"]["orders"]:
        d_k = jc.taylor.num_monomials(2, k)
        for over in cfg["study"]["oversample"]:
            if over == "polish":
                over = math.ceil(cfg["polish"]["points"] / d_k)
            t0 = time.perf_counter()
            small, _ = jc.compress(teacher, jc.collocation(k, oversample=over),
                                   activation=ACTIVATION, domain=setup["domain"])
            small = jax.block_until_ready(small)
            secs = time.perf_counter() - t0
            mse, _ = pixel_mse(small, x, y, setup["map"])
            out.append({"k": k, "width": d_k, "oversample": over, "points": over * d_k,
                        "psnr": psnr(float(mse)), "seconds": secs})
            print(f"  points study: width {d_k:>3}, collocation on {over * d_k:>6} points: "
                  f"PSNR {out[-1]['psnr']:.2f} dB ({secs:.1f} s)", flush=True)
    return out


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--teachers-dir", type=Path, default=None,
                   help="teacher cache (default benchmarks/results/teachers; quick: "
                        "<out>/teachers)")
    args = p.parse_args(argv)
    return args, dict(QUICK if args.quick else FULL)


def images_path(png: Path) -> Path:
    """The example images of a run: ``<stem>_images.npz`` beside its PNG (uint8 RGB arrays)."""
    return png.with_name(png.stem + "_images.npz")


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(result["teachers"])
    images = None
    if images_path(path).exists():
        with np.load(images_path(path)) as f:
            images = {str(t): f[f"image_{i}"] for i, t in enumerate(f["titles"])}
    fig = plt.figure(figsize=(16, 9.0))
    grid = fig.add_gridspec(2, 4, height_ratios=[1, 1.05])
    method_handles = []
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(grid[0, i])
        t = result["teachers"][kind]
        for name in W.METHODS:
            sel = [r for r in result["rows"] if r["teacher"] == kind and r["method"] == name]
            line, = ax.plot([r["width"] for r in sel], [r["psnr"] for r in sel], "o-",
                            color=W.COLORS[name])
            if i == 0:
                method_handles.append((line, W.LABELS[name]))
        ax.axhline(t["psnr"], color="k", ls="--", lw=1,
                   label=f"teacher ({t['psnr']:.2f} dB, width {t['sizes'][1]})")
        ax.set_xlabel("hidden width (every hidden layer)")
        ax.set_ylabel("PSNR vs the photograph [dB]")
        ax.set_title(f"{kind} teacher {t['sizes']}", fontsize=10)
        ax.grid(True, alpha=0.3)
        lo = min(r["psnr"] for r in result["rows"] if r["teacher"] == kind)
        ax.set_ylim(lo - 0.5, t["psnr"] + 1.5)
        ax.legend(fontsize=7, loc="lower right")
    fig.legend([h for h, _ in method_handles], [lab for _, lab in method_handles], fontsize=8,
               loc="upper center", ncol=4, bbox_to_anchor=(0.5, 0.965))
    ax = fig.add_subplot(grid[0, 2])
    for i, kind in enumerate(kinds):
        tim = result["timing"][kind]
        ax.semilogy(tim["widths"], tim["student_ms_per_mpixel"], "o-", color=f"C{i}",
                    label=f"{kind}: students")
        ax.axhline(tim["teacher_ms_per_mpixel"], color=f"C{i}", ls="--", lw=1,
                   label=f"{kind}: teacher")
        if "map_ms_per_mpixel" in tim:
            ax.axhline(tim["map_ms_per_mpixel"], color=f"C{i}", ls=":", lw=1,
                       label=f"{kind}: the input map alone")
    ax.set_xlabel("hidden width")
    ax.set_ylabel("float32 inference [ms per 10^6 pixels]")
    ax.set_title("inference time (jit, median)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax = fig.add_subplot(grid[0, 3])
    kind = kinds[0]
    for name in W.METHODS:
        sel = [r for r in result["rows"] if r["teacher"] == kind and r["method"] == name]
        ax.semilogy([r["width"] for r in sel], [r["rms_vs_teacher"] for r in sel], "o-",
                    color=W.COLORS[name], label=name)
    ax.set_xlabel("hidden width")
    ax.set_ylabel("RMS |F - F~| over the pixels")
    ax.set_title(f"fidelity to the {kind} teacher", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if images:
        for j, (title, img) in enumerate(images.items()):
            ax = fig.add_subplot(grid[1, j])
            ax.imshow(img)
            ax.set_title(title, fontsize=9)
            ax.axis("off")
    env = result["env"]
    fig.suptitle(f"Neural image field of grace_hopper.jpg ({result['image_shape'][0]} x "
                 f"{result['image_shape'][1]}), tanh, compression in {result['dtype']}; "
                 f"{C.device_label(env)}; load avg {env['load_avg_1_5_15']['start']}",
                 fontsize=9)
    C.save_figure(fig, path, rect=(0, 0, 1, 0.95))


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun  # --replot
    start, args, cfg, env = begun
    img, coords, rgb = load_image(cfg["stride"])
    C.print_header(env, args.dtype, [
        f"grace_hopper.jpg at stride {cfg['stride']}: {img.shape[0]} x {img.shape[1]} pixels; "
        f"activation {ACTIVATION}; training float32, compression and PSNR in {args.dtype}, "
        "inference timing float32",
        f"orders {cfg['orders']} (widths "
        f"{[jc.taylor.num_monomials(2, k) for k in cfg['orders']]}); polish {cfg['polish']}"])
    cache = args.teachers_dir or (args.out / "teachers" if args.quick else T.DEFAULT_CACHE)
    suffix = "_quick" if args.quick else ""
    dtype = jnp.dtype(args.dtype)
    box = jc.Box(*BOX)
    x_all = jnp.asarray(coords, jnp.float32)
    y_all = jnp.asarray(rgb, jnp.float32)

    def sample(key, n):
        idx = jax.random.randint(key, (n,), 0, x_all.shape[0])
        return x_all[idx], y_all[idx]

    setups = {}
    for kind, tcfg in cfg["teachers"].items():
        if kind == "fourier":
            fmap = fourier_map(tcfg["features"], tcfg["sigma"])
            sizes = [2 * tcfg["features"], *tcfg["hidden"], 3]
            domain = jc.Parameterization(fmap, box)
        else:
            fmap = None
            sizes = [2, *tcfg["hidden"], 3]
            domain = box
        setups[kind] = {"map": fmap, "sizes": sizes, "domain": domain}

    def field(params, x, fmap):
        return jc.apply(params, x if fmap is None else fmap(x), activation=ACTIVATION)

    @functools.partial(jax.jit, static_argnames=("fmap",))
    def pixel_mse(params, x, y, fmap):
        pred = field(params, x, fmap)
        return jnp.mean((jnp.clip(pred, 0, 1) - y) ** 2), pred

    result_teachers, rows, timing, images, study = {}, [], {}, {}, {}
    x64, y64 = jnp.asarray(coords, dtype), jnp.asarray(rgb, dtype)
    for kind, tcfg in cfg["teachers"].items():
        s = setups[kind]
        spec = tcfg["train"]
        config = {"kind": kind, "stride": cfg["stride"], "sizes": s["sizes"],
                  "train": dataclasses.asdict(spec),
                  **({"features": tcfg["features"], "sigma": tcfg["sigma"]}
                     if kind == "fourier" else {})}
        print(f"\n## {kind} teacher {s['sizes']}", flush=True)

        def make(s=s, spec=spec):
            params = jc.init_mlp(jax.random.PRNGKey(spec.seed), s["sizes"], dtype=jnp.float32)

            def loss(net, batch, fmap=s["map"]):
                x, y = batch
                return jnp.mean((field(net, x, fmap) - y) ** 2)

            def metric(net, fmap=s["map"]):
                return f"PSNR {psnr(float(pixel_mse(net, x_all, y_all, fmap)[0])):.2f} dB"

            return W.train(params, loss, sample, spec, metric=metric,
                           log=lambda m: print(m, flush=True))

        params32, record = W.load_or_train(cache / f"image_{kind}{suffix}.npz", config, make,
                                           log=lambda m: print(m, flush=True))
        teacher = [{k: jnp.asarray(v, dtype) for k, v in layer.items()} for layer in params32]
        t_mse, t_pred = pixel_mse(teacher, x64, y64, s["map"])
        t_psnr = psnr(float(t_mse))
        result_teachers[kind] = {"sizes": s["sizes"], "num_params": jc.num_params(teacher),
                                 "psnr": t_psnr, "train_seconds": record.get("train_seconds"),
                                 "config": config}
        print(f"  teacher PSNR {t_psnr:.2f} dB ({jc.num_params(teacher):,} parameters)",
              flush=True)
        if kind == "fourier":
            images["photograph"] = img
            images[f"teacher, width {s['sizes'][1]} ({t_psnr:.1f} dB)"] = np.asarray(
                jnp.clip(t_pred, 0, 1)).reshape(img.shape)

        progress = C.Progress(len(cfg["orders"]))
        polished = {}
        for k in cfg["orders"]:
            with jax.default_matmul_precision(C.PRECISION):
                res = W.compress_all(jc, teacher, activation=ACTIVATION, order=k,
                                     domain=s["domain"], polish_kwargs=cfg["polish"])
            width = jc.taylor.num_monomials(2, k)
            line = []
            for name, r in res.items():
                mse, pred = pixel_mse(r["params"], x64, y64, s["map"])
                rms_t = float(jnp.sqrt(jnp.mean((pred - t_pred) ** 2)))
                rows.append({"teacher": kind, "k": k, "width": width, "method": name,
                             "sizes": jc.layer_sizes(r["params"]),
                             "num_params": jc.num_params(r["params"]), "psnr": psnr(float(mse)),
                             "rms_vs_teacher": rms_t, "seconds": r["seconds"],
                             "compress_seconds": r["compress_seconds"],
                             "polish": r.get("polish")})
                line.append(f"{name} {rows[-1]['psnr']:.2f}")
                if name == "collocation+polish":
                    polished[width] = r["params"]
                if kind == "fourier" and k == cfg["orders"][len(cfg["orders"]) // 2] and name in (
                        "collocation+polish", "derivative"):
                    images[f"{name}, width {width} ({rows[-1]['psnr']:.1f} dB)"] = np.asarray(
                        jnp.clip(pred, 0, 1)).reshape(img.shape)
            progress(f"{kind} width {width:>3}: PSNR dB  " + ", ".join(line) + "  (polish "
                     f"{res['collocation+polish']['seconds']:.1f} s)")

        if kind == "fourier":
            study[kind] = points_study(jc, jax, teacher, s, cfg, pixel_mse, x64, y64)

        # inference: the whole field in float32, teacher vs the polished students
        xt = jax.random.uniform(jax.random.PRNGKey(7), (cfg["timing_pixels"], 2), jnp.float32,
                                -1.0, 1.0)
        run = jax.jit(functools.partial(field, fmap=s["map"]))
        to32 = functools.partial(jax.tree_util.tree_map, lambda a: jnp.asarray(a, jnp.float32))
        per_mpix = 1e6 / cfg["timing_pixels"] * 1e3   # seconds -> ms per 10^6 pixels
        check = xt[:1000]
        fns = {}
        if s["map"] is not None:
            # the input map alone: a floor no hidden-layer compression can go below
            fns["map"] = jax.jit(s["map"])
        for label, params in [("teacher", teacher), *polished.items()]:
            ref = field(params, check.astype(dtype), s["map"])
            got = run(to32(params), check)
            err = float(jnp.max(jnp.abs(got - ref)))
            if not err < 1e-3:
                print(f"# FAILED: float32 field of {label} differs from float64 by {err:.2e}")
                return 1
            fns[label] = functools.partial(run, to32(params))
        measured = W.inference_seconds(fns, xt, cfg["repeats"])
        ms = {label: t["median"] * per_mpix for label, t in measured.items()}
        widths = list(polished)
        timing[kind] = {
            "widths": widths, "teacher_ms_per_mpixel": ms["teacher"],
            "student_ms_per_mpixel": [ms[w] for w in widths],
            "speedup": [ms["teacher"] / ms[w] for w in widths],
            "times_s": {str(label): t["times"] for label, t in measured.items()}}
        if "map" in ms:
            timing[kind]["map_ms_per_mpixel"] = ms["map"]
        map_ms = timing[kind].get("map_ms_per_mpixel")
        print("  inference (float32, ms per 10^6 pixels): "
              + ("" if map_ms is None else f"input map alone {map_ms:.1f}; ")
              + "teacher "
              f"{timing[kind]['teacher_ms_per_mpixel']:.1f}; students " + ", ".join(
                  f"{w}: {t:.1f} ({x:.1f}x)" for w, t, x in zip(
                      timing[kind]["widths"], timing[kind]["student_ms_per_mpixel"],
                      timing[kind]["speedup"], strict=True)), flush=True)

    C.finish(env, start)
    result = {
        "benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
        "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
        "config": {**cfg, "teachers": {k: {**v, "train": dataclasses.asdict(v["train"])}
                                       for k, v in cfg["teachers"].items()},
                   "activation": ACTIVATION, "box": BOX, "methods": {
                       n: {"method": base, "polish": pol}
                       for n, (base, pol) in W.METHODS.items()},
                   "psnr": "10 log10(1 / MSE) over every pixel, outputs clipped to [0, 1]",
                   "timing": "float32, jit, median after a warm-up; ms per 10^6 pixels"},
        "image_shape": list(img.shape), "teachers": result_teachers, "rows": rows,
        "timing": timing, "points_study": study, "checks": {"passed": True},
    }
    json_path = args.out / f"{C.result_stem(NAME, env, args.dtype, args.quick)}.json"
    C.write_json(json_path, result)
    png = json_path.with_suffix(".png")
    np.savez_compressed(images_path(png), titles=np.array(list(images)), **{
        f"image_{i}": np.round(255 * np.clip(v, 0, 1)).astype(np.uint8)
        for i, v in enumerate(images.values())})
    plot(result, png)
    print("\n## PSNR [dB] by width")
    for kind in cfg["teachers"]:
        widths = sorted({r["width"] for r in rows if r["teacher"] == kind})
        print(f"{kind} (teacher {result_teachers[kind]['psnr']:.2f} dB)")
        print(f"  {'method':<20}" + "".join(f"{w:>8}" for w in widths))
        for name in W.METHODS:
            vals = [next(r["psnr"] for r in rows if r["teacher"] == kind and r["method"] == name
                         and r["width"] == w) for w in widths]
            print(f"  {name:<20}" + "".join(f"{v:8.2f}" for v in vals))
    C.print_written([json_path, png, images_path(png)], env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
