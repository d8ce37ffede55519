"""MNIST / Fashion-MNIST example: IDX reader (data.py) and trainer (train.py)."""
