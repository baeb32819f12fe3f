"""Stage 1, intake: from what an instructor downloaded to one checked notebook per student.

In: a folder or zip of submissions (an LMS bulk download: Moodle, Canvas, Blackboard, Gradescope;
nbgrader's ``submitted/``; ``<student>/<lab>.ipynb``) and optionally a mapping file of student ids.
Out: student id -> notebook path, with nbgrader's exchange files and the LMS's people
(:class:`~autograder.intake.submissions.Found`), or the reason a submission was refused; and the
reading of one notebook that the run stage does before nbgrader sees it.

- :mod:`.submissions`  finds each student's notebook in a folder or zip (zips bounded);
- :mod:`.lms`          whose notebook: the LMSes' file names, the mapping file, the people it named;
- :mod:`.safe_fs`      reads paths a student could have shaped: no link followed, regular files only,
  bounded (also used by the sandbox and the run stages);
- :mod:`.sanitize`     reads a notebook, demotes copied grade_ids, flags tampering with the tests.
"""
