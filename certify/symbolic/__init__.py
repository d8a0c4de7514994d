"""Symbolic layer: SymPy builders of attention maps and Jacobians, the bound expressions, a lambdified oracle,
and the exact constant for N = 2 (MATH.md sections 2-4). The proofs in `proofs/` are built on these.
"""

from ._bounds import BoundExpression as BoundExpression
from ._bounds import N as N
from ._bounds import d as d
from ._bounds import factorised_bound_expr as factorised_bound_expr
from ._bounds import paper_bound_expr as paper_bound_expr
from ._bounds import phi_inverse_expr as phi_inverse_expr
from ._bounds import universal_constant_bound_expr as universal_constant_bound_expr
from ._bounds import weight_norms as weight_norms
from ._exact import exact_constant_n2 as exact_constant_n2
from ._exact import exact_constant_n2_interval as exact_constant_n2_interval
from ._exact import maximiser_enclosure as maximiser_enclosure
from ._jacobians import attention_jacobian as attention_jacobian
from ._jacobians import block as block
from ._jacobians import core_closed_form as core_closed_form
from ._jacobians import differentiate as differentiate
from ._jacobians import dp_closed_form as dp_closed_form
from ._jacobians import from_blocks as from_blocks
from ._jacobians import generalise_exponentials as generalise_exponentials
from ._jacobians import is_zero_rational as is_zero_rational
from ._jacobians import l2_closed_form as l2_closed_form
from ._jacobians import matrices_equal as matrices_equal
from ._jacobians import softmax_jacobian_row as softmax_jacobian_row
from ._maps import SymbolicWeights as SymbolicWeights
from ._maps import attention as attention
from ._maps import core_map as core_map
from ._maps import dp_head as dp_head
from ._maps import l2_head as l2_head
from ._maps import softmax_rows as softmax_rows
from ._maps import squared_distance_logits as squared_distance_logits
from ._maps import symbol_matrix as symbol_matrix
from ._maps import symbolic_input as symbolic_input
from ._maps import symbolic_weights as symbolic_weights
from ._maps import untied_l2_head as untied_l2_head
from ._oracle import attention_matrix_function as attention_matrix_function
from ._oracle import core_jacobian_function as core_jacobian_function
from ._oracle import jacobian_function as jacobian_function
from ._oracle import oracle_jacobian as oracle_jacobian
