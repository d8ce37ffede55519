"""``torch.disc``: the device module PyTorch looks up for the "disc" device."""
import torch

from . import _C


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    """Called by torch on the first disc tensor it makes: marks the device
    initialized, without which torch.accelerator.synchronize() returns at
    once. disc itself was set up when torch_disc was imported."""


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
    _index(device)  # there is only disc:0 to select


def synchronize(device=None) -> None:
    """Runs all pending disc work (a sync with cause "synchronize") and waits
    until it is done (on the CUDA target, the GPU's too), as
    ``torch.cuda.synchronize`` does; raises its error."""
    _index(device)  # disc:1 is an error, not a no-op
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


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 runs on every CPU disc runs on: natively with AVX512-BF16 or
    AMX, widened to float32 for GEMMs and convolutions elsewhere."""
    return True


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


# Streams and events (lazy_backend/accelerator/events.h): every disc stream names
# the one order in which graphs run, so nothing is ever reordered and
# waiting on another stream has nothing to wait for. Recording an event ends
# the current graph (a sync, cause "event"); the event completes when that
# graph has run, and elapsed_time between two timed events is the time
# graphs ran between them.

class _OnDisc(type):
    """isinstance(x, torch.disc.Stream) for any torch.Stream on disc (the
    same for Event): the constructors return torch's own objects, since
    torch's C methods (wait_stream, elapsed_time) accept no subclass."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == "disc"


class Stream(metaclass=_OnDisc):
    """``torch.Stream`` on disc, constructed as ``torch.cuda.Stream`` is."""
    _base = torch.Stream

    def __new__(cls, device=None, priority=0):
        return torch.Stream(device=f"disc:{_index(device)}", priority=priority)


class Event(metaclass=_OnDisc):
    """``torch.Event`` on disc, constructed as ``torch.cuda.Event`` is."""
    _base = torch.Event

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise RuntimeError("disc: Event(interprocess=True): disc events are not shared "
                               "between processes")
        return torch.Event(device="disc", enable_timing=enable_timing, blocking=blocking)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None) -> torch.Stream:
    index = _index(device)
    kind = current_stream(index).device_type  # c10's code for PrivateUse1
    return torch.Stream(stream_id=0, device_index=index, device_type=kind)


def set_stream(stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes ``stream`` the current disc stream inside a ``with`` block."""

    def __init__(self, stream):
        self.stream, self.before = stream, None

    def __enter__(self):
        if self.stream is not None:
            self.before = torch.accelerator.current_stream()
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.before is not None:
            torch.accelerator.set_stream(self.before)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)


# Memory statistics: PyTorch's accelerator allocator interface, kept by
# disc's allocator (lazy_backend/trace/allocator.h). A storage counts from
# the moment its value exists as data (copied in, or handed to the graph
# worker by the sync that computes it) until it is freed; a tensor that is
# only traced holds nothing. "Reserved" adds the idle blocks of the
# executor's host buffer cache, which empty_cache() returns to the system.

def memory_stats(device=None) -> dict:
    """``torch.cuda.memory_stats``'s keys (``allocated_bytes.all.current``,
    ...), plus the executor's host buffer cache (``DISC_HOST_CACHE_MB``) as
    ``host_cache.idle_bytes``, ``host_cache.in_use_bytes`` and
    ``host_cache.idle_blocks``; its hits and misses are in
    :mod:`torch_disc.metrics`."""
    stats = dict(torch.accelerator.memory_stats(_index(device)))
    stats.update({f"host_cache.{k}": v for k, v in _C.host_cache_stats().items()})
    return stats


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of host memory, where disc's buffers live."""
    return torch.accelerator.get_memory_info(_index(device))


def empty_cache() -> int:
    """Returns the idle cached host buffers to the system once the running
    graphs are done; the bytes freed (``torch.accelerator.empty_cache`` does
    the same and returns nothing)."""
    return _C.empty_host_cache()


def _index(device) -> int:
    """A device argument as torch.cuda takes them: None, an index, "disc",
    "disc:0" or a torch.device."""
    if device is None:
        return 0
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != "disc":
            raise ValueError(f"disc: expected a disc device, got {device}")
        index = device.index or 0
    if index != 0:
        raise RuntimeError(f"disc: device disc:{index} does not exist (only disc:0)")
    return index


from . import amp  # noqa: E402  (torch.disc.amp, as torch.cuda.amp)
