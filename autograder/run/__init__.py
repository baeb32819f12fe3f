"""Stage 4, the run: nbgrader grades each submission, its notebook on a sandboxed kernel.

In: student id -> notebook (from intake), the lab's source in the course gradebook, its grading
edition and the sandbox settings.
Out: the course folder as nbgrader keeps it (``submitted/``, ``autograded/``, ``feedback/``, scores
in ``gradebook.db``), and per student the reason it could not be graded or should be looked at again.

- :mod:`.batch`         takes the submissions in, collects them, grades chunks in worker processes and
  merges the results; skips what is graded already;
- :mod:`.nbgrader_run`  runs nbgrader's converters and validator with the course configuration;
- :mod:`.execute`       nbgrader's Execute step as the course grades (time, output, kernel deaths);
- :mod:`.merge`         copies one graded submission from a worker's gradebook into the course's.
"""
