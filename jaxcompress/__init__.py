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
records (:mod:`jaxcompress.compression`), the search (:mod:`jaxcompress.search`: its
proposers, judges and candidates), polishing (:mod:`jaxcompress.polishing`), the network protocol
(:mod:`jaxcompress.protocol`), the proven bound's parts (:mod:`jaxcompress.verification`).

References:
  Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks".
"""

import importlib

#: The public names by the module that defines them. Each is imported on first use (PEP 562):
#: ``import jaxcompress`` costs nothing until a name is used, so the command line parses its
#: arguments and prints its help without importing JAX.
_PUBLIC = {
    "activations": ("register_activation",),
    "certificates": ("Certificate", "certify"),
    "checker": ("check",),
    "compression": ("CompressInfo", "compress", "compressor", "trim"),
    "domains": ("Ball", "Box", "Parameterization", "Points"),
    "graph": ("Compressed", "Network", "trace"),
    "io": ("LoadedNetwork", "load", "save"),
    "measure": ("error_estimate", "sup_error"),
    "methods": ("Method", "best_of", "collocation", "data_matching", "derivative_matching"),
    "mlp": ("apply", "init_mlp", "layer_sizes", "num_params"),
    "modules": ("ModuleNetwork", "trace_module"),
    "networks": ("shard",),
    "polishing": ("polish",),
    "profile": ("DataProfile", "data_profile"),
    "select": ("OMP", "MaxVol", "PivotedQR"),
    "search": (
        "Certified", "Frontier", "Measured", "MeasuredOrders", "PolishSettings",
        "ToleranceResult", "Verified", "compress_to_tolerance", "frontier",
    ),
    "verification": ("Verification", "verify"),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}

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


def __getattr__(name: str):
    """A public name (imported from its module on first use) or a submodule
    (``jaxcompress.io``)."""
    module = _WHERE.get(name)
    if module is None:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
