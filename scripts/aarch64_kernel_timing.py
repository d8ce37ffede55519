"""Times one generated kernel (x * y + x over 4M floats, one fused kLoop)
under the ISA that DISC_CPU_ISA names, and writes its object file out of the
persistent kernel cache for disassembly. Under emulation the time is not
performance, only a check that NEON code does more per instruction than
scalar code. scripts/aarch64_check.sh runs it once per ISA.

    DISC_CPU_ISA=neon python3 scripts/aarch64_kernel_timing.py OUT_DIR
"""
import os
import struct
import sys
import time
from pathlib import Path

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
for old in OUT.iterdir():
    old.unlink()
os.environ.update(DISC_PERSISTENT_CACHE="1", DISC_CACHE_DIR=str(OUT))

import torch  # noqa: E402
import torch_disc  # noqa: E402

N, REPEATS = 1 << 22, 5
torch.set_num_threads(1)  # one thread: the instruction counts decide, not the scheduling


def elf_objects(blob):
    """The ELF objects inside a cache entry (the header gives each one's end:
    its section header table comes last)."""
    start = blob.find(b"\x7fELF")
    while start >= 0:
        shoff, = struct.unpack_from("<Q", blob, start + 0x28)
        shentsize, shnum = struct.unpack_from("<HH", blob, start + 0x3A)
        end = start + shoff + shentsize * shnum
        yield blob[start:end]
        start = blob.find(b"\x7fELF", end)


x, y = torch.randn(N).to("disc"), torch.randn(N).to("disc")
z = x * y + x
torch_disc.sync()  # compile
times = []
for _ in range(REPEATS):
    start = time.perf_counter()
    z = x * y + x
    torch_disc.sync()
    times.append(time.perf_counter() - start)
assert torch.equal(z.cpu(), (x.cpu() * y.cpu() + x.cpu()))
counters = torch_disc.metrics.counters()
assert counters.get("fallbacks", 0) == 0 and counters["kernels_jitted"] == 1, counters
objects = [o for entry in OUT.glob("k-*") for o in elf_objects(entry.read_bytes())]
assert len(objects) == 1, f"{len(objects)} kernel objects in {OUT}"
(OUT / "kernel.o").write_bytes(objects[0])
isa = torch_disc.build_components()["cpu_isa"]
print(f"{isa:8s} x*y+x over {N} floats: {min(times) * 1e3:.1f} ms (best of {REPEATS}, emulated)")
