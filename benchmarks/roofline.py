"""The machine's roofline, measured in the benchmark's own process.

* Memory bandwidth, STREAM-like: ``copy`` (``c = a``) and ``triad``
  (``a = b + q * c``, one ``torch.add(..., alpha=q, out=a)`` pass) over
  float32 arrays of ``--stream-elements`` (default 64M: 256 MiB each, raised
  to 4x the last-level cache if that is larger).  Bytes counted as STREAM
  does: 2 x 4 per element for copy, 3 x 4 for triad (no write-allocate
  traffic).  Best (shortest) of ``reps`` repetitions, after one untimed pass
  that also touches every page.
* Compute: float32 GEMM throughput (``torch.mm``, ``n`` x ``n`` x ``n``,
  2 n^3 flops), best of ``reps``: the "measured GEMM peak".
* The same GEMM through the disc device (``torch.mm`` of two disc tensors,
  then ``torch_disc.sync()``: trace, cache lookup, and the compiled
  executor's library call on oneDNN), best of ``reps``, as a fraction of the
  theoretical FMA peak of the cores it ran on (the issue's target: >= 70%).
  The ``library.onednn`` counter confirms every timed run took oneDNN.
* Generated row kernels on disc: softmax and layer norm over [4096, 1024]
  float32 (one kInput / kStitch kernel each), counted as STREAM counts copy
  (read the input once, write the output once: 8 B/element), as a fraction
  of the STREAM copy bandwidth at the same thread count (the issue's target:
  >= 60%), next to CPU eager's own figure for the same op.  The
  ``launches.fused`` counter confirms each timed run was one kernel.
* A theoretical FMA peak where /proc/cpuinfo allows an estimate: physical
  cores x clock x float32 lanes of the widest vector ISA in the CPU flags
  (avx512f: 16, avx/avx2: 8, sse: 4) x 2 flops per FMA x FMA units per
  core.  The number of FMA units is not in /proc/cpuinfo: 2 is assumed (true
  of most current x86 server cores, not all; a core with one 512-bit unit,
  or 512-bit work split over 256-bit units, has half).  The clock is the
  maximum of cpufreq if the kernel exposes it, else the ``@ x.xxGHz`` of the
  model name, else "cpu MHz" (under a hypervisor: usually the nominal clock,
  no boost).  It is labeled an estimate, with its derivation.

All in one process, with every CPU of the process's affinity mask as torch
threads (then restored), and again with the benchmark's own thread count
when that is smaller (``OMP_NUM_THREADS=1`` runs the workloads single
threaded: their roofline is the single-thread one).

    python -m benchmarks.roofline [--quick]
"""

import argparse
import json
import os
import re
import time
from pathlib import Path

import torch

STREAM_ELEMENTS = 64 * 1024 * 1024
GEMM_N = 2048
REPS = {"stream": 10, "gemm": 5}
QUICK_REPS = {"stream": 3, "gemm": 2}
FMA_UNITS_ASSUMED = 2


# ---------------------------------------------------------------- machine

def cpuinfo():
    """First processor's fields of /proc/cpuinfo, plus the set of
    (physical id, core id) pairs of the CPUs this process may run on."""
    fields, cores = {}, set()
    allowed = os.sched_getaffinity(0)
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields, None
    for block in text.strip().split("\n\n"):
        entry = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            entry[key.strip()] = value.strip()
        if not fields:
            fields = entry
        try:
            cpu = int(entry.get("processor", -1))
        except ValueError:
            continue
        if cpu in allowed:
            cores.add((entry.get("physical id", "0"), entry.get("core id", str(cpu))))
    return fields, (len(cores) or None)


