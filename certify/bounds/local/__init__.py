"""Local certified bounds by branch and bound over boxes of inputs X (MATH.md section 7).

`_search` is the branch and bound (`local_bound`); `_domain` covers Ball(R) and eps-balls by boxes; `_enclosure`
(with forward-mode `_dual`) encloses J over a box entrywise; `_structured` bounds ||J|| on a box from the norms of
its parts; `_taylor` is the first-order Taylor form about a point (also the `taylor` method), whose remainder
`_slopes` bounds for DP layers from the building blocks of J; `_vertex` the first-order form maximised over a small
box's vertices.
"""

from ._enclosure import (
    const as const,
    l2_scores as l2_scores,
    numpy_weights as numpy_weights,
    point_einsum as point_einsum,
    token_differences as token_differences,
)
from ._streamed import streamed_bound as streamed_bound
from ._search import LowerSearch as LowerSearch, local_bound as local_bound
from ._taylor import MEMORY_LIMIT as MEMORY_LIMIT, memory_estimate as memory_estimate, taylor_bound as taylor_bound
from ._taylor import resolve_seeds as resolve_seeds
