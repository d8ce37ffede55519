"""``torch.disc``: the device module PyTorch looks up for the "disc" device."""
import torch

from . import _C


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


# Read (not called) by torch.utils.checkpoint before it saves and restores a
# device's RNG state for the recomputed forward: without it, a checkpointed
# dropout draws a new mask in backward.
_initialized = True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    index = torch.device(device).index if not isinstance(device, int) else device
    if index not in (None, 0):
        raise RuntimeError(f"disc: device disc:{index} does not exist (only disc:0)")


def synchronize(device=None) -> None:
    """Runs all pending disc work (a sync with cause "synchronize") and waits
    until it is done (on the CUDA target, the GPU's too), as
    ``torch.cuda.synchronize`` does; raises its error."""
    _C.sync("synchronize")
    _C.wait()
    if _C.target() == "cuda":  # the graphs' CUDA kernels have been queued, not run
        torch.cuda.synchronize()


def manual_seed(seed: int) -> None:
    _C.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


manual_seed_all = manual_seed


def seed() -> None:
    _C.seed()


seed_all = seed


def initial_seed() -> int:
    return _C.initial_seed()


def get_rng_state(device="disc") -> torch.Tensor:
    """16 bytes: the generator's seed and offset."""
    return _C.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device="disc") -> None:
    _C.set_rng_state(new_state)


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


class device:
    """Context manager selecting a disc device (there is only disc:0)."""

    def __init__(self, device):
        set_device(device if device is not None else 0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def memory_stats() -> dict:
    """The compiled executor's host buffer cache (``DISC_HOST_CACHE_MB``):
    ``idle_bytes`` cached for reuse, ``in_use_bytes`` handed out from it,
    ``idle_blocks``. Hits and misses are in :mod:`torch_disc.metrics`
    (``host_cache.hits`` / ``host_cache.misses``)."""
    return dict(_C.host_cache_stats())


def empty_cache() -> int:
    """Returns the idle cached host buffers to the system; the bytes freed."""
    return _C.empty_host_cache()


from . import amp  # noqa: E402  (torch.disc.amp, as torch.cuda.amp)
