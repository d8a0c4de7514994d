"""Dask clients for the distributed branch and bound: a fresh ``distributed.LocalCluster`` (processes, one thread
each) or an existing scheduler reached by address, e.g. one started by dask-jobqueue on SLURM / PBS (README,
"Running on a cluster"). Failures become ``ClusterError`` with the address and the reason."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .._errors import ClusterError


@contextmanager
def dask_client(workers: int = 2, scheduler: str | None = None, *, timeout: float = 20.0,
                memory_limit: str | float = "auto") -> Iterator["distributed.Client"]:  # noqa: F821
    """A ``distributed.Client``, closed (with its cluster, if it started one) on exit.

    ``scheduler`` None: a LocalCluster of ``workers`` worker processes, one thread each (``threads_per_worker=1``:
    the box evaluations are single-threaded numpy / numba), no dashboard. Otherwise the address of a running
    scheduler (``tcp://host:8786``); ``ClusterError`` if it does not answer within ``timeout`` seconds. The
    workers of an existing cluster must be able to import ``certify`` (the same version as the coordinator).
    """
    try:
        import distributed
    except ImportError as error:  # pragma: no cover - a declared dependency
        raise ClusterError("the Dask engine needs the 'distributed' package: "
                           "pip install 'dask[distributed]'") from error
    if scheduler is None:
        if not (isinstance(workers, int) and workers >= 1):
            raise ClusterError(f"workers must be an integer >= 1, got {workers!r}")
        try:
            cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                               dashboard_address=None, memory_limit=memory_limit)
        except Exception as error:
            raise ClusterError(f"could not start a local Dask cluster of {workers} workers: {error}") from error
        try:
            with distributed.Client(cluster) as client:
                yield client
        finally:
            cluster.close()
        return
    try:
        client = distributed.Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError, ValueError, TypeError) as error:
        raise ClusterError(f"cannot reach the Dask scheduler at {scheduler!r} within {timeout:g} s "
                           f"({type(error).__name__}: {error})") from error
    with client:
        yield client
