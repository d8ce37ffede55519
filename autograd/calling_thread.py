"""Backward passes rooted at disc tensors run on the calling thread.

PyTorch's autograd engine gives every device type other than CPU, Meta and
its own Lazy device a worker thread, and hands each backward pass to it. For
disc, whose backward "kernels" are trace records, the hand-off costs more
than the pass: two thread wake-ups and caches gone cold, about 100 us more
than the same small backward on the calling thread (measured: 105-180 us vs
25 us for ``(x * 2).sum().backward()``; an MNIST MLP step pays it once).
So ``torch.autograd.backward`` / ``grad`` turn the engine's worker threads
off for the duration of a call whose roots are disc tensors, as PyTorch does
for its Lazy device. Other calls are untouched.
"""
import functools

import torch

_WRAPPED = "_disc_calling_thread"


def _has_disc(tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "disc" for t in tensors)


def _on_calling_thread(original, first_arg: str):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        roots = args[0] if args else kwargs.get(first_arg)
        if not isinstance(roots, torch.Tensor) and roots is not None:
            roots = tuple(roots)  # a generator must survive being looked at
            if args:
                args = (roots,) + args[1:]
            else:
                kwargs[first_arg] = roots
        seq = (roots,) if isinstance(roots, torch.Tensor) else roots or ()
        if not _has_disc(seq) or not torch._C._is_multithreading_enabled():
            return original(*args, **kwargs)
        torch._C._set_multithreading_enabled(False)
        try:
            return original(*args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(True)

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def install() -> None:
    if not getattr(torch.autograd.backward, _WRAPPED, False):
        torch.autograd.backward = _on_calling_thread(torch.autograd.backward, "tensors")
    if not getattr(torch.autograd.grad, _WRAPPED, False):
        torch.autograd.grad = _on_calling_thread(torch.autograd.grad, "outputs")
