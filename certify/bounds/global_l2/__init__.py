"""The global L2 branch and bound (MATH.md sections 2 and 7): certified c_p(N, d) = sup_Y ||M(Y)||_p over projected
configurations Y.

`_search` is the branch and bound (`global_l2_constant`); `_domain` the search domains modulo symmetry;
`_enclosure` the interval enclosure of M and its derivatives over a box of parameters; `_mean_value` the
mean-value / Taylor box bounds; `_split` the split bound for boxes whose groups lie far apart; `_tail` the
cluster / tail bound (proofs/tail_bound.py); `_lower` the attained lower bounds; `_frontier` the open boxes and one
refinement step. The engine's parts (plan, box evaluation, frontier, refinement, lower bounds) are exported for the
Dask engine of `certify.distributed`, which runs the same search on a cluster.
"""

from ._search import GlobalL2Result as GlobalL2Result, global_l2_constant as global_l2_constant
from ._tail import tail_bound as tail_bound

# the engine's parts, for certify.distributed
from ._frontier import Frontier as Frontier, Refinement as Refinement, refine as refine
from ._lower import core_norm as core_norm, polish as polish, search_lower as search_lower
from ._search import (
    BoxEvaluation as BoxEvaluation,
    BoxSetting as BoxSetting,
    SearchPlan as SearchPlan,
    evaluate_boxes as evaluate_boxes,
    plan_search as plan_search,
)
