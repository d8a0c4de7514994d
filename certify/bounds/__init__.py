"""Certified upper bounds on Lipschitz constants of attention, and the Theorem 3.1 witness (MATH.md sections 2-4, 7).

The one door: `METHODS` (`_registry`) and the names below. Inside, one sub-package per MATH.md part:

- `closed_form/`: Theorem 3.2 (paper), the factorised bound with universal constants, Castin et al., the witness;
- `local/`: the local branch and bound over boxes of inputs X on Ball(R) and eps-balls, and the Taylor form;
- `global_l2/`: the global L2 branch and bound over projected configurations, certifying c_p(N, d);

and beside them `_rounding` (outward rounding shared by all) and `_branch_and_bound` (the `bnb` / `sdp` methods).
"""

from .closed_form import (
    UniversalConstant as UniversalConstant,
    Witness as Witness,
    castin_bound as castin_bound,
    default_constant as default_constant,
    dp_witness as dp_witness,
    factorised_bound as factorised_bound,
    factorised_weight_factors as factorised_weight_factors,
    paper_bound as paper_bound,
    paper_bound_tensor as paper_bound_tensor,
    paper_constant as paper_constant,
    paper_weight_factor as paper_weight_factor,
    phi as phi,
    phi_inverse as phi_inverse,
    require_global_lipschitz as require_global_lipschitz,
    universal_constant as universal_constant,
)
from ._registry import METHODS as METHODS, Method as Method, register as register
from ._rounding import round_up as round_up
from .local import local_bound as local_bound  # local certified bounds by branch and bound (MATH.md section 7)
from .global_l2 import (
    GlobalL2Result as GlobalL2Result,
    global_l2_constant as global_l2_constant,
    tail_bound as global_l2_tail_bound,
)
