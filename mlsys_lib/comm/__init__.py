"""Process groups and collectives: a simulated (multiprocessing) backend and an MPI backend, α-β costs.

* ``launch(fn, world_size, backend="sim" | "mpi", args=..., timeout=..., cost=..., protocol=...)`` runs
  ``fn(group, *args)`` on every rank and returns the results by rank. ``protocol="rendezvous"``
  (``PROTOCOLS``) makes every send wait until its receive is posted, as MPI does with large
  messages; the default "eager" buffers sends.
* :class:`ProcessGroup` (``group``): ``rank``, ``world_size``; ``send``/``recv``/``isend``/``irecv``
  (:class:`Request` ``.wait()``), ``barrier``; ``broadcast``, ``reduce``, ``scatter``, ``gather``,
  ``all_gather``, ``reduce_scatter``, ``all_reduce`` with ``algorithm`` "ring", "tree" or "naive"
  (``ALGORITHMS``) and ops "sum", "prod", "max", "min", "mean"; ``all_to_all(chunks)`` (chunk j to
  rank j, any sizes per pair) with "pairwise" or "ring"; ``clock``, ``bytes_sent``,
  ``bytes_received``, ``messages_sent``, ``messages_received``, ``reset_trace``, ``reduce_local``,
  ``compute(seconds)`` (the α-β-γ trace).
* Non-blocking collectives ``iall_reduce``, ``ireduce_scatter``, ``iall_gather`` (ring) return a
  :class:`Request` (``test()``, ``wait()``); they run in issue order on the rank's communication lane
  (``lane``: own channel, own clock), advanced by ``progress()``, so they overlap with ``compute``.
* The algorithms (``ring``, ``tree``, ``naive``, ``pairwise``) are written once on top of
  ``isend``/``recv``; a backend only moves arrays between ranks (``sim``: processes, pipes and
  shared memory; ``mpi``: mpi4py).
* ``CostModel(alpha, beta, gamma)`` and ``closed_form(op, algorithm, n, p, alpha, beta, gamma)``: the
  lecture's formulas, which the sim clock reproduces exactly (see ``cost`` for when).
* ``mpi_group()``: the group of a script started with ``mpiexec -n 4 python script.py``.
* ``data_parallel``: data-parallel SGD of softmax regression over ``all_reduce``.

Errors: :class:`RankFailedError`, :class:`DeadlockError` (every running rank waits, none can
proceed: named at once) and :class:`LaunchTimeoutError` from ``launch``; :class:`PeerFailedError`
inside a rank whose peer failed (its ``rank``: the rank that failed first);
:class:`UnfinishedRequestError` inside a rank that returns with a request of isend/irecv never
waited on; :class:`CollectiveMismatchError` on every rank of a collective whose ranks disagree
(shapes, dtypes, root, op, algorithm).
"""

from .collectives import ALGORITHMS
from .cost import CostModel, closed_form
from .data_parallel import data_parallel_sgd, sgd
from .errors import (CollectiveMismatchError, CommError, DeadlockError, LaunchTimeoutError, PeerFailedError,
                     RankFailedError, UnfinishedRequestError)
from .group import PROTOCOLS, ProcessGroup, Request
from .launch import BACKENDS, launch
from .mpi import mpi_group
from .ops import REDUCE_OPS

__all__ = [
    "launch", "BACKENDS", "PROTOCOLS", "ProcessGroup", "Request", "mpi_group",
    "ALGORITHMS", "REDUCE_OPS", "CostModel", "closed_form",
    "data_parallel_sgd", "sgd",
    "CommError", "PeerFailedError", "RankFailedError", "LaunchTimeoutError", "CollectiveMismatchError",
    "DeadlockError", "UnfinishedRequestError",
]
