"""The simulator worker of :mod:`mlsys_lib.kernels.sim.replay`: ``python -m mlsys_lib.kernels.sim.replay_worker``.

It runs with ``MLSYS_DEVICE=sim`` (``python -m`` imports ``mlsys_lib`` first, which selects the
simulator), reads one pickled launch after another on standard input, runs each under its own
``instrument()`` and answers each with the pickled launch record, arguments, output and error.
"""

from __future__ import annotations

import io
import linecache
import os
import pickle
from contextlib import redirect_stderr, redirect_stdout

from .instrumentation import instrument
from .replay import _receive, _send
from .report import Report


def _replay(request: bytes) -> bytes:
    """Run one pickled launch under ``instrument()``; the pickled record, arguments, output and error.

    An error before the launch (a module the kernel needs that this process cannot import) comes back
    without a record, as one raised by the kernel comes back with its launch's record.
    """
    printed, warned = io.StringIO(), io.StringIO()
    report, args, error = Report(), (), None
    try:
        message = pickle.loads(request)
        for filename, lines in message["lines"].items():
            if lines:
                linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        kernel, args = pickle.loads(message["kernel"])
        with instrument(message["limit"]) as report, redirect_stdout(printed), redirect_stderr(warned):
            kernel[message["grid"], message["block"], 0, message["sharedmem"]](*args)
    except Exception as raised:
        error = _portable(raised)
    reply = {"record": report.launches[0] if report.launches else None, "args": args,
             "stdout": printed.getvalue(), "stderr": warned.getvalue(), "error": error}
    try:
        return pickle.dumps(reply)
    except Exception as unsent:  # an argument pickle cannot carry: the caller's arrays stay as they were
        return pickle.dumps(reply | {"args": (), "error": RuntimeError(f"the launch's results cannot be sent back: "
                                                                       f"{unsent}")})


def _portable(error: Exception) -> Exception:
    """The exception if it survives pickling, else a RuntimeError carrying its type's name and message."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _serve() -> None:
    """The worker's loop: one launch per message on stdin, one reply each on the original stdout."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # a kernel reading stdin must not eat the requests
    os.dup2(2, 1)  # nor stray writes to fd 1 (C code, a child process) corrupt the replies
    while (request := _receive(requests)) is not None:
        _send(replies, _replay(request))


if __name__ == "__main__":
    _serve()
