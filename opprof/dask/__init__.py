"""opprof on a Dask cluster: ``with opprof.dask.profile(client) as prof:`` gives ``prof.trace``,
one trace of every worker process (its Dask tasks, its opprof engine) and the client.

Needs ``distributed`` (``pip install opprof[dask]``); importing ``opprof`` alone does not load it.
"""

from .merge import DASK_CATEGORY, WorkerRecords, merge
from .session import DaskProfile, DaskProfileError, client_for, profile
from .worker import OpprofWorkerPlugin

__all__ = [
    "DASK_CATEGORY", "DaskProfile", "DaskProfileError", "OpprofWorkerPlugin", "WorkerRecords",
    "client_for", "merge", "profile",
]  # fmt: skip