def last_level_cache_bytes():
    """Total size of the distinct highest-level caches, from sysfs (or None)."""
    level, total, seen = 0, 0, set()
    for cache in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            lvl = int((cache / "level").read_text())
            shared = (cache / "shared_cpu_list").read_text().strip()
            size = (cache / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if not m:
            continue
        size = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
        if lvl > level:
            level, total, seen = lvl, 0, set()
        if lvl == level and shared not in seen:
            seen.add(shared)
            total += size
    return total or None


def machine_info():
    fields, physical = cpuinfo()
    return {
        "cpu_model": fields.get("model name") or fields.get("Model") or "unknown",
        "logical_cpus": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "physical_cores_available": physical,
        "last_level_cache_bytes": last_level_cache_bytes(),
        "cpu_mhz": float(fields["cpu MHz"]) if "cpu MHz" in fields else None,
        "flags": fields.get("flags", "").split(),
    }


def clock_ghz(fields_model, cpu_mhz):
    """(GHz, source) or (None, reason)."""
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text())
        return khz / 1e6, "cpufreq cpuinfo_max_freq"
    except (OSError, ValueError):
        pass
    m = re.search(r"@\s*([\d.]+)\s*GHz", fields_model or "")
    if m:
        return float(m.group(1)), "the model name's nominal clock"
    if cpu_mhz:
        return cpu_mhz / 1e3, "'cpu MHz' of /proc/cpuinfo (nominal under a hypervisor, no boost)"
    return None, "no clock in cpufreq or /proc/cpuinfo"


def theoretical_fma_peak(info):
    """Estimated float32 FMA peak in GFLOP/s with its derivation, or None
    and the reason."""
    flags = set(info["flags"])
    if "fma" not in flags:
        return {"gflops": None, "derivation": "no 'fma' flag in /proc/cpuinfo: not estimated"}
    lanes, isa = ((16, "avx512f") if "avx512f" in flags else
                  (8, "avx2/fma (256-bit)") if "avx" in flags else (4, "sse (128-bit)"))
    ghz, source = clock_ghz(info["cpu_model"], info["cpu_mhz"])
    cores = info["physical_cores_available"]
    if ghz is None or not cores:
        return {"gflops": None, "derivation": f"not estimated: {source if ghz is None else 'core count unknown'}"}
    per_core_cycle = lanes * 2 * FMA_UNITS_ASSUMED
    gflops = cores * ghz * per_core_cycle
    return {
        "gflops": gflops,
        "gflops_per_core": ghz * per_core_cycle,
        "derivation": (f"{cores} physical cores x {ghz:.3f} GHz ({source}) x {lanes} float32 "
                       f"lanes ({isa}) x 2 flops per FMA x {FMA_UNITS_ASSUMED} FMA units per "
                       "core (assumed: not in /proc/cpuinfo)"),
    }


# ---------------------------------------------------------------- measuring

def best_seconds(fn, reps):
    fn()  # untimed: first touch, thread pool start-up
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def stream(elements, reps):
    """Copy and triad bandwidth in GB/s (1e9 bytes/s)."""
    a = torch.full((elements,), 1.0)
    b = torch.full((elements,), 2.0)
    c = torch.full((elements,), 0.5)
    q = 3.0
    copy_s = best_seconds(lambda: c.copy_(a), reps)
    triad_s = best_seconds(lambda: torch.add(b, c, alpha=q, out=a), reps)
    ok = bool(a[0].item() == 2.0 + q * c[0].item())
    del a, b, c
    return {"copy_gbs": 2 * 4 * elements / copy_s / 1e9,
            "triad_gbs": 3 * 4 * elements / triad_s / 1e9,
            "copy_s": copy_s, "triad_s": triad_s, "triad_checked": ok}


