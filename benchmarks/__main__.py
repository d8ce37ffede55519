"""Entry point for ``python -m benchmarks``: the MNIST step benchmark, then
the MiniLM-L6 (BERT) one, then the dynamic-shapes one.

    python -m benchmarks [MNIST options] [--bert [BERT options]] [--dynamic [options]]

Options before ``--bert`` / ``--dynamic`` go to ``benchmarks.mnist_step``,
those after ``--bert`` to ``benchmarks.bert_step``, those after ``--dynamic``
to ``benchmarks.dynamic_shapes`` (e.g. ``python -m benchmarks --bert --quick
--dynamic --quick``); the two markers may come in either order.
"""

import sys

from benchmarks import bert_step, dynamic_shapes, mnist_step

MARKERS = {"--bert": "bert", "--dynamic": "dynamic"}
sections = {"mnist": [], "bert": [], "dynamic": []}
current = "mnist"
for arg in sys.argv[1:]:
    if arg in MARKERS:
        current = MARKERS[arg]
    else:
        sections[current].append(arg)
mnist_step.main(sections["mnist"])
print()
bert_step.main(sections["bert"])
print()
dynamic_shapes.main(sections["dynamic"])
