"""Syncs at the end of every ``optimizer.step()`` on disc parameters, so an
unmodified training script runs one graph per step without ``mark_step``."""
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import _C

_handle = None


def _has_disc_params(optimizer: torch.optim.Optimizer) -> bool:
    for group in optimizer.param_groups:
        for p in group["params"]:
            return p.device.type == "disc"
    return False


def _after_step(optimizer, args, kwargs) -> None:
    if _has_disc_params(optimizer):
        _C.sync("optimizer_step")


def install() -> None:
    global _handle
    if _handle is None:
        _handle = register_optimizer_step_post_hook(_after_step)
