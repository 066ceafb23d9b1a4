"""What a method does to a network before anything runs: widths, the skip rule, the eager checks
and the memory model.

:func:`resolve_widths` gives every compressible set's width (the method's ``widths=``, or
:math:`\\min(D_k, d)`); :func:`skipped_sets` which sets are kept whole with nothing computed;
:func:`masked_runs` whether a method's lower orders can run inside its program (the driver's
masked runs, :func:`masked_rows` their features);
:func:`check_method` checks a method against a network's :class:`~jaxcompress.graph.plan.Plan`
and a domain on the host, before anything is compiled (the feature map's own checks, widths,
the selector, memory), and :func:`memory_estimate` / :func:`check_memory` bound the memory a
compression needs. The driver (:mod:`jaxcompress.driver`) and the searches read them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from jaxcompress.domains import ERROR_POINTS
from jaxcompress.features import FeatureMap, LayerFeatures
from jaxcompress.graph.plan import Plan
from jaxcompress.layer import LayerInfo
from jaxcompress.methods import BestOf, Method
from jaxcompress.mlp import param_count
from jaxcompress.taylor import memory_limit, monomials, num_monomials

__all__ = ["COMPILE_BYTES", "check_memory", "check_method", "masked_rows", "masked_runs",
           "memory_estimate", "resolve_widths", "skipped_info", "skipped_sets"]


def resolve_widths(method: Method, sizes: Sequence[int], domain) -> tuple[int, ...]:
    """The widths of ``method`` per set (``sizes`` = ``[d_in, set widths, d_out]``): given, or
    ``min(D_k, d)``."""
    if method.widths is not None:
        return method.widths
    d_ks = method.features.num_features(list(sizes), domain)
    return tuple(min(dk, w) for dk, w in zip(d_ks, sizes[1:-1], strict=True))


def skipped_sets(method: Method, sizes: Sequence[int], domain,
                 widths: Sequence[int]) -> tuple[bool, ...]:
    """Per set: kept whole with nothing computed (see ``LayerInfo.skipped``).

    A set is skipped when it keeps all its ``d`` neurons and has ``D_k >= d`` features
    (selection would keep every neuron with ``C = I``). In forward order with re-fitting, a set
    after a compressed one is not skipped: its re-fit compensates the upstream change.
    """
    d_ks = method.features.num_features(list(sizes), domain)
    whole = [w == h <= dk for w, h, dk in zip(widths, sizes[1:-1], d_ks, strict=True)]
    if method.layer_order == "forward" and method.features.refit:
        whole = [w and all(whole[:i]) for i, w in enumerate(whole)]
    return tuple(whole)


def masked_rows(fmap: FeatureMap, feats: LayerFeatures, ids, k) -> LayerFeatures:
    """Features of order ``K`` (``feats.order``) as those of the traced order ``k <= K``: the
    rows that order ``k`` does not have are zeroed (derivative features: the monomials of degree
    ``> k``, which come after the lower ones; collocation: the nodes past ``N_k``, Sobol nodes
    being prefixes of one sequence). Rows are monomial- (node-) major, a neuron's sites after
    each other, in one block per consumed tensor (``ids``). Zero rows change neither a greedy
    selector's pivots nor a least-squares fit, so a program compiled at ``K`` computes every
    order ``<= K``."""
    ids = np.zeros(feats.z.shape[0], int) if ids is None else np.asarray(ids)
    if fmap.name == "taylor":
        count = feats.num_features
        level = monomials(feats.coord_dim, feats.order).sum(axis=1)       # degree of a row
        bound = k
    else:
        count = fmap.oversample * feats.num_features                     # N_K nodes
        level = np.arange(count)                                          # node of a row
        bound = fmap.oversample * jnp.asarray(
            [num_monomials(feats.coord_dim, j) for j in range(feats.order + 1)], jnp.int32)[k]
    # each block (a consumed tensor: contiguous rows of one id) holds its sites side by side
    rows = np.concatenate([np.repeat(level, int(np.sum(ids == t)) // count)
                           for t in dict.fromkeys(ids.tolist())])
    live = jnp.asarray(rows, jnp.int32) <= bound if fmap.name == "taylor" else (
        jnp.asarray(rows, jnp.int32) < bound)
    return dataclasses.replace(feats, z=jnp.where(live[:, None], feats.z, 0))


def masked_runs(method) -> bool:
    """Whether ``method`` (or every candidate of a best-of) can run masked (:func:`run`'s
    ``live``): derivative features or collocation on Sobol nodes, values only, default widths,
    a greedy selector (:attr:`~jaxcompress.select.Selector.greedy_prefix`)."""
    methods = method.methods if isinstance(method, BestOf) else (method,)
    for m in methods:
        f = m.features
        if not (m.selector.greedy_prefix and m.widths is None and (
                f.name == "taylor" or (f.name == "collocation" and f.nodes == "sobol"
                                       and not f.gradients))):
            return False
    return True


def skipped_info(method: Method, sizes: Sequence[int], domain, position: int, index: int,
                  dtype) -> LayerInfo:
    """The :class:`LayerInfo` of the set at ``position`` (1-based) kept whole."""
    fmap, width = method.features, sizes[position]
    order, coord_dim = fmap.layer_description(list(sizes), domain, position)
    return LayerInfo(
        kept=jnp.arange(width, dtype=jnp.int32), rank=jnp.asarray(width, jnp.int32),
        residual=jnp.zeros((), dtype), max_coef=jnp.ones((), dtype),
        swaps=jnp.zeros((), jnp.int32), layer=index, order=order,
        num_features=fmap.num_features(list(sizes), domain)[position - 1], width_in=width,
        width_out=width, num_rows=0, coord_dim=coord_dim, skipped=True)


def check_method(method, plan: Plan, domain, where: str, *, devices: int = 1,
                 set_names: Sequence[str] | None = None) -> tuple[int, ...]:
    """Eager checks of ``method`` against a network's plan and domain (the feature map's own
    checks, widths, the selector, memory over ``devices``); returns the widths per set (a
    best-of's candidates must agree: their widths, else ``ValueError``)."""
    sizes = plan.sizes
    dtype = plan.x.dtype
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    names = set_names or [f"hidden layer {l}" for l in range(1, len(plan.sets) + 1)]
    found = []
    for m in candidates:
        if plan.chain is None:
            _check_program_features(m, where)
        m.features.check(sizes, dtype, domain, where)
        if m.widths is not None and len(m.widths) != len(plan.sets):
            if plan.chain is not None:
                raise ValueError(f"{where}: widths has {len(m.widths)} entries; expected one "
                                 f"per hidden layer ({len(plan.sets)})")
            raise ValueError(f"{where}: widths={tuple(m.widths)} gives {len(m.widths)} widths; "
                             f"this traced network has {len(plan.sets)} compressible sets (a "
                             f"tied set counts once): {'; '.join(names)}")
        widths = resolve_widths(m, sizes, domain)
        for name, w, h in zip(names, widths, sizes[1:-1], strict=True):
            if not 1 <= w <= h:
                raise ValueError(f"{where}: target width {w} for {name} must be in [1, {h}] "
                                 f"(its width)")
            m.selector.check(h, w, f"{where}: {name}")
        found.append(widths)
    if len(set(found)) > 1 and plan.chain is not None:
        raise ValueError(f"{where}: best_of needs methods of equal widths (one result is kept per "
                         f"teacher); got {found}. Give them the same order or widths=.")
    check_memory(candidates, sizes, dtype, domain, where, devices=devices)
    return found[0]


def _check_program_features(m: Method, where: str) -> None:
    fmap = m.features
    if fmap.coordinates != "input":
        raise ValueError(f"{where}: coordinates={fmap.coordinates!r} needs a chain of dense "
                         "layers; this network is compressed in input coordinates (through its "
                         "program)")
    if type(fmap).of_values is FeatureMap.of_values:
        raise TypeError(f"{where}: the feature map {fmap.name!r} computes features of a params "
                        "list only; this network is not a chain, so it needs "
                        "of_values(values, layer, *, domain, dtype) (see "
                        "jaxcompress.features.FeatureMap)")


#: Bytes that compiling a compression's program costs whatever its order (measured: 9 MB on
#: ``[2, 64, 64, 1]`` at k = 2, on a 2-core CPU).
COMPILE_BYTES = 16 * 2**20


def memory_estimate(method, sizes, dtype, domain, *, devices: int = 1,
                    compilation: bool = False) -> dict[str, int]:
    """Bytes per device one compression needs, by part (the largest method of a best-of).

    The teacher's parameters, the feature map's working set (``method.features.memory``: e.g. the
    Taylor pass's coefficient products, or the activations at the collocation points; none for
    layers kept whole, ``LayerInfo.skipped``), the selection's scaled copy of the largest
    feature matrix and the error estimate's activations, divided over ``devices`` when the
    neurons are sharded.

    With ``compilation`` also the host memory of compiling the program (not divided: one
    program is compiled whatever the device count): :data:`COMPILE_BYTES` and the feature map's
    compile cost (e.g. :func:`jaxcompress.features.taylor_compile_cost`). With it the sum is an
    upper bound of the growth of the process's peak resident memory during ``compress``
    (``tests/test_memory.py`` measures it on a grid of widths and orders); :func:`check_memory`
    uses it.
    """
    itemsize = jnp.dtype(dtype).itemsize
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    most: dict[str, int] = {}
    for m in candidates:
        parts = {"teacher parameters": itemsize * param_count(sizes)}
        skipped = skipped_sets(m, sizes, domain, resolve_widths(m, sizes, domain))
        if not all(skipped):
            parts.update(m.features.with_skipped(skipped).memory(sizes, itemsize, domain))
        d_ks = m.features.num_features(sizes, domain)
        parts["selection"] = itemsize * max(
            [dk * w for dk, w, skip in zip(d_ks, sizes[1:-1], skipped, strict=True)
             if not skip], default=0)
        parts["error estimate"] = itemsize * ERROR_POINTS * max(sizes[1:]) * 2
        compiling = {k: parts.pop(k) for k in list(parts) if k.startswith("compiling")}
        parts = {k: -(-v // devices) for k, v in parts.items()}
        if compilation:
            parts.update(compiling, **{"compiling the compression": COMPILE_BYTES})
        if sum(parts.values()) > sum(most.values()):
            most = parts
    return most


def check_memory(methods, sizes, dtype, domain, where: str, *, devices: int = 1) -> None:
    """Refuse, before allocating anything, a compression that would not fit in memory."""
    for m in methods:
        parts = memory_estimate(m, sizes, dtype, domain, devices=devices, compilation=True)
        need, limit = sum(parts.values()), memory_limit()
        if need > limit:
            detail = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in
                               sorted(parts.items(), key=lambda kv: -kv[1]))
            raise ValueError(
                f"{where}: {m.describe()} on {sizes} needs about {need / 2**30:.1f} GiB per "
                f"device ({detail} GiB), over the limit of {limit / 2**30:.1f} GiB (the device's "
                "memory, or jaxcompress.taylor.MAX_FEATURE_BYTES when set). Lower the order "
                "(D_k) or the oversampling, use an effective input dimension (coordinates="
                "'bottleneck' or a Parameterization domain), or shard the neurons over more "
                "devices with jc.shard.")
