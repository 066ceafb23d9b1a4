r"""The one driver: every network, every method, one loop over the compressible sets.

A network reaches the driver as a static :class:`~jaxcompress.graph.plan.Plan` (built by
:meth:`jaxcompress.Network.plan`, whatever made the network: a params list,
:func:`jaxcompress.trace`, :func:`jaxcompress.trace_module`, a compressed result) and its
parameter leaves. :func:`run` visits the sets in the method's layer order (backward: deepest
first, every set's features from the teacher, the paper's Proposition 17; forward: the
partially compressed network's features, each set re-fitted to the teacher's next
pre-activation when the feature map re-fits), and for each set

1. takes its features :math:`Z` (one column per neuron) from a **feature source**: the
   method's feature map on the lowered chain (the closed-form multivariate Taylor pass, or the
   activations at points) when the network is a chain of dense layers with one activation, else
   :meth:`~jaxcompress.features.FeatureMap.of_values` on the set's activations computed by
   running the network's own program (Taylor coefficients by ``jet``, values at collocation
   nodes or data);
2. runs the pure per-layer step :func:`~jaxcompress.layer.compress_layer` against the readers'
   rows side by side, :math:`K_g = [K_1[R_1], \ldots, K_c[R_c]]`: kept neurons :math:`S` and
   :math:`\tilde K_g = C K_g` with :math:`Z_{:,S} C \approx Z` (Algorithm 1);
3. writes back: every producer leaf sliced at :math:`S`, every reader's rows replaced
   (a tied set with several consumed tensors: each reader re-weighted from its own tensor's
   coefficients, :func:`_step_joint`).

A **stack** (the layers of a ``scan``, whose leaves stay stacked: ``SetPlan.parts``) is one
entry of one width: each of its parts takes the same three steps (:func:`_visit`, the one visit
of a plain set too) with its own features and kept neurons, written into its slices kept-first,
and the stack is cut to the width after the last (:meth:`~jaxcompress.graph.plan.Plan.compact`).
The index arithmetic (offsets, rows, write-back) is the plan's; widths, the skip rule and the
checks are :mod:`jaxcompress.planning`'s; the error estimate is :mod:`jaxcompress.measure`'s.

Best-of (inside the same ``jit`` when the candidates' widths agree, so it runs under ``vmap``)
lives here. Everything in :func:`run` is pure and traceable: ``jax.jit``, ``jax.vmap``,
``jax.grad`` and ``jax.jvp`` go through it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.features import FeatureMap, LayerFeatures, with_gradients
from jaxcompress.graph.plan import Plan, SetPlan, padded
from jaxcompress.graph.values import DUAL
from jaxcompress.layer import CompressInfo, compress_layer
from jaxcompress.measure import plan_estimate
from jaxcompress.methods import BestOf, Method
from jaxcompress.mlp import HIGHEST
from jaxcompress.placement import Placement
from jaxcompress.planning import (
    masked_rows,
    masked_runs,
    resolve_widths,
    skipped_info,
    skipped_sets,
)
from jaxcompress.program import evaluate
from jaxcompress.select import default_rtol, lstsq_coefficients
from jaxcompress.taylor import num_monomials

__all__ = ["best", "features", "masked_jit", "masked_runs", "run", "run_jit", "truncate"]


# ------------------------------------------------------------------------------------------------
# Feature sources
# ------------------------------------------------------------------------------------------------


def _program_features(plan: Plan, fmap: FeatureMap, s: SetPlan, position: int, leaves, widths,
                      domain, dtype) -> tuple[LayerFeatures, np.ndarray]:
    """The set's features from its activations computed by the network's own program
    (:meth:`FeatureMap.of_values`, once per consumed tensor, stacked), and each row's tensor.
    When the map asks for them (:meth:`FeatureMap.for_program`), the activations' first
    derivatives by ``x`` beside them (:func:`~jaxcompress.features.with_gradients`; not beside
    the contributions of rows read only through a derivative: derivatives already)."""
    fmap, grads = fmap.for_program(plan.derivative)
    tensors = s.tensors()
    feats, ids = [], []
    for t in range(len(tensors)):
        def part(x, dual, t=t):
            prog = plan.program(leaves, x)
            vals = evaluate(prog, leaves, x, s.value_ids())
            return plan.consumed_slice(s, tensors[t], vals, widths, prog, leaves, x, dual=dual)

        kinds = {v == DUAL for v, _ in tensors[t][0]}

        def values(x, part=part, kinds=kinds):
            if not grads:
                return part(x, None)
            got = ([with_gradients(lambda y: part(y, False))(x)] if False in kinds else []) + (
                [part(x, True)] if True in kinds else [])
            return got[0] if len(got) == 1 else jnp.concatenate(got, axis=1)
        f = fmap.of_values(values, position, domain=domain, dtype=dtype)
        f = dataclasses.replace(f, layer=s.index)
        feats.append(f)
        ids.append(np.full(f.z.shape[0], t))
    if len(feats) == 1:
        return feats[0], ids[0]
    scale = (None if feats[0].scale is None
             else jnp.concatenate([f.scale for f in feats]))
    return dataclasses.replace(feats[0], z=jnp.concatenate([f.z for f in feats]),
                               scale=scale), np.concatenate(ids)


def _features(plan: Plan, fmap: FeatureMap, positions: Sequence[int], leaves, widths, domain,
              dtype, placement, *, prefix: bool = False
              ) -> dict[int, tuple[LayerFeatures, np.ndarray | None]]:
    """The features of the sets at ``positions`` (0-based) in the network ``leaves``: the
    feature map on the lowered chain (hidden layer ``l`` is set ``l - 1``; with ``prefix``,
    only the layers up to the deepest requested one: a partially compressed network), else
    through the program (a stack: one entry per part)."""
    if not positions:
        return {}
    if plan.chain is not None:
        params = plan.chain.lower(leaves)
        if prefix:
            top = max(positions) + 1
            params = params[:top] + [params[top]]
        got = fmap(params, [i + 1 for i in positions], activation=plan.chain.activation,
                   domain=domain, placement=placement)
        return {i: (got[i + 1], None) for i in positions}
    return {i: _program_features(plan, fmap, plan.sets[i], i + 1, leaves, widths, domain, dtype)
            if not plan.sets[i].parts else
            [_program_features(plan, fmap, part, i + 1, leaves, widths, domain, dtype)
             for part in plan.sets[i].parts]
            for i in positions}


def features(plan: Plan, fmap: FeatureMap, leaves, domain, placement=None
             ) -> dict[int, tuple[LayerFeatures, np.ndarray | None]]:
    """The teacher's features of every set (by 0-based position), from the same source the
    driver uses; what :func:`run` takes as ``teacher_features``."""
    return _features(plan, fmap, list(range(len(plan.sets))), list(leaves),
                     dict(enumerate(plan.width_of)), domain, _dtype(leaves), placement)


def truncate(feats: LayerFeatures, ids, order: int) -> tuple[LayerFeatures, Any]:
    """Derivative features at a lower ``order``: the rows of the monomials of degree
    ``<= order`` (they come first, by degree, in each consumed tensor's block)."""
    d_k = num_monomials(feats.coord_dim, order)
    ids = None if ids is None else np.asarray(ids)
    if ids is None:
        rows = np.arange(d_k * (feats.z.shape[0] // feats.num_features))
    else:
        rows = np.concatenate([
            np.nonzero(ids == t)[0][:d_k * (int(np.sum(ids == t)) // feats.num_features)]
            for t in np.unique(ids)])
    scale = None if feats.scale is None else feats.scale[rows]
    return dataclasses.replace(feats, z=feats.z[rows], scale=scale, order=order,
                               num_features=d_k), (None if ids is None else ids[rows])


def _dtype(leaves):
    return jnp.result_type(*[v for v in leaves if jnp.issubdtype(jnp.result_type(v),
                                                                   jnp.floating)])


# ------------------------------------------------------------------------------------------------
# One set: the per-layer step and its write-back
# ------------------------------------------------------------------------------------------------


def _step(plan: Plan, method: Method, s: SetPlan, feats, ids, leaves, widths, width: int,
          target, placement, pad: int | None = None, live=None):
    """One set: the per-layer step and the write-back; returns the leaves and the record
    (``pad``: a stack's part, written kept-first and filled with zero neurons to ``pad``;
    ``live``: a traced width, see :func:`~jaxcompress.layer.compress_layer`)."""
    out_kernel, places = plan.read_rows(s, leaves, widths)
    joint = s.joint(places)
    kept, new_kernel, info = compress_layer(feats, out_kernel, width, method.selector,
                                            target=None if joint else target,
                                            placement=placement, live=live)
    leaves = list(leaves)
    s.slice_producers(leaves, kept, pad)
    if not joint:
        plan.write_rows(leaves, places, widths[s.members[0]], new_kernel, pad)
        return leaves, info
    rtol = (default_rtol(feats.z.dtype) if method.selector.rtol is None
            else method.selector.rtol)
    residual = _step_joint(plan, s, leaves, widths, kept, feats, ids, rtol, out_kernel, places,
                           pad, live)
    return leaves, dataclasses.replace(info, residual=residual)


def _step_joint(plan: Plan, s: SetPlan, leaves: list, widths, kept, feats, ids, rtol,
                out_kernel, places, pad: int | None, live=None):
    """A tied set's re-weighting (see :mod:`jaxcompress.graph`): each reader's rows re-weighted
    with its own tensor's ``C_t`` (least squares of the tensor's scaled features on its kept
    columns), in place; returns the matching residual
    ``max_t max |Z_t K_t - Z_t[:, S] C_t K_t|``."""
    n = kept.shape[0]
    z = feats.z
    zs = z if feats.scale is None else z * feats.scale[:, None]
    tensors = s.tensors()
    coefs = []
    for t in range(len(tensors)):
        rows = np.nonzero(ids == t)[0]
        coef, _ = lstsq_coefficients(zs[rows], kept, n, rtol, rhs=zs[rows], live=live)
        coefs.append((rows, coef))
    col, residual, spans, cols_of = 0, jnp.zeros((), z.dtype), [], []
    for r, pl in zip(s.readers, places, strict=True):
        t = tensors.index((r.values, r.block))
        spans.append((r.leaf, r.axis, pl.start, t, r.index))
        cols_of.append((t, col, pl.cols))
        col += pl.cols
    for t, (rows, coef) in enumerate(coefs):
        cols = np.concatenate([np.arange(c0, c0 + nc) for tt, c0, nc in cols_of if tt == t])
        k_t = out_kernel[:, cols]
        before = jnp.matmul(z[rows], k_t, precision=HIGHEST)
        after = jnp.matmul(z[rows][:, kept], jnp.matmul(coef, k_t, precision=HIGHEST),
                           precision=HIGHEST)
        residual = jnp.maximum(residual, jnp.max(jnp.abs(after - before)))
    plan.write_spans(leaves, spans, [coef for _, coef in coefs], widths[s.members[0]], pad)
    return residual


def _refit_target(plan: Plan, s: SetPlan, z, teacher, taken, original, alive=None):
    """The forward re-fit's target ``Z K_teacher`` of a set with one consumed tensor (else
    ``None``): the teacher's readers, their columns where earlier sets kept them (a stream's set
    comes first and slices the columns of every block's output kernel); in a masked run the
    columns of earlier sets' dead neurons zero (``alive``: producer -> mask), as if absent."""
    if len(s.tensors()) != 1:
        return None
    sliced = plan.taken(teacher, taken)
    for (leaf, axis, _), mask in (alive or {}).items():
        shape = [1] * sliced[leaf].ndim
        shape[axis] = -1
        sliced[leaf] = sliced[leaf] * jnp.reshape(mask, shape).astype(sliced[leaf].dtype)
    teacher_kernel, _ = plan.read_rows(s, sliced, original)
    return jnp.matmul(z, teacher_kernel, precision=HIGHEST)


@dataclasses.dataclass
class _Loop:
    """What every visit of :func:`run` shares: the network, the method, the teacher and the
    state of the loop (the current widths, the producers' kept neurons so far)."""

    plan: Plan
    method: Method
    teacher: list
    domain: Any
    dtype: Any
    placement: Placement | None
    original: dict[int, int]
    current: dict[int, int]
    taken: dict[tuple[int, int, int | None], jax.Array]
    #: traced per-set orders ``k <= K`` of a masked run (see :func:`run`), else ``None``
    live: Any = None
    #: a masked run in forward order with re-fitting: every set so far kept whole (traced)
    whole: Any = True
    #: a masked run: which kept neurons of each producer so far are alive (the others dead)
    alive: dict = dataclasses.field(default_factory=dict)
    #: traced ``(w, n)`` of a masked shrink step (see :func:`run`), else ``None``
    narrow: Any = None

    @property
    def forward(self) -> bool:
        return self.method.layer_order == "forward"


def _visit(loop: _Loop, i: int, s: SetPlan, part: SetPlan, ref, leaves, width: int,
           pad: int | None):
    """One set (or one part of a stack, ``pad`` its full width): its features (the teacher's
    ``ref``, or the current network's in forward order), the forward re-fit's target, the step;
    the producers' kept neurons recorded. Returns the leaves and the record."""
    fmap = loop.method.features
    if not loop.forward:
        feats, ids = ref
    elif part is s:
        feats, ids = _features(loop.plan, fmap, [i], leaves, loop.current, loop.domain,
                               loop.dtype, loop.placement, prefix=True)[i]
    else:
        feats, ids = _program_features(loop.plan, fmap, part, i + 1, leaves, loop.current,
                                       loop.domain, loop.dtype)
    live = before = None
    if loop.live is not None:   # order k <= K: rows of degree / nodes past k's masked
        k, full = loop.live[i], loop.current[s.members[0]]
        feats = masked_rows(fmap, feats, ids, k)
        ref = None if ref is None else (masked_rows(fmap, *ref, k), ref[1])
        d_k = jnp.asarray([num_monomials(feats.coord_dim, j) for j in range(feats.order + 1)],
                          jnp.int32)[k]
        live, before = jnp.minimum(d_k, full), leaves
    if loop.narrow is not None:   # the padding's columns dead, the first n pivots re-weighted
        columns = jnp.arange(feats.z.shape[1], dtype=jnp.int32) < loop.narrow[0]
        feats = dataclasses.replace(feats, z=jnp.where(columns[None, :], feats.z, 0))
        live = loop.narrow[1]
    target = (_refit_target(loop.plan, part, ref[0].z, loop.teacher, loop.taken, loop.original,
                            loop.alive) if loop.forward and fmap.refit else None)
    leaves, info = _step(loop.plan, loop.method, part, feats, ids, leaves, loop.current, width,
                         target, loop.placement, pad, live)
    if loop.live is not None:
        leaves, info, alive = _masked_skip(loop, fmap, before, leaves, info, d_k, full, width,
                                           live)
        loop.alive.update({(p.leaf, p.axis, p.index): alive for p in part.producers})
    kept = info.kept if pad is None else padded(info.kept, pad)
    loop.taken.update({(p.leaf, p.axis, p.index): kept for p in part.producers})
    return leaves, info


def _masked_skip(loop: _Loop, fmap: FeatureMap, before, after, info, d_k, full: int,
                 width: int, live):
    """A masked set compiled at its full width keeps it whole (the teacher's leaves and
    ``kept = arange``) when order ``k`` has ``D_k >= d`` features (and, in forward order with
    re-fitting, every earlier set was kept whole): :func:`~jaxcompress.planning.skipped_sets`
    with a traced order. Returns the leaves, the record and which kept neurons are alive."""
    alive = jnp.arange(width, dtype=jnp.int32) < live
    if width != full:
        loop.whole = False
        return after, info, alive
    whole = d_k >= full
    if loop.forward and fmap.refit:
        whole = whole & loop.whole
        loop.whole = whole
    leaves = [jnp.where(whole, b, a) for b, a in zip(before, after, strict=True)]
    kept = jnp.where(whole, jnp.arange(width, dtype=info.kept.dtype), info.kept)
    return leaves, dataclasses.replace(info, kept=kept), alive | whole


def _visit_stack(loop: _Loop, i: int, s: SetPlan, refs, leaves, width: int):
    """A stack (``SetPlan.parts``: the layers of a ``scan``, which keep one width): each part
    selects its own ``width`` neurons (:func:`_visit`), in layer order, written back kept-first
    in each slice with filler neurons behind them whose reading rows are zero (the function is
    the compressed one; the slices keep their shapes); then the stack is cut to ``width``.
    Returns the leaves and one record: ``kept`` is ``arange(width)`` (every slice's kept neurons
    at its front), ``rank``, ``residual`` and ``max_coef`` the largest over the parts."""
    full = loop.current[s.members[0]]
    order = range(len(s.parts)) if loop.forward else range(len(s.parts) - 1, -1, -1)
    infos = {}
    for j in order:
        leaves, infos[j] = _visit(loop, i, s, s.parts[j], None if refs is None else refs[j],
                                  leaves, width, full)
    leaves = loop.plan.compact(s, leaves, loop.current, width)
    for j, part in enumerate(s.parts):
        loop.taken.update({(p.leaf, p.axis, p.index): infos[j].kept for p in part.producers})
    parts = [infos[j] for j in range(len(s.parts))]

    def most(field):
        return jnp.max(jnp.stack([getattr(li, field) for li in parts]))

    info = dataclasses.replace(
        parts[0], kept=jnp.arange(width, dtype=jnp.int32), rank=most("rank"),
        residual=most("residual"), max_coef=most("max_coef"),
        swaps=jnp.sum(jnp.stack([li.swaps for li in parts])), layer=s.index, width_in=full,
        width_out=width)
    return leaves, info


# ------------------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------------------


def run(plan: Plan, method: Method, leaves: Sequence, domain,
        placement: Placement | None = None, *,
        teacher_features: dict[int, tuple[LayerFeatures, Any]] | None = None,
        only: Sequence[int] | None = None, skip: bool = True,
        live: jax.Array | None = None, narrow: jax.Array | None = None
        ) -> tuple[list, CompressInfo]:
    """One method on the network ``leaves`` (pure; traced inside :func:`run_jit`): the one
    layer loop of the library (see the module docstring).

    Args:
      plan, method, leaves, domain, placement: the network, the method, its parameter leaves,
        the domain, where the neurons live (``None``: one device).
      teacher_features: the teacher's features of the sets to compress (by 0-based position),
        computed earlier (the tolerance search truncates one pass at its largest order);
        default: computed here.
      only: compress only these sets (0-based positions); the others are kept whole.
      skip: apply the skip rule (a set that keeps all its neurons computes nothing); ``False``
        computes every set of ``only`` (the tolerance search's masked candidates, whose widths
        are an upper bound).
      live: a *masked run* (ours): traced orders ``k_i <= K``, one per set, for a method at
        order ``K`` that :func:`~jaxcompress.planning.masked_runs` accepts. Each set's features
        of order ``K`` get the rows of order ``k_i`` only
        (:func:`~jaxcompress.planning.masked_rows`), its first ``min(D_{k_i}, d)`` pivots are
        re-weighted and the rest of its ``min(D_K, d)`` neurons are dead (zero rows in its
        readers), and a set with ``D_{k_i} >= d`` is kept whole: the network ``run`` gives at
        orders ``k_i``, to rounding, at the widths of ``K`` (one compiled program for every
        order ``<= K``; the skip rule is applied by value).
      narrow: a *masked shrink step* (ours): traced ``(w, n)``, ``n <= w``, for the one set of
        ``only``, at its padded width ``W`` (the method's, static): its first ``w`` neurons are
        the network's and the others dead padding (their features zeroed, so a greedy selector
        never picks them ahead of a live one); its first ``n`` pivots are re-weighted and the
        rest dead (zero rows in its readers). That is the set narrowed from ``w`` to ``n``
        neurons, to rounding, at the width ``W``: one compiled program for every ``w`` and
        ``n`` (the width search's candidates; a greedy-prefix selector, no stack).
    """
    dtype = _dtype(leaves)
    fmap, sizes = method.features, plan.sizes
    widths = resolve_widths(method, sizes, domain)
    skip = skip and live is None and narrow is None
    skipped = skipped_sets(method, sizes, domain, widths) if skip else (False,) * len(widths)
    if only is not None:
        skipped = tuple(skip or i not in only for i, skip in enumerate(skipped))
        widths = tuple(w if i in only else d for i, (w, d) in
                       enumerate(zip(widths, sizes[1:-1], strict=True)))
    needed = [i for i, skip in enumerate(skipped) if not skip]
    infos: list = [skipped_info(method, sizes, domain, i + 1, s.index, dtype) if skip else None
                   for i, (s, skip) in enumerate(zip(plan.sets, skipped, strict=True))]
    teacher, leaves = list(leaves), list(leaves)
    original = dict(enumerate(plan.width_of))
    loop = _Loop(plan, method, teacher, domain, dtype, placement, original, dict(original), {},
                 live, narrow=narrow)
    refs = {}
    if teacher_features is not None:
        refs = {i: teacher_features[i] for i in needed}
    elif not loop.forward or fmap.refit:
        refs = _features(plan, fmap, needed, teacher, original, domain, dtype, placement)
    for i in (needed if loop.forward else reversed(needed)):
        s = plan.sets[i]
        if s.parts and (live is not None or narrow is not None):
            raise ValueError("run: a masked run (live=, narrow=) does not take a stack of layers")
        if s.parts:
            leaves, infos[i] = _visit_stack(loop, i, s, refs.get(i), leaves, widths[i])
        else:
            leaves, infos[i] = _visit(loop, i, s, s, refs.get(i), leaves, widths[i], None)
        for member in s.members:
            loop.current[member] = widths[i]
    estimate = plan_estimate(plan, teacher, leaves, domain, placement)
    return leaves, CompressInfo.for_method(method, domain, infos, activation=plan.activation_name,
                                           error_estimate=estimate)


def best(results: list[tuple[list, CompressInfo]], method: BestOf) -> tuple[list, CompressInfo]:
    """Per teacher, the candidate with the smallest error estimate (same shapes throughout; a
    traced choice, so it runs under ``vmap``).

    A non-finite estimate (a NaN result, e.g. from non-finite traced data) never wins; when
    every candidate's is non-finite the first is kept and the estimate is NaN.
    """
    estimates = jnp.stack([info.error_estimate for _, info in results])
    finite = jnp.isfinite(estimates)
    choice = jnp.argmin(jnp.where(finite, estimates, jnp.inf)).astype(jnp.int32)
    best_estimate = jnp.where(jnp.any(finite), estimates[choice], jnp.nan)

    def pick(*xs):
        return jnp.stack(xs)[choice]

    leaves = jax.tree.map(pick, *[p for p, _ in results])
    first = results[0][1]
    layers = []
    for i, li in enumerate(first.layers):
        cands = [info.layers[i] for _, info in results]
        arrays = {f: pick(*[getattr(c, f) for c in cands])
                  for f in ("kept", "rank", "residual", "max_coef", "swaps")}
        rows = {c.num_rows for c in cands}
        layers.append(dataclasses.replace(li, **arrays,
                                          num_rows=rows.pop() if len(rows) == 1 else -1,
                                          skipped=all(c.skipped for c in cands)))

    def joined(field):
        return "|".join(dict.fromkeys(getattr(info, field) for _, info in results))

    info = dataclasses.replace(
        first, layers=tuple(layers), layer_order=joined("layer_order"),
        features=joined("features"), selector=joined("selector"),
        coordinates=joined("coordinates"), method=method.describe(),
        error_estimate=best_estimate, choice=choice,
        candidates=tuple(m.describe() for m in method.methods))
    return leaves, info


def run_any(plan: Plan, method, leaves, domain, placement: Placement | None = None, *,
            live: jax.Array | None = None):
    """:func:`run` of a method, or the :func:`best` of a best-of's candidates (traceable)."""
    if isinstance(method, BestOf):
        return best([run(plan, m, leaves, domain, placement, live=live)
                     for m in method.methods], method)
    return run(plan, method, leaves, domain, placement, live=live)


def _run_impl(leaves, method, domain, *, plan: Plan, placement: Placement | None = None):
    out = run_any(plan, method, leaves, domain, placement)
    if placement is not None:  # the compressed network is D_k wide: replicated on the mesh
        replicated = placement.replicated()
        out = ([jax.lax.with_sharding_constraint(a, replicated) for a in out[0]], out[1])
    return out


#: :func:`run` (or the best of several methods of equal widths) in one ``jax.jit``: the method's
#: and the domain's settings and the plan are static, their arrays traced. On a CPU a small
#: teacher's program compiles fast (:mod:`jaxcompress.compiling`).
run_jit = FastOnSmallCPU(_run_impl, static_argnames=("plan", "placement"))


def _masked_impl(leaves, method, domain, orders, *, plan: Plan):
    return run_any(plan, method, leaves, domain, live=jnp.asarray(orders, jnp.int32))


#: :func:`run` masked (``live=orders``, traced): the method at order ``K`` computes the
#: network at any orders ``<= K`` in one compiled program (the order searches' candidates).
masked_jit = FastOnSmallCPU(_masked_impl, static_argnames=("plan",))
