"""Runs the command line (cli.py): ``python tests/python/random_graphs --seed N``
from the repository root (with ``PYTHONPATH=.``), or ``python -m
random_graphs`` with tests/python on the path."""
import os
import sys

if not __package__:
    # Run as a directory: Python put this folder first on sys.path; its
    # parent is what makes ``random_graphs`` importable as a package (and
    # keeps the modules here from shadowing top-level ones).
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == here:
        sys.path[0] = os.path.dirname(here)
    else:
        sys.path.insert(0, os.path.dirname(here))

from random_graphs.cli import main  # noqa: E402

sys.exit(main())
