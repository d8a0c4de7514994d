"""Adversarial lower bounds on Lipschitz constants: inputs with large Jacobian norm (MATH.md sections 5 and 7).

`lower_bound` is the search (batched restarts, cluster-reduced and matrix-free objectives, structured starts);
`tightness` and `plot_tightness` run the paper's Sec. 5.1 experiment; `naive_lower_bound` is the benchmark baseline; `LOCAL_LOWER_SEARCH` steers the local branch and bound.
"""

from ._attained import attained_norm as attained_norm
from ._clusters import cluster_norm as cluster_norm, expand as expand, round_multiplicities as round_multiplicities
from ._domains import natural_scale as natural_scale, project as project, starting_points as starting_points
from ._figure import plot_tightness as plot_tightness
from ._lower_search import LOCAL_LOWER_SEARCH as LOCAL_LOWER_SEARCH
from ._naive import NaiveResult as NaiveResult, naive_lower_bound as naive_lower_bound
from ._objectives import PowerIteration as PowerIteration, query_output as query_output, row_block as row_block
from ._search import default_device as default_device, lower_bound as lower_bound
from ._starts import castin_starts as castin_starts, lemma_starts as lemma_starts
from ._tightness import (
    CONFIGS as CONFIGS,
    TightnessPoint as TightnessPoint,
    TightnessRow as TightnessRow,
    config_weights as config_weights,
    tightness as tightness,
    tightness_points as tightness_points,
    tightness_row as tightness_row,
)
