"""The course tool: release labs, check them, grade submissions and bundle the student kit.

Instructors reach it as ``mlsys course ...`` (see :mod:`autograder.cli`). It wraps nbgrader's own
converters (GenerateAssignment, Autograde, GenerateFeedback) and its Validator; it is not part of
the ``mlsys_lib`` wheel that students get.
"""
