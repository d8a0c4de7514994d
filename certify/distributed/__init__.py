"""The global L2 branch and bound on a Dask cluster, resumable from checkpoints (MATH.md section 7; issue 19).

``dask_global_l2_constant(N, d, norm, client)`` certifies c_p(N, d) = sup_Y ||M(Y)||_p like
``certify.bounds.global_l2_constant``, with batches of boxes evaluated on the workers of a ``distributed.Client``
(``dask_client``: a LocalCluster of worker processes, or an existing scheduler by address). The coordinator keeps the
frontier, the lower bound and the certified bound, and checkpoints them (``save_checkpoint``, atomic);
``resume_global_l2_constant(FILE, client)`` continues a stopped search. The single-process search needs none of this.

`_engine` the coordinator; `_tasks` the work unit; `_checkpoint` the checkpoint file; `_cluster` the clients.
"""

from ._checkpoint import (
    Checkpoint as Checkpoint,
    SearchState as SearchState,
    load_checkpoint as load_checkpoint,
    save_checkpoint as save_checkpoint,
)
from ._cluster import dask_client as dask_client
from ._engine import (
    EngineStats as EngineStats,
    dask_global_l2_constant as dask_global_l2_constant,
    resume_global_l2_constant as resume_global_l2_constant,
)
