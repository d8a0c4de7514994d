"""certify: certified Lipschitz constants of self-attention.

Start with `certify_layer(layer, tokens=N, norm="2")`; it returns a `Report` of `Certificate`s.
"""

from ._certify import Report as Report, certify_layer as certify_layer
from ._checkpoint import load_layer as load_layer, save_layer as save_layer
from ._errors import (
    BudgetExceeded as BudgetExceeded,
    CertifyError as CertifyError,
    CheckpointError as CheckpointError,
    ClusterError as ClusterError,
    InvalidInputError as InvalidInputError,
    NotLipschitzError as NotLipschitzError,
    SolverError as SolverError,
)
from ._domain import Ball as Ball, EpsBall as EpsBall, Global as Global
from ._result import Certificate as Certificate
from .attention import (
    AttentionWeights as AttentionWeights,
    DotProductMultiheadAttention as DotProductMultiheadAttention,
    L2MultiheadAttention as L2MultiheadAttention,
    UntiedL2MultiheadAttention as UntiedL2MultiheadAttention,
    from_torch_multihead_attention as from_torch_multihead_attention,
)
from .invertible import ContractiveL2MultiheadAttention as ContractiveL2MultiheadAttention

__version__ = "0.1.0"
