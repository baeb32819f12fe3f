"""The course tool: release labs, check them, grade submissions and bundle the student kit.

Instructors reach it as ``mlsys course ...`` (see :mod:`autograder.cli`). It wraps nbgrader's own
converters (GenerateAssignment, Autograde, GenerateFeedback) and its Validator; it is not part of
the ``mlsys_lib`` wheel that students get.

Its packages are the stages of the grading pipeline, in the order one submission meets them on its
way from the LMS download to ``grades.csv``; a stage imports only from the stages before it and the
shared base, never from a later one:

1. :mod:`autograder.intake`    the download -> one checked notebook per student (LMS names, safe reads);
2. :mod:`autograder.edition`   the student release and kit, and the lab's grading edition of ``mlsys_lib``;
3. :mod:`autograder.sandbox`   the grading kernel in bubblewrap, and ``kernel/``, what runs inside it;
4. :mod:`autograder.run`       nbgrader's autograde and feedback over the class, in worker processes;
5. :mod:`autograder.feedback`  what a student and a browser may see of a graded notebook;
6. :mod:`autograder.report`    ``grades.csv``, the terminal's table, the LMS's import file;
7. :mod:`autograder.authoring` beside the pipeline: sample submissions, mutation testing, lectures.

The shared base, below every stage: :mod:`autograder.paths` (where the course lives),
:mod:`autograder.cells` (the source notebooks' cells by grade_id) and :mod:`autograder.config` (the
nbgrader configuration, ``python -m autograder.config install``; ``templates/`` beside it). On top:
:mod:`autograder.course` (release, check, grade: the stages in order) and :mod:`autograder.cli`.
"""
