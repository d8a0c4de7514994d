"""The global L2 branch and bound on a Dask cluster, resumable from checkpoints (MATH.md section 7; issue 19).

``dask_global_l2_constant(N, d, norm, client)`` certifies c_p(N, d) = sup_Y ||M(Y)||_p like
``certify.bounds.global_l2_constant``, with batches of boxes evaluated on the workers of a ``distributed.Client``
(``dask_client``: a LocalCluster of worker processes, or an existing scheduler by address). The coordinator keeps the
frontier, the lower bound and the certified bound, and checkpoints them (``save_checkpoint``, atomic);
``resume_global_l2_constant(FILE, client)`` continues a stopped search. The single-process search needs none of this.

Sweeps of independent work units (the tightness sweep: ``dask_tightness``; any other: ``run_sweep``) run on the same
clients, checkpointed after each finished unit and resumable (``_sweep``).

`_engine` the coordinator; `_tasks` the work unit; `_checkpoint` the checkpoint file; `_cluster` the clients;
`_sweep` the sweeps; `_simulated` a sleeping work unit for benchmarks/distributed.py --simulate.
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
from ._sweep import (
    Sweep as Sweep,
    SweepStats as SweepStats,
    dask_tightness as dask_tightness,
    load_sweep as load_sweep,
    run_sweep as run_sweep,
    save_sweep as save_sweep,
)
