"""Just enough of CuPy's API for tools/gpu_check.py, with no GPU: arrays are
numpy arrays in host memory, and a RawModule's kernel is its CUDA C++ built
by the host compiler with tests/cpp/cuda_host_shim.h and run as an emulated
grid (blocks in turn, a block's threads as host threads). Lets
tests/python/test_gpu_check.py run the prepared GPU check end to end."""
import ctypes
import hashlib
import os
import subprocess
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(ROOT, "tests", "cpp", "cuda_host_shim.h")
_BUILD_DIR = tempfile.mkdtemp(prefix="disc_fake_cupy_")

asarray = np.array
asnumpy = np.array
full = np.full
zeros = np.zeros
empty = np.zeros  # deterministic: an unwritten output reads 0
random = np.random.default_rng(0)


class _Kernel:
    def __init__(self, lib, name):
        self._fn = ctypes.cast(getattr(lib, name), ctypes.c_void_p)
        self._launch = lib.disc_host_launch
        self._launch.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_bool, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_longlong]

    def __call__(self, grid, block, args):
        *arrays, last = args
        pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        grid = tuple(grid) + (1,) * (2 - len(grid))
        self._launch(grid[0], grid[1], block[0], False, self._fn, pointers, len(arrays), int(last))


class RawModule:
    def __init__(self, code, options=()):
        stem = os.path.join(_BUILD_DIR, hashlib.sha1(code.encode()).hexdigest())
        if not os.path.exists(stem + ".so"):
            with open(stem + ".cpp", "w") as f:
                f.write(f'#include "{SHIM}"\n{code}')
            subprocess.run(["g++", "-std=c++17", "-O1", "-pthread", "-shared", "-fPIC", "-o", stem + ".so",
                            stem + ".cpp"], check=True)
        self._lib = ctypes.CDLL(stem + ".so")

    def get_function(self, name):
        return _Kernel(self._lib, name)


class _Device:
    id = 0
    compute_capability = "00"
    attributes = {"MultiProcessorCount": 2}

    def synchronize(self):
        pass


class _Event:
    def record(self):
        self.at = time.perf_counter()

    def synchronize(self):
        pass


class cuda:  # noqa: N801 (CuPy's module name)
    Device = _Device
    Event = _Event

    class runtime:  # noqa: N801
        @staticmethod
        def getDeviceProperties(_):  # noqa: N802 (CuPy's name)
            return {"name": b"emulated on the host (tests/python/fake_cupy.py)"}

    @staticmethod
    def get_elapsed_time(start, stop):
        return (stop.at - start.at) * 1e3
