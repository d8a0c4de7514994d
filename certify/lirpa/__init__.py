"""The auto_LiRPA bridge: bound-propagation certificates (IBP, CROWN) beside ours, on the same layers and balls,
and on whole `certify.model.Model`s (`export_model`, `crown_margins`, `model_crown_radius`).

Importing this package imports auto_LiRPA 0.3 with the compatibility patches of MATH.md section 8 (`_compat`),
and raises `LirpaUnavailableError` (a `CertifyError`) if auto_LiRPA is missing or of another version.
"""

from ._compat import (
    REQUIRED_VERSION as REQUIRED_VERSION,
    VERSION as VERSION,
    LirpaUnavailableError as LirpaUnavailableError,
    reducemax_fix as reducemax_fix,
    reducemax_fix_enabled as reducemax_fix_enabled,
)
from ._bounds import OutputBounds as OutputBounds, output_bounds as output_bounds
from ._export import LirpaAttention as LirpaAttention, export_attention as export_attention
from ._jacobian import (
    JacobianBounds as JacobianBounds,
    jacobian_bounds as jacobian_bounds,
    lirpa_lipschitz as lirpa_lipschitz,
)
from ._jvp import AttentionJVP as AttentionJVP, jacobian_directions as jacobian_directions
from ._export import LirpaClassifier as LirpaClassifier
from ._radius import (
    Radius as Radius,
    crown_radius as crown_radius,
    largest_certified as largest_certified,
    lipschitz_radius as lipschitz_radius,
)
from ._model import (
    LirpaModel as LirpaModel,
    crown_margins as crown_margins,
    export_model as export_model,
    model_crown_radius as model_crown_radius,
)
from ._compare import (
    Comparison as Comparison,
    RadiusSummary as RadiusSummary,
    attained_deviation as attained_deviation,
    compare_classifier as compare_classifier,
    compare_layer as compare_layer,
)
