"""``torch.disc.amp``: automatic mixed precision on disc, where PyTorch's
device modules keep it (``torch.cuda.amp``). The op policy is the CPU's
(lazy_backend/accelerator/autocast.cpp); the lower-precision dtype defaults to
bfloat16, as on the CPU::

    >>> with torch.disc.amp.autocast():            # or torch.autocast("disc")
    ...     loss = model(x).float().pow(2).mean()
    >>> scaler = torch.disc.amp.GradScaler()        # for float16
"""
import torch


class autocast(torch.amp.autocast):
    """``torch.autocast("disc", ...)``."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.bfloat16,
                 cache_enabled: bool = True):
        super().__init__("disc", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("disc", ...)``: loss scaling for float16."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        super().__init__("disc", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
