"""An independent check of :func:`jaxcompress.verify`'s certificates: :func:`check` proves one
again from the file alone in Arb ball arithmetic (python-flint) and exact rationals, reading only
NumPy, python-flint and the standard library (not the verifier, JAX or ``libm``)."""

from jaxcompress.checker.fileformat import CertificateError
from jaxcompress.checker.prove import CheckReport, check

__all__ = ["CertificateError", "CheckReport", "check"]
