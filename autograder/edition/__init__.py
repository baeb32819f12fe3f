"""Stage 2, editions: what students get, and the library the grader shows a lab's answers.

In: the nbgrader source in ``solutions/<lab>/`` (with its ``references.txt``) and ``mlsys_lib``.
Out: the student release in ``labs/<lab>/`` (never overwriting an edit there), the lab's *grading
edition* of ``mlsys_lib`` (its references stubbed; the sandbox shows it to the kernel instead of the
library), and the student kit zip.

- :mod:`.references`     which ``mlsys_lib`` functions each lab's tests guard (the manifests);
- :mod:`.edition`        builds the grading edition of ``mlsys_lib`` for one lab;
- :mod:`.release_guard`  what a release may overwrite in ``labs/``;
- :mod:`.kit`            the library the student kit ships (later labs' exercises stubbed);
- :mod:`.bundle`         the student kit zip (with ``STUDENT_README.md``) and its audit.
"""
