"""disc's autograd integration (``torch_disc.autograd``).

* :mod:`.calling_thread`: backward passes rooted at disc tensors run on the
  calling thread instead of autograd's device worker.

This folder is the home of what disc adds to PyTorch's autograd: our own
backward formulas where PyTorch's derivative gives a poor graph, the
autograd functions of fused kernels, and the AOTAutograd glue of the
``torch.compile`` front end. The package sees it as ``torch_disc.autograd``
(``python/torch_disc/autograd`` links here).
"""
from .calling_thread import install

__all__ = ["install"]
