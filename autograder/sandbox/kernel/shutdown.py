"""Lets the kernel end as soon as it has answered its shutdown request, instead of lingering until killed.

ipykernel (7.x) ends a kernel in two threads that race. The *control* thread runs the
``shutdown_request`` handler, which answers and stops the main thread's loop; then, still in
``Kernel.process_control``, it flushes ``sys.stdout`` and ``sys.stderr`` and publishes an ``idle``
status, all three through the IOPub thread's event pipe (a ZMQ PUSH socket). The *main* thread,
woken by the stopped loop, runs its ``atexit`` handlers: ``IPKernelApp.close`` stops and closes
the IOPub thread, then joins the control thread. When the main thread stops IOPub first, the
control thread's send into the pipe has no peer left and blocks for ever, ``close`` waits for it,
and the kernel lives until jupyter_client's SIGTERM (``c.KernelManager.shutdown_wait_time`` / 2
later: 1.5 s per notebook, about one kernel in two). ``py-spy dump`` of such a kernel shows the
main thread in ``IPKernelApp.close`` → ``Thread.join`` and the control thread in
``IOPubThread.schedule`` → ``Socket.send``; the two stdout/stderr watcher threads blocked in
``read`` are daemons and hold nothing.

:func:`install` orders the two: the main thread's first ``atexit`` handler waits (at most
:data:`WAIT_S`) until the control thread has finished processing the shutdown request, so IOPub is
stopped only after its last sender. Then, the request answered, that handler ends the process at
once: the interpreter's finalization (ipykernel's close, freeing every module, Numba's and LLVM's
clean-up) took about a second per notebook with the library imported, for a sandbox that vanishes
with the process anyway. A kernel ended any other way exits as usual.
"""

from __future__ import annotations

import atexit
import os
import threading

#: Most seconds the main thread waits at exit for the control thread to finish the shutdown request.
WAIT_S = 5.0


def install() -> None:
    """Make this kernel's main thread wait, at exit, for the control thread's end of a shutdown request.

    Called inside the kernel at start-up (:func:`autograder.sandbox.kernel.install`), after
    ipykernel registered ``IPKernelApp.close`` with ``atexit``, so this handler runs before it.
    """
    from ipykernel.kernelapp import IPKernelApp

    kernel = IPKernelApp.instance().kernel
    asked, answered = threading.Event(), threading.Event()
    handler = kernel.control_handlers["shutdown_request"]
    process = kernel.process_control

    async def shutdown_request(stream, ident, parent):
        asked.set()
        return await handler(stream, ident, parent)

    async def process_control(msg):
        try:
            return await process(msg)
        finally:
            if asked.is_set():  # control messages are processed one at a time: this one asked
                answered.set()

    kernel.control_handlers["shutdown_request"] = shutdown_request
    kernel.process_control = process_control
    atexit.register(_end, asked, answered)


def _end(asked: threading.Event, answered: threading.Event) -> None:
    """At exit: once the shutdown request is answered, end the process without finalization."""
    if asked.is_set() and answered.wait(WAIT_S):
        os._exit(0)
