"""Stage 5, feedback: what a student, and an instructor's browser, may see of a graded notebook.

In: a notebook the grading kernel ran (every output attacker-controlled), as nbgrader's Autograde
and GenerateFeedback pass it through the preprocessors and HTML filter that
:func:`autograder.config.course_config` names (by string: the run stage does not import this one).
Out: the autograded copy that renders inertly, and feedback pages with hidden tests redacted.

- :mod:`.feedback`   the two preprocessors: :class:`~autograder.feedback.feedback.SanitizeNotebook`,
  :class:`~autograder.feedback.feedback.SafeFeedback`;
- :mod:`.safe_html`  the notebook and HTML sanitizer they (and the ``clean_html`` filter) use.
"""
