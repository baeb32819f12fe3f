"""Beside the pipeline, authoring: the instructor's checks of the labs themselves, and the lectures.

In: the lab source (``solutions/``), its release and grading edition, the wrong-answer fixtures in
``tests/fixtures/wrong_answers/``, the lecture notebooks.
Out: sample submissions (``mlsys course all`` grades them like students'), how many wrong answers a
lab's tests catch, and the lectures' figures. Last in the order: it uses the edition and run stages.

- :mod:`.samples`             sample submissions and the wrong-answer fixtures' check;
- :mod:`.mutate`              ``mlsys course mutate``: mutation testing of a lab's tests;
- :mod:`.mutation_operators`  the mutations it makes;
- :mod:`.lectures`            renders the lecture notebooks and their figures.
"""
