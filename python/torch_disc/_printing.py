"""Printing a disc tensor is a sync with cause "print".

torch's formatter computes statistics (masked_select, isfinite...) on the
tensor's own device, except for a few devices it moves to CPU first; disc is
not among them, so without this every print would also run a CPU fallback.
The device suffix (device='disc:0') is kept: only the values are formatted
from the CPU copy.
"""
import torch
import torch._tensor_str as _tensor_str_module

from . import _C

_original = _tensor_str_module._tensor_str


def _disc_tensor_str(self, indent):
    if self.device.type == "disc":
        _C.sync("print")
        self = self.cpu()
    return _original(self, indent)


def install() -> None:
    if _tensor_str_module._tensor_str is not _disc_tensor_str:
        _tensor_str_module._tensor_str = _disc_tensor_str
