"""jaxcompress: width-independent compression of deep analytic MLPs by derivative matching.

A network is a plain params pytree (a list of Flax-``Dense``-layout layers). The core call is

>>> import jax, jaxcompress as jc
>>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 64, 64, 1])
>>> small, info = jc.compress(params, activation="sigmoid", order=3)
>>> jc.layer_sizes(small)
[2, 10, 10, 1]

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
from jaxcompress.compress import CompressInfo, LayerInfo, compress, compress_layer, trim
from jaxcompress.domains import Ball, Box, Parameterization
from jaxcompress.evaluate import sup_error
from jaxcompress.features import derivative_features, point_features
from jaxcompress.io import LoadedModel, load, load_npz, save, save_npz
from jaxcompress.mlp import apply, init_mlp, layer_sizes, num_params, validate_params
from jaxcompress.select import Selection, greedy_pivoted_qr, select_columns
from jaxcompress.taylor import monomials, num_monomials
from jaxcompress.tolerance import ToleranceResult, compress_to_tolerance

__version__ = "0.1.0"

__all__ = [
    "Activation",
    "Ball",
    "BoundRule",
    "Box",
    "Certificate",
    "CompressInfo",
    "LayerCertificate",
    "LayerInfo",
    "LoadedModel",
    "Parameterization",
    "Selection",
    "ToleranceResult",
    "apply",
    "certify",
    "compress",
    "compress_layer",
    "compress_to_tolerance",
    "derivative_features",
    "get_activation",
    "get_bound_rule",
    "greedy_pivoted_qr",
    "init_mlp",
    "layer_sizes",
    "load",
    "load_npz",
    "monomials",
    "num_monomials",
    "num_params",
    "point_features",
    "register_activation",
    "register_bound_rule",
    "registered_activations",
    "save",
    "save_npz",
    "select_columns",
    "sup_error",
    "trim",
    "validate_params",
]
