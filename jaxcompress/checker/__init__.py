"""An independent check of :func:`jaxcompress.verify`'s certificates.

:meth:`Verification.save <jaxcompress.verification.Verification.save>` writes the two programs
(in a small op language of dense layers, activations, ReLU, sums, products and
concatenations), the domain, every box of the search's proof tree with each leaf's claimed
bound, and the bracket. :func:`check` proves it again from the file alone, in rigorous ball
arithmetic (python-flint's Arb) with its own enclosures of the difference
(:mod:`jaxcompress.checker.prove`), and exact rational comparisons for the covering. It reads
only NumPy, python-flint and the standard library: neither the verifier, nor JAX / XLA, nor the
platform's ``libm``.
"""

from jaxcompress.checker.fileformat import CertificateError
from jaxcompress.checker.prove import CheckReport, check

__all__ = ["CertificateError", "CheckReport", "check"]
