"""Stage 3, the sandbox: where and how a submission's code runs while it is graded.

In: a kernel connection file from nbgrader and the sandbox settings (limits, the lab's grading
edition, the digests of its test cells: :func:`autograder.config.sandbox_settings`).
Out: a grading kernel inside bubblewrap, and what it did wrong: ``<connection>.report.jsonl``
(the kernel guard's and the supervisor's reports) and the kernel's console log.

- :mod:`.sandbox`  the kernelspec's command (``python -m autograder.sandbox``, via ``__main__``):
  the supervisor outside, bubblewrap and the limits;
- :mod:`.kernel`   what runs inside the kernel (start-up, memory hook, tamper guard).

The sandbox shows the kernel ``autograder/sandbox/kernel`` and, above it, this file and
``autograder/__init__.py`` (nothing else of ``autograder``): so this file imports nothing, and
:mod:`.kernel` imports nothing of ``autograder`` but itself.
"""
