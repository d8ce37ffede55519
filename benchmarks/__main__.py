"""Entry point for ``python -m benchmarks``: runs the MNIST step benchmark."""

from benchmarks.mnist_step import main

main()
