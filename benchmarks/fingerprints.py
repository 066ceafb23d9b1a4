"""Fingerprints of compressions, to show that a refactor changes no number.

For the configurations of the paper's figures (Fig 1: ``[3, 2048, 2048]``, sigmoid and GELU,
k in {0, 3, 6, 9}, R in {0.5, 1, 2, 4}; Fig 2: ``[2, 1024 x 4, 2]``, both layer orders, k in
{0, 2, 5, 10}, R in {0.3, 0.5, 1, 2}; both in float32 and float64; Fig 3: the five cached Table 1
teachers, k = 0..10) and nine methods on the seed-0 Table 1 teacher at k in {2, 5, 8}, it
records every kept index, every rank and the compressed network's first 8 outputs at 16 fixed
points, in one ``.npz``. ``--compare A B`` reports, per group, whether kept indices and ranks are
identical and the largest relative difference of the outputs.

``--api old`` drives the keyword API that preceded method objects
(``jc.compress(params, activation=, order=, radius=, features=, selector=, ...)``) so that a
checkout from before the refactor (commit e1ddbf9) can be fingerprinted with
``PYTHONPATH=<old checkout> python benchmarks/fingerprints.py OUT.npz --api old``.

Run (from the repository root; about 30 min on 2 CPU cores)::

    python benchmarks/fingerprints.py /tmp/after.npz
    python benchmarks/fingerprints.py --compare /tmp/before.npz /tmp/after.npz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

OLD_METHODS = {
    "derivative+maxvol": {"features": "taylor", "selector": "maxvol"},
    "derivative+omp": {"features": "taylor", "selector": "omp"},
    "taylor_multi": {"features": "taylor_multi", "selector": "pivoted_qr"},
    "collocation": {"features": "collocation", "selector": "pivoted_qr"},
    "collocation+omp/fwd": {"features": "collocation", "selector": "omp",
                            "layer_order": "forward"},
    "data+omp/fwd": {"features": "data", "selector": "omp", "layer_order": "forward"},
    "weight_norm+lstsq": {"features": "collocation", "selector": "weight_norm"},
    "random+lstsq": {"features": "collocation", "selector": "random"},
    "bottleneck+colloc": {"features": "collocation", "coordinates": "bottleneck"},
}


def new_methods(jc, jax, data):
    return {
        "derivative+maxvol": lambda k: jc.derivative_matching(k, selector=jc.MaxVol()),
        "derivative+omp": lambda k: jc.derivative_matching(k, selector=jc.OMP()),
        "taylor_multi": lambda k: jc.derivative_matching(k, centers="auto"),
        "collocation": lambda k: jc.collocation(k, selector=jc.PivotedQR(),
                                                layer_order="backward"),
        "collocation+omp/fwd": lambda k: jc.collocation(k),
        "data+omp/fwd": lambda k: jc.data_matching(data, order=k),
        "weight_norm+lstsq": lambda k: jc.collocation(k, selector=jc.select.WeightNorm(),
                                                      layer_order="backward"),
        "random+lstsq": lambda k: jc.collocation(
            k, selector=jc.select.RandomChoice(jax.random.PRNGKey(7)), layer_order="backward"),
        "bottleneck+colloc": lambda k: jc.collocation(
            k, coordinates="bottleneck", selector=jc.PivotedQR(), layer_order="backward"),
    }


def dump(path: str, api: str) -> None:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import teachers as T

    import jaxcompress as jc

    out: dict[str, np.ndarray] = {}
    points = {d: np.asarray(jc.Ball(d, 1.0).sobol(16, skip=777)) for d in (2, 3)}

    def record(tag, small, info, act, radius):
        d = small[0]["kernel"].shape[0]
        x = jnp.asarray(points[d] * radius, small[0]["kernel"].dtype)
        out[f"{tag}/y"] = np.asarray(jc.apply(small, x, activation=act))[:, :8]
        out[f"{tag}/kept"] = np.concatenate([np.asarray(li.kept) for li in info.layers])
        out[f"{tag}/rank"] = np.asarray([int(li.rank) for li in info.layers])

    def derivative(teacher, act, k, radius, layer_order="backward"):
        if api == "old":
            return jc.compress(teacher, activation=act, order=k, radius=radius,
                               layer_order=layer_order)
        d = teacher[0]["kernel"].shape[0]
        return jc.compress(teacher, jc.derivative_matching(k, layer_order=layer_order),
                           activation=act, domain=jc.Ball(d, radius))

    for dtype in ("float32", "float64"):
        t = jc.init_mlp(jax.random.PRNGKey(0), [3, 2048, 2048], dtype=jnp.dtype(dtype))
        for act in ("sigmoid", "gelu"):
            for k in (0, 3, 6, 9):
                for r in (0.5, 1.0, 2.0, 4.0):
                    record(f"fig1/{dtype}/{act}/{k}/{r}", *derivative(t, act, k, r), act, r)
        t = jc.init_mlp(jax.random.PRNGKey(0), [2, 1024, 1024, 1024, 1024, 2],
                        dtype=jnp.dtype(dtype))
        for act in ("sigmoid", "gelu"):
            for order in ("backward", "forward"):
                for k in (0, 2, 5, 10):
                    for r in (0.3, 0.5, 1.0, 2.0):
                        record(f"fig2/{dtype}/{act}/{order}/{k}/{r}",
                               *derivative(t, act, k, r, order), act, r)
        print(f"fig1, fig2 {dtype}", flush=True)
    teachers = T.load_or_train_teachers(T.SEEDS, T.DEFAULT_CACHE, log=lambda m: None)
    params = [[{n: jnp.asarray(v, jnp.float64) for n, v in layer.items()} for layer in p]
              for p, _ in teachers]
    for seed, p in enumerate(params):
        for k in range(11):
            record(f"fig3/{seed}/{k}", *derivative(p, "sigmoid", k, 1.0), "sigmoid", 1.0)
    print("fig3", flush=True)
    data = jc.Ball(2, 1.0).sobol(2000, skip=99)
    makers = new_methods(jc, jax, data)
    for name, kwargs in OLD_METHODS.items():
        for k in (2, 5, 8):
            if api == "old":
                kw = dict(kwargs)
                if kw["features"] == "data":
                    kw["data"] = data
                else:
                    kw["domain"] = jc.Ball(2, 1.0)
                if kw.get("selector") == "random":
                    kw["key"] = jax.random.PRNGKey(7)
                small, info = jc.compress(params[0], activation="sigmoid", order=k, **kw)
            else:
                small, info = jc.compress(params[0], makers[name](k), activation="sigmoid",
                                          domain=jc.Ball(2, 1.0))
            record(f"methods/{name}/{k}", small, info, "sigmoid", 1.0)
    print("methods", flush=True)
    np.savez(path, **out)
    print(f"wrote {len(out)} arrays to {path}")


def compare(path_a: str, path_b: str) -> int:
    a, b = np.load(path_a), np.load(path_b)
    if set(a.files) != set(b.files):
        print(f"different keys: {sorted(set(a.files) ^ set(b.files))[:10]}")
        return 1
    worst: dict[str, float] = {}
    changed = []
    for key in sorted(a.files):
        x, y = a[key], b[key]
        group = "/".join(key.split("/")[:2])
        if key.endswith(("/kept", "/rank")):
            if x.shape != y.shape or not np.array_equal(x, y):
                changed.append(key)
            continue
        rel = float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(x))), 1e-300))
        worst[group] = max(worst.get(group, 0.0), rel)
    print(f"{len(a.files)} arrays; kept indices or ranks that differ: {len(changed)} "
          f"{changed[:10]}")
    for group, rel in sorted(worst.items()):
        print(f"{group:<28} max relative difference of the outputs {rel:.2e}")
    return 1 if changed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", help="the .npz to write")
    p.add_argument("--api", choices=("new", "old"), default="new")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two dumps")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        p.error("give OUT.npz or --compare A B")
    dump(args.out, args.api)
    return 0


if __name__ == "__main__":
    sys.exit(main())
