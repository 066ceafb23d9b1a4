"""jaxcompress: width-independent compression of deep analytic MLPs by derivative matching.

A network is your own JAX function and its parameter pytree (a list of Flax-``Dense``-layout
layers is the simplest case); a compression method is a value. The core call is

>>> import jax, jaxcompress as jc
>>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
>>> small, info = jc.compress(params, jc.derivative_matching(4), activation="sigmoid",
...                           domain=jc.Ball(2, 1.0))
>>> jc.layer_sizes(small)
[2, 15, 15, 1]

and the paper's one-liner ``jc.compress(params, activation="sigmoid", order=4, radius=1.0)`` is
shorthand for the same call.

The top level holds what a newcomer calls in the first hour: the verbs, the methods, the
domains, the kinds of network and the few records they return. The rest lives in submodules,
documented there: the selectors (:mod:`jaxcompress.select`), the feature maps
(:mod:`jaxcompress.features`), the activations' registry (:mod:`jaxcompress.activations`), the
certificates' parts (:mod:`jaxcompress.certificates`), the trace's rules
(:mod:`jaxcompress.graph`), files (:mod:`jaxcompress.io`), the per-layer step and trimming
records (:mod:`jaxcompress.compression`), the searches (:mod:`jaxcompress.tolerance`,
:mod:`jaxcompress.shrink`), polishing (:mod:`jaxcompress.polishing`), the network protocol
(:mod:`jaxcompress.protocol`), the proven bound's parts (:mod:`jaxcompress.verification`).

References:
  Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks".
"""

from jaxcompress.activations import register_activation
from jaxcompress.certificates import Certificate, certify
from jaxcompress.checker import check
from jaxcompress.compression import CompressInfo, compress, compressor, trim
from jaxcompress.domains import Ball, Box, Parameterization, Points
from jaxcompress.graph import Compressed, Network, trace
from jaxcompress.io import LoadedNetwork, load, save
from jaxcompress.measure import error_estimate, sup_error
from jaxcompress.methods import Method, best_of, collocation, data_matching, derivative_matching
from jaxcompress.mlp import apply, init_mlp, layer_sizes, num_params
from jaxcompress.modules import ModuleNetwork, trace_module
from jaxcompress.networks import shard
from jaxcompress.pareto import Frontier
from jaxcompress.polishing import polish
from jaxcompress.profile import DataProfile, data_profile
from jaxcompress.select import OMP, MaxVol, PivotedQR
from jaxcompress.shrink import PolishSettings, frontier
from jaxcompress.tolerance import (
    Certified,
    Measured,
    MeasuredOrders,
    ToleranceResult,
    Verified,
    compress_to_tolerance,
)
from jaxcompress.verification import Verification, verify

__version__ = "0.1.0"

__all__ = [
    "Ball",
    "Box",
    "Certificate",
    "Certified",
    "CompressInfo",
    "Compressed",
    "DataProfile",
    "Frontier",
    "LoadedNetwork",
    "MaxVol",
    "Measured",
    "MeasuredOrders",
    "Method",
    "ModuleNetwork",
    "Network",
    "OMP",
    "Parameterization",
    "PivotedQR",
    "Points",
    "PolishSettings",
    "ToleranceResult",
    "Verification",
    "Verified",
    "apply",
    "best_of",
    "certify",
    "check",
    "collocation",
    "compress",
    "compress_to_tolerance",
    "compressor",
    "data_matching",
    "data_profile",
    "derivative_matching",
    "error_estimate",
    "frontier",
    "init_mlp",
    "layer_sizes",
    "load",
    "num_params",
    "polish",
    "register_activation",
    "save",
    "shard",
    "sup_error",
    "trace",
    "trace_module",
    "trim",
    "verify",
]
