"""Closed-form certified bounds (MATH.md sections 2-4 and 7): Theorem 3.2 of Kim et al. (`_paper`), the factorised
bound ||G|| c_p(N, d) ||V|| with its universal constants (`_factorised`, `_universal`), Castin et al.'s local bound
for dot-product attention (`_castin`), phi^{-1}(n) = W_0(n / e) (`_lambert`) and the Theorem 3.1 witness
(`_witness`). Each is one formula, evaluated with outward rounding (`certify.bounds._rounding`)."""

from ._castin import castin_bound as castin_bound
from ._factorised import factorised_bound as factorised_bound, factorised_weight_factors as factorised_weight_factors
from ._lambert import phi as phi, phi_inverse as phi_inverse
from ._paper import (
    THEOREM_3_1 as THEOREM_3_1,
    paper_bound as paper_bound,
    paper_bound_tensor as paper_bound_tensor,
    paper_constant as paper_constant,
    paper_weight_factor as paper_weight_factor,
    require_global_lipschitz as require_global_lipschitz,
)
from ._universal import (
    UniversalConstant as UniversalConstant,
    certified_table as certified_table,
    default_constant as default_constant,
    universal_constant as universal_constant,
)
from ._witness import Witness as Witness, dp_witness as dp_witness
