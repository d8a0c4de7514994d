"""Errors that `certify` raises on bad input or failed certification.

Every error is a `CertifyError` (a `ValueError`), so a caller can catch them all; the CLI prints the message and
exits with status 2. No error is ever turned into a number.
"""


class CertifyError(ValueError):
    """Base class: the input cannot be certified as given, and the message says why."""


class InvalidInputError(CertifyError):
    """Shapes that do not match, NaN or Inf entries, N < 1, unknown options."""


class BudgetExceeded(InvalidInputError):
    """A one-pass method cannot finish within its time budget (predicted before starting, or extrapolated from
    the part measured so far): it certifies nothing, since a partial pass proves nothing."""


class NotLipschitzError(CertifyError):
    """A global bound was asked of a map that has none (dot-product attention, untied L2 attention)."""


class CheckpointError(CertifyError):
    """A checkpoint could not be read, or holds something that is not an attention layer or a branch-and-bound state
    (certify.distributed)."""


class ClusterError(CertifyError):
    """A Dask cluster could not be reached or started, or lost every worker (certify.distributed)."""


class SolverError(CertifyError):
    """A numerical solver failed and no certified fallback applies."""