def gemm(n, reps):
    """float32 GEMM throughput in GFLOP/s."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    c = torch.empty(n, n)
    seconds = best_seconds(lambda: torch.mm(a, b, out=c), reps)
    return {"gflops": 2 * n ** 3 / seconds / 1e9, "seconds": seconds}


def disc_gemm(n, reps):
    """float32 GEMM through the disc device in GFLOP/s, or the reason it
    could not run."""
    try:
        import torch_disc
    except ImportError as exc:
        return {"gflops": None, "error": f"torch_disc not importable: {exc}"}
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to("disc")
    b = torch.randn(n, n, generator=gen).to("disc")
    torch_disc.sync()
    before = torch_disc.metrics.counters().get("library.onednn", 0)

    def run():
        c = torch.mm(a, b)  # noqa: F841 -- alive at the sync, so computed
        torch_disc.sync()
    seconds = best_seconds(run, reps)
    on_onednn = torch_disc.metrics.counters().get("library.onednn", 0) - before
    return {"gflops": 2 * n ** 3 / seconds / 1e9, "seconds": seconds,
            "runs_on_onednn": on_onednn, "runs": reps + 1}


FUSED_SHAPE = (4096, 1024)


def fused_ops():
    import torch.nn.functional as F
    w = torch.linspace(0.5, 1.5, FUSED_SHAPE[1])
    b = torch.linspace(-1.0, 1.0, FUSED_SHAPE[1])
    return {
        "softmax": lambda x, dev: torch.softmax(x, -1),
        "layer_norm": lambda x, dev: F.layer_norm(x, FUSED_SHAPE[1:], w.to(dev), b.to(dev)),
    }


def disc_fused(reps):
    """GB/s (8 bytes per element) of the generated softmax and layer norm
    kernels on disc and of CPU eager's, or the reason they could not run."""
    try:
        import torch_disc
    except ImportError as exc:
        return {"error": f"torch_disc not importable: {exc}"}
    x = torch.randn(FUSED_SHAPE, generator=torch.Generator().manual_seed(0))
    xd = x.to("disc")
    torch_disc.sync()
    bytes_moved = 2 * 4 * x.numel()
    out = {}
    for name, fn in fused_ops().items():
        eager_s = best_seconds(lambda: fn(x, "cpu"), reps)
        before = torch_disc.metrics.counters()

        def run():
            y = fn(xd, "disc")  # noqa: F841 -- alive at the sync, so computed
            torch_disc.sync()
        seconds = best_seconds(run, reps)
        after = torch_disc.metrics.counters()
        kernels = {k: after.get(k, 0) - before.get(k, 0) for k in ("launches.fused", "launches.aten")}
        out[name] = {"gbs": bytes_moved / seconds / 1e9, "seconds": seconds,
                     "eager_gbs": bytes_moved / eager_s / 1e9,
                     "fused_launches_per_run": kernels["launches.fused"] / (reps + 1),
                     "aten_launches_per_run": kernels["launches.aten"] / (reps + 1)}
    return out


def measure_at(threads, elements, n, reps):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        m = {"threads": threads, "stream": stream(elements, reps["stream"]),
             "gemm": gemm(n, reps["gemm"]), "disc_gemm": disc_gemm(n, reps["gemm"]),
             "disc_fused": disc_fused(reps["stream"])}
        for f in m["disc_fused"].values():
            if isinstance(f, dict):
                f["fraction_of_stream_copy"] = f["gbs"] / m["stream"]["copy_gbs"]
        return m
    finally:
        torch.set_num_threads(previous)


def run(quick=False, elements=None, n=GEMM_N):
    """Measure; returns the JSON-ready dict (see the module docstring)."""
    info = machine_info()
    reps = QUICK_REPS if quick else REPS
    llc = info["last_level_cache_bytes"]
    if elements is None:
        elements = STREAM_ELEMENTS
        if llc and 4 * elements < 4 * llc:
            elements = llc  # 4 bytes each: 4x the cache
    all_threads = info["cpus_available"]
    workload_threads = torch.get_num_threads()
    start = time.perf_counter()
    results = [measure_at(all_threads, elements, n, reps)]
    if workload_threads < all_threads:
        results.append(measure_at(workload_threads, elements, n, reps))
    peak = theoretical_fma_peak(info)
    cores = info["physical_cores_available"] or all_threads
    for m in results:  # disc's GEMM against the FMA peak of the cores it used
        g = m["disc_gemm"]
        g["fraction_of_fma_peak"] = (g["gflops"] / (peak["gflops_per_core"] * min(m["threads"], cores))
                                     if g["gflops"] and peak["gflops"] else None)

    def best(get):  # the highest figure over the thread counts, and its thread count
        m = max(results, key=get)
        return get(m), m["threads"]

    copy, copy_t = best(lambda m: m["stream"]["copy_gbs"])
    triad, triad_t = best(lambda m: m["stream"]["triad_gbs"])
    gemm_peak, gemm_t = best(lambda m: m["gemm"]["gflops"])
    return {
        "method": {
            "stream": (f"float32 arrays of {elements} elements ({elements * 4 / 2**20:.0f} MiB "
                       f"each; last-level cache {llc / 2**20:.0f} MiB)" if llc else
                       f"float32 arrays of {elements} elements ({elements * 4 / 2**20:.0f} MiB each)")
                      + "; copy c = a (8 B/element), triad a = b + q*c (12 B/element), "
                        f"best of {reps['stream']}",
            "gemm": f"torch.mm float32 {n}x{n}x{n} (2 n^3 flops), best of {reps['gemm']}",
            "disc_gemm": f"the same on disc tensors + torch_disc.sync() (oneDNN), best of {reps['gemm']}",
            "threads": "torch intra-op threads: every CPU of the affinity mask"
                       + (f", then the benchmark's own {workload_threads}"
                          if len(results) > 1 else ""),
        },
        "elements": elements,
        "gemm_n": n,
        "torch_threads_of_workloads": workload_threads,
        "measured": results,
        # Headline figures: the best over the thread counts measured.
        "stream_copy_gbs": copy, "stream_copy_threads": copy_t,
        "stream_triad_gbs": triad, "stream_triad_threads": triad_t,
        "gemm_peak_gflops": gemm_peak, "gemm_peak_threads": gemm_t,
        "theoretical_fma_peak": peak,
        "gemm_fraction_of_theoretical": gemm_peak / peak["gflops"] if peak["gflops"] else None,
        "seconds": time.perf_counter() - start,
    }


