"""Entry point for ``python -m benchmarks``: the MNIST step benchmark, then
the MiniLM-L6 (BERT) one.

    python -m benchmarks [MNIST options] [--bert [BERT options]]

Options before ``--bert`` go to ``benchmarks.mnist_step``, those after it to
``benchmarks.bert_step`` (e.g. ``python -m benchmarks --bert --quick``).
"""

import sys

from benchmarks import bert_step, mnist_step

argv = sys.argv[1:]
split = argv.index("--bert") if "--bert" in argv else len(argv)
mnist_step.main(argv[:split])
print()
bert_step.main(argv[split + 1:])
