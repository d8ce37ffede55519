"""``torch.disc``: the device module PyTorch looks up for the "disc" device."""
import dataclasses
import os

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


def get_rng_state_all() -> list:
    """One state per device: disc has one."""
    return [get_rng_state()]


def set_rng_state_all(new_states) -> None:
    states = list(new_states)
    if len(states) != device_count():
        raise ValueError(f"disc: set_rng_state_all takes one state per device ({device_count()}), "
                         f"got {len(states)}")
    set_rng_state(states[0])


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 runs on every CPU disc runs on: natively with AVX512-BF16 or
    AMX, widened to float32 for GEMMs and convolutions elsewhere."""
    return True


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def _host_cpu_name() -> str:
    """The model name /proc/cpuinfo gives (x86: "model name", Arm: "Model"),
    else platform's."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@dataclasses.dataclass(frozen=True)
class _DeviceProperties:
    """What ``torch.cuda.get_device_properties`` says of a GPU, said of
    disc: its graphs' target, the host CPU that compiles (and, on the CPU
    target, runs) them, the instruction set they use, the host memory
    disc's buffers live in and the cores its kernels may use."""
    name: str
    type: str
    target: str
    cpu: str
    isa: str
    total_memory: int
    multi_processor_count: int


def get_device_properties(device=None) -> _DeviceProperties:
    index = _index(device)
    target, cpu = _C.target(), _host_cpu_name()
    isa = _C.build_components()["cpu_isa"]
    return _DeviceProperties(name=f"disc ({target} target; {cpu}, {isa})", type="disc",
                             target=target, cpu=cpu, isa=isa,
                             total_memory=torch.accelerator.get_memory_info(index)[1],
                             multi_processor_count=len(os.sched_getaffinity(0)))


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> dict:
    """As ``torch.accelerator.get_device_capability``: the dtypes disc takes
    (CUDA's (major, minor) has no meaning here)."""
    return torch.accelerator.get_device_capability(_index(device))


class device:
    """Context manager selecting a disc device (there is only disc:0)."""

    def __init__(self, device):
        set_device(device if device is not None else 0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class device_of(device):
    """Context manager selecting the device of a tensor (as
    ``torch.cuda.device_of``); a CPU tensor selects nothing."""

    def __init__(self, obj):
        super().__init__(obj.device if obj.device.type == "disc" else None)


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
    ``host_cache.idle_bytes``, ``host_cache.in_use_bytes``,
    ``host_cache.idle_blocks`` and ``host_cache.idle_cap_bytes`` (the most
    it keeps idle); its hits and misses are in :mod:`torch_disc.metrics`."""
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


def reset_max_memory_allocated(device=None) -> None:
    """As torch.cuda's (which calls it deprecated): resets the peaks."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of memory_stats()'s byte counts: current, peak, allocated
    and freed in all, for allocated, active and reserved memory, and the
    host buffer cache."""
    stats = memory_stats(device)
    mib = lambda n: f"{n / 2**20:12.1f} MiB"  # noqa: E731
    lines = [f"disc memory summary, device {_index(device)} ({get_device_name(device)})",
             f"{'':24}{'current':>16}{'peak':>16}{'allocated':>16}{'freed':>16}"]
    for kind in ("allocated_bytes", "active_bytes", "reserved_bytes"):
        row = [stats.get(f"{kind}.all.{k}", 0) for k in ("current", "peak", "allocated", "freed")]
        lines.append(f"{kind:24}" + "".join(f"{mib(v):>16}" for v in row))
    if not abbreviated:
        lines.append(f"{'host cache idle':24}{mib(stats.get('host_cache.idle_bytes', 0)):>16}")
        lines.append(f"{'host cache in use':24}{mib(stats.get('host_cache.in_use_bytes', 0)):>16}")
    return "\n".join(lines)


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


OutOfMemoryError = torch.OutOfMemoryError  # as torch.cuda.OutOfMemoryError

from . import amp  # noqa: E402  (torch.disc.amp, as torch.cuda.amp)