def table(r):
    """Markdown table of the roofline figures."""
    lines = ["| figure | value | threads | how |", "|---|---:|---:|---|"]
    for i, m in enumerate(r["measured"]):
        t = m["threads"]
        lines.append(f"| STREAM copy | {m['stream']['copy_gbs']:.1f} GB/s | {t} | "
                     + (f"{r['method']['stream']} |" if i == 0 else "as above |"))
        lines.append(f"| STREAM triad | {m['stream']['triad_gbs']:.1f} GB/s | {t} | "
                     + ("same arrays |" if i == 0 else "as above |"))
        lines.append(f"| measured GEMM peak | {m['gemm']['gflops']:.1f} GFLOP/s | {t} | "
                     + (f"{r['method']['gemm']} |" if i == 0 else "as above |"))
        g = m["disc_gemm"]
        if g["gflops"] is None:
            lines.append(f"| disc GEMM (oneDNN) | n/a | {t} | {g['error']} |")
        else:
            frac = (f"{100 * g['fraction_of_fma_peak']:.0f}% of the FMA peak of {t} core(s)"
                    if g["fraction_of_fma_peak"] else "no FMA peak estimate")
            lines.append(f"| disc GEMM (oneDNN) | {g['gflops']:.1f} GFLOP/s | {t} | {frac}; "
                         f"{g['runs_on_onednn']}/{g['runs']} runs on oneDNN |")
        fused = m.get("disc_fused", {})
        if "error" in fused:
            lines.append(f"| disc softmax / layer norm | n/a | {t} | {fused['error']} |")
        for name, f in fused.items():
            if not isinstance(f, dict):
                continue
            lines.append(f"| disc {name} {FUSED_SHAPE[0]}x{FUSED_SHAPE[1]} | {f['gbs']:.1f} GB/s | {t} | "
                         f"{100 * f['fraction_of_stream_copy']:.0f}% of STREAM copy; "
                         f"{f['fused_launches_per_run']:.0f} kernel(s), "
                         f"{f['aten_launches_per_run']:.0f} ATen per run; CPU eager "
                         f"{f['eager_gbs']:.1f} GB/s |")
    peak = r["theoretical_fma_peak"]
    if peak["gflops"]:
        lines.append(f"| theoretical FMA peak (estimate) | {peak['gflops']:.1f} GFLOP/s "
                     f"| {r['measured'][0]['threads']} | {peak['derivation']} |")
        if any(m["threads"] == 1 for m in r["measured"]) and r["measured"][0]["threads"] > 1:
            lines.append(f"| theoretical FMA peak, one core (estimate) "
                         f"| {peak['gflops_per_core']:.1f} GFLOP/s | 1 | the same, per core |")
        lines.append(f"| best measured GEMM / theoretical | "
                     f"{100 * r['gemm_fraction_of_theoretical']:.0f}% | {r['gemm_peak_threads']} "
                     "| |")
    else:
        lines.append(f"| theoretical FMA peak | n/a | | {peak['derivation']} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description="Machine roofline: STREAM bandwidth and GEMM peak")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--elements", type=int, default=None,
                   help="STREAM array length (float32 elements)")
    p.add_argument("--gemm-n", type=int, default=GEMM_N)
    p.add_argument("--json", action="store_true", help="print the result as JSON too")
    args = p.parse_args(argv)
    r = run(args.quick, args.elements, args.gemm_n)
    print(table(r))
    if args.json:
        print(json.dumps(r, indent=2))
    return r


if __name__ == "__main__":
    main()
