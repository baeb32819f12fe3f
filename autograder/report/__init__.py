"""Stage 6, the report: grades out of the gradebook, for the instructor and the LMS.

In: the course gradebook and the grading notes (why a student was not graded, why to look again).
Out: ``grades.csv``, ``exercises.csv``, ``summary_<lab>.md``, the table and progress shown on the
terminal, and the file an LMS imports (Canvas's gradebook CSV, Moodle's grading worksheet).

- :mod:`.report`   the grades files, the printed table and the grading notes;
- :mod:`.export`   a lab's grades in an LMS's import format;
- :mod:`.console`  what the course tool shows on the terminal (children's chatter to a log).
"""
