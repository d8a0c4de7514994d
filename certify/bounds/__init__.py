"""Certified upper bounds on Lipschitz constants of attention, and the Theorem 3.1 witness (MATH.md sections 3-4, 7)."""

from ._castin import castin_bound as castin_bound
from ._factorised import factorised_bound as factorised_bound, factorised_weight_factors as factorised_weight_factors
from ._lambert import phi as phi, phi_inverse as phi_inverse
from ._paper import (
    paper_bound as paper_bound,
    paper_bound_tensor as paper_bound_tensor,
    paper_constant as paper_constant,
    paper_weight_factor as paper_weight_factor,
    require_global_lipschitz as require_global_lipschitz,
)
from ._registry import METHODS as METHODS, Method as Method, register as register
from ._rounding import round_up as round_up
from ._universal import (
    UniversalConstant as UniversalConstant,
    default_constant as default_constant,
    universal_constant as universal_constant,
)
from ._witness import Witness as Witness, dp_witness as dp_witness
from ._local import local_bound as local_bound  # local certified bounds by branch and bound (MATH.md section 7)
from ._global_l2 import GlobalL2Result as GlobalL2Result, global_l2_constant as global_l2_constant
from ._global_l2_tail import tail_bound as global_l2_tail_bound
