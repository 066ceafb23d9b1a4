r"""The network graph: the library's one representation, and the trace that builds it.

:func:`trace` runs :func:`jax.make_jaxpr` on ``fn(params, x)`` (every parameter leaf an input),
inlines the sub-programs of ``jit`` / ``closed_call`` / ``custom_jvp_call`` / ``custom_vjp_call``
/ ``checkpoint``, unrolls ``scan`` (see below) and interprets the flat equation list with one
rule per primitive
(:mod:`jaxcompress.graph.rules`, the ``jax/experimental/jet.py`` registry pattern:
:func:`register_rule`). A **neuron group** is the last axis of the value

.. math::
   u = x K + b \qquad (\text{or } x K^T + b \text{ for an } (out, in) \text{ kernel}),
   \qquad h = \sigma(u),

where ``K`` and ``b`` are parameter leaves, and ``sigma`` is the elementwise program applied to
``u`` (``tanh``, the ``integer_pow`` / ``mul`` / ``tanh`` of ``jax.nn.gelu``, ``sin(30 u)``, ...:
a univariate function, since each primitive acts on the same position of ``u``). ``h`` feeds the
next ``dot_general`` with a parameter kernel, the group's **consumer**. A group is **pinned**
(left whole, with the reason and the source line of the op) when it reaches the output, feeds a
reduction (over its neurons: a norm over the channels, as LayerNorm computes), a slice, an
elementwise op with a group whose neuron blocks do not line up with its own, a parameter that
is not one number per neuron inside its activation, or a primitive without a rule: an unknown
primitive pins what it touches and is named, never guessed.

**Tied sets.** A product or a sum of two groups whose neuron blocks line up (equal widths on
one axis) ties them: neuron ``i`` of ``h * U`` (a gate: jaxpi's modified MLP and PirateNet) or
of ``s + f(s)`` (a residual stream) is a function of neuron ``i`` of each, so they are kept and
dropped together (union-find over the groups, :attr:`Group.tied`); a pin of one group pins its
set. A **residual stream** ``s <- s + W_o f(s W_i) + b_o`` is one such set: the input
projection and every block's output kernel and bias write its channels (producers, sliced at
the kept ones), every block's first kernel and the head read them (consumers, each re-weighted
from the stream's value it reads), one kept set chosen on the stacked features of every value
of the stream that a kernel reads (exact when their rank is at most the kept width, see below).
The stream may be scaled by a number computed from parameters (PirateNet's
``alpha f + (1 - alpha) s``); a reader that is not linear in the channels (a norm over them)
pins the whole stream, with that reason. PirateNet's own stream is pinned: it starts as the
embedding ``[cos(xB), sin(xB)]``, whose channels ``i`` and ``m + i`` are one neuron of ``B``,
and its blocks add one layer's ``2 m`` neurons to it, which do not line up with ``B``'s ``m``.
A linear group read by a kernel (no activation between: ``x K + b`` itself) is pinned unless a
stream ties it (a linear input projection). Any other elementwise op of two groups (``max``)
pins them. A kernel ``g * v`` (a 1-D ``g`` along the output axis:
weight factorisation) is read through ``v`` (``C (g * v) = g * (C v)``) with ``g`` sliced with
the neurons; any other kernel computed from parameters (``v / ||v||``, ``W + low-rank``) pins the
group it reads (no leaf is linear in its rows). ``t . b`` of a hidden value ``t`` and
``b = h K + c`` of one group contracted along their neurons (DeepONet's
``trunk(y) . branch(u)``) makes ``K``'s output axis and ``c`` the linear consumers of ``t``. A
group that does not depend on ``x`` (the branch on fixed input functions) is pinned.

**A tied set is compressed jointly** (by the driver, :mod:`jaxcompress.driver`): neuron ``i`` of
every consumed tensor ``t_1, ..., t_c`` of the set is a function of neuron ``i`` of the set's
groups alone, so the features ``Z_t`` of every tensor are stacked, one set ``S`` of columns is
selected on the stack, every producer leaf of every group of the set is sliced at ``S`` and each
consumer ``K_j`` of tensor ``t`` gets its own tensor's coefficients,

.. math::
   C_t = Z_t[:, S]^+ Z_t, \qquad K_j \leftarrow C_t K_j .

If the stacked ``Z`` has rank ``<= |S|`` and ``Z[:, S]`` has the same rank, every column of ``Z``
is ``Z[:, S] c`` for one ``c`` common to all blocks, so every Taylor coefficient (point value) of
every ``t^T K_j`` is reproduced and the network's function is unchanged; otherwise the error of
consumer ``j`` is ``(Z_t - Z_t[:, S] C_t) K_j`` (``LayerInfo.residual``). The stack of ``T``
tensors' features has rank up to ``T D_k``, so exactness needs ``|S| >= T D_k`` in general; the
default width of a set is still ``min(D_k, d)``; pass ``widths=`` for the exact bound. Forward
order re-weights a tied set from the current network's features (re-fitting all its tensors at
once to the teacher corrects an upstream error twice: measured on a tanh layer of width 24 cut
to 4 and 6 before a gated set at 15, sup error 0.13 / 0.15 with that re-fit against 0.096 /
0.090 without).

**Layers under scan.** ``jax.lax.scan`` over stacked parameters (kernels ``(L, w, w)``,
biases ``(L, w)``: how deep JAX networks are written, and what ``nnx.scan`` and linen's
``nn.scan`` lower to; ``fori_loop`` indexing ``W[i]`` too) is read as its unrolled layers: the
program inlines the body ``L`` times, iteration ``i`` reading slice ``i`` of every scanned
operand, and a rule follows slice ``i`` of a stacked leaf as layer ``i``'s parameter
(:attr:`Group.stack`; producers and consumers name a leaf and a slice). Each layer stays its
own group with its **own kept neurons** (unlike tying the layers into one set, which would
keep neuron ``j`` of every layer together though neuron ``j`` of layer 2 has nothing to do with
neuron ``j`` of layer 3, needing up to ``L`` times the width for the same error). The stacked
leaves stay stacked, so the groups that touch one stacked axis (every layer it produces, every
group its slices' rows read: the input projection that writes the carry too) keep **one
width** (:attr:`Group.stacked`; ``widths=`` gives it once; by default ``min(D_k, d)``, the same
for every layer). The driver compresses such a **stack** as one entry: each layer (each tied
set of it) selects its own neurons on its own features, its slice is written back with its
kept neurons first and zero neurons behind them (the function is then the compressed one and
the slices keep their shapes, so forward order re-traces the program between layers), and
the stack is cut to the width after the last (``LayerInfo.kept`` of a stack is
``arange(width)``: every slice's kept neurons at its front). ``fn`` runs on the smaller stack.
Anything of a scan the analysis cannot keep stacked pins the stack, with the reason: a
stacked leaf also read whole or a parameter read in every iteration (shared weights), slices
that read values of different neuron blocks, per-iteration outputs (``ys``) stacked into the
output; a pin of one layer of a stack pins all of them (they keep one width).

A **chain** (groups ``1..L`` where group 1 reads the input ``x`` itself, group ``l + 1`` reads
group ``l``'s activation alone, one activation, the last group the linear output) gets its
features from the closed-form passes of the params convention (the multivariate Taylor pass) and
the paper's certificate; any other network gets them by running its own program at the
compressed widths (``fn`` must be shape-polymorphic in its parameter leaves, as nnx, linen,
Equinox modules and plain functions are; a re-trace must have the same equations). The chain's
activation is a registered one when its program matches numerically on a grid, else one built
from the program (its Taylor series from :mod:`jax.experimental.jet`) and held by the network:
compressing never writes the activation registry.
"""

from jaxcompress.graph.analysis import Analysis
from jaxcompress.graph.match import MATCH_GRID, chain_activation, match_activation
from jaxcompress.graph.network import Compressed, Network, compressed, trace
from jaxcompress.graph.plan import Plan
from jaxcompress.graph.rules import RULES, register_rule
from jaxcompress.graph.table import format_table
from jaxcompress.graph.values import Consumer, Group

__all__ = ["MATCH_GRID", "RULES", "Analysis", "Compressed", "Consumer", "Group", "Network",
           "Plan", "chain_activation", "compressed", "format_table", "match_activation",
           "register_rule", "trace"]
