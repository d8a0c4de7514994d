"""Certified bounds on the largest norm of a matrix in an interval matrix (MATH.md section 7).

`_lmi.py` encodes the SDP relaxation (the atom's canonicalisation); `_scaling.py` chooses multipliers without a
solver; `_certify.py` turns any multipliers into a proven bound in float64; `_floating.py` holds the rounding-error arithmetic; `_norm.py` is the entry point.
"""

from ._certify import certified_t as certified_t
from ._certify import is_certified as is_certified
from ._certify import lmi_matrix as lmi_matrix
from ._certify import perron_multipliers as perron_multipliers
from ._enclosure import MatrixEnclosure as MatrixEnclosure
from ._floating import lambda_min_lower as lambda_min_lower
from ._floating import norm2_upper as norm2_upper
from ._lmi import LMISolution as LMISolution
from ._lmi import solve_lmi as solve_lmi
from ._norm import METHODS as METHODS
from ._norm import SDPFallbackWarning as SDPFallbackWarning
from ._norm import baseline_bound as baseline_bound
from ._norm import enclosure_norm as enclosure_norm
from ._norm import inf_norm_bound as inf_norm_bound
from ._norm import magnitude_bound as magnitude_bound
from ._norm import scaled_bound as scaled_bound
