"""jaxcompress: width-independent compression of deep analytic MLPs by derivative matching.

A network is a plain params pytree (a list of Flax-``Dense``-layout layers); a compression method
is a value. The core call is

>>> import jax, jaxcompress as jc
>>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
>>> small, info = jc.compress(params, jc.derivative_matching(4), activation="sigmoid",
...                           domain=jc.Ball(2, 1.0))
>>> jc.layer_sizes(small)
[2, 15, 15, 1]

and the paper's one-liner ``jc.compress(params, activation="sigmoid", order=4, radius=1.0)`` is
shorthand for the same call.

References:
  Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks".
"""

from jaxcompress.activations import (
    Activation,
    get_activation,
    register_activation,
    registered_activations,
)
from jaxcompress.certificates import (
    BoundRule,
    Certificate,
    LayerCertificate,
    certify,
    get_bound_rule,
    register_bound_rule,
)
from jaxcompress.compression import (
    CompressInfo,
    LayerInfo,
    compress,
    compress_layer,
    compressor,
    trim,
    trim_info,
)
from jaxcompress.domains import Ball, Box, Domain, Parameterization, Points
from jaxcompress.features import (
    CollocationFeatures,
    DataFeatures,
    DerivativeFeatures,
    FeatureMap,
    LayerFeatures,
    derivative_features,
    point_features,
)
from jaxcompress.frontier import Frontier, FrontierRow
from jaxcompress.graph import Compressed, Network, trace
from jaxcompress.io import LoadedNetwork, load, load_npz, save, save_npz
from jaxcompress.measure import error_estimate, sup_error
from jaxcompress.methods import (
    BestOf,
    Method,
    best_of,
    collocation,
    data_matching,
    derivative_matching,
)
from jaxcompress.mlp import apply, init_mlp, layer_sizes, num_params, validate_params
from jaxcompress.modules import CompressedModule, ModuleNetwork, trace_module
from jaxcompress.networks import shard
from jaxcompress.polishing import PolishHistory, polish
from jaxcompress.profile import DataProfile, data_profile, intrinsic_dimension
from jaxcompress.select import (
    OMP,
    Exhaustive,
    GreedyGS,
    MaxVol,
    PivotedQR,
    RandomChoice,
    Selection,
    Selector,
    WeightNorm,
    greedy_pivoted_qr,
    select_columns,
)
from jaxcompress.shrink import PolishSettings, frontier
from jaxcompress.taylor import monomials, num_monomials
from jaxcompress.tolerance import (
    Certified,
    Measured,
    ToleranceResult,
    ToleranceStrategy,
    compress_to_tolerance,
)

__version__ = "0.1.0"

__all__ = [
    "Activation",
    "Ball",
    "BestOf",
    "BoundRule",
    "Box",
    "Certificate",
    "Certified",
    "CollocationFeatures",
    "CompressInfo",
    "Compressed",
    "CompressedModule",
    "DataFeatures",
    "DataProfile",
    "DerivativeFeatures",
    "Domain",
    "Exhaustive",
    "FeatureMap",
    "Frontier",
    "FrontierRow",
    "GreedyGS",
    "LayerCertificate",
    "LayerFeatures",
    "LayerInfo",
    "LoadedNetwork",
    "MaxVol",
    "Measured",
    "Method",
    "ModuleNetwork",
    "Network",
    "OMP",
    "Parameterization",
    "PivotedQR",
    "Points",
    "PolishHistory",
    "PolishSettings",
    "RandomChoice",
    "Selection",
    "Selector",
    "ToleranceResult",
    "ToleranceStrategy",
    "WeightNorm",
    "apply",
    "best_of",
    "certify",
    "collocation",
    "compress",
    "compress_layer",
    "compress_to_tolerance",
    "compressor",
    "data_matching",
    "data_profile",
    "derivative_features",
    "derivative_matching",
    "error_estimate",
    "frontier",
    "get_activation",
    "get_bound_rule",
    "greedy_pivoted_qr",
    "init_mlp",
    "intrinsic_dimension",
    "layer_sizes",
    "load",
    "load_npz",
    "monomials",
    "num_monomials",
    "num_params",
    "polish",
    "point_features",
    "register_activation",
    "register_bound_rule",
    "registered_activations",
    "save",
    "save_npz",
    "select_columns",
    "shard",
    "sup_error",
    "trace",
    "trace_module",
    "trim",
    "trim_info",
    "validate_params",
]
