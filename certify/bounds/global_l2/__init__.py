"""The global L2 branch and bound (MATH.md sections 2 and 7): certified c_p(N, d) = sup_Y ||M(Y)||_p over projected
configurations Y.

`_search` is the branch and bound (`global_l2_constant`); `_domain` the search domains modulo symmetry;
`_enclosure` the interval enclosure of M and its derivatives over a box of parameters; `_mean_value` the
mean-value / Taylor box bounds; `_split` the split bound for boxes whose groups lie far apart; `_tail` the
cluster / tail bound (proofs/tail_bound.py); `_lower` the attained lower bounds.
"""

from ._search import GlobalL2Result as GlobalL2Result, global_l2_constant as global_l2_constant
from ._tail import tail_bound as tail_bound
