"""``python -m autograder.sandbox CONNECTION_FILE [KERNEL ARGS...]``: the grading kernelspec's command."""

import sys

from .sandbox import main

main(sys.argv[1:])
