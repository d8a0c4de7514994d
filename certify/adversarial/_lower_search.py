"""The lower-bound functions the local branch and bound steers by (`certify.bounds.local.LowerSearch`).

`certify.bounds` does not import this package (bounds are certified without it); callers that want the local branch
and bound to stop at upper / lower <= tolerance pass ``lower_search=LOCAL_LOWER_SEARCH``, as `certify_layer` does
through the registry's ``compute``.
"""

from __future__ import annotations

from ..bounds.local import LowerSearch
from ._attained import attained_norm
from ._search import lower_bound

LOCAL_LOWER_SEARCH = LowerSearch(lower_bound=lower_bound, attained_norm=attained_norm)
"""The adversarial ascent (`lower_bound`) and the matrix-free, time-limited ||J(X)|| (`attained_norm`)."""
