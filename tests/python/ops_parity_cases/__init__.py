"""The cases of the op parity sweep (test_ops_parity.py): each is one
function applied to a few seeded inputs, with the shapes and dtypes a
training step uses. Adding an op to the sweep is adding a ``case(...)`` to
the module of its group.

``core`` holds the input specs, ``materialize``, ``TOLERANCE`` and the case
table ``CASES``; importing this package runs the group modules in the order
of ``GROUPS``, each appending its cases to ``CASES`` (the order of the test
ids)."""
import importlib

from .core import CASES, TOLERANCE, Case, Spec, case, materialize

# Not plain imports: the order is that of the cases, and must not be sorted.
GROUPS = ("elementwise", "matmul_conv", "normalization", "reductions", "shapes", "indexing", "sorting",
          "conversions")
for _group in GROUPS:
    importlib.import_module(f"{__name__}.{_group}")

__all__ = ["CASES", "TOLERANCE", "Case", "Spec", "case", "materialize", "GROUPS"]
