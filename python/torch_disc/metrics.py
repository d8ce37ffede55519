"""Counters of the disc backend: what was traced, compiled, run and synced.

>>> torch_disc.metrics.reset()
>>> ... one training step ...
>>> torch_disc.metrics.counters()["graphs_run"]
1
>>> print(torch_disc.metrics.report())
"""
from typing import Dict

from . import _C


def counters() -> Dict[str, int]:
    """All counters by name. Times are in ns (``*_ns``); named counters
    include ``sync.<cause>`` and ``fallback.<op>``."""
    return dict(_C.metrics())


def reset() -> None:
    """Zeroes every counter (the compile cache is kept)."""
    _C.reset_metrics()


def fallbacks() -> Dict[str, int]:
    """Ops that ran on the CPU fallback, with counts."""
    return {k[len("fallback."):]: v for k, v in counters().items() if k.startswith("fallback.")}


def syncs() -> Dict[str, int]:
    """Syncs by cause."""
    return {k[len("sync."):]: v for k, v in counters().items() if k.startswith("sync.")}


def profile() -> str:
    """Where the compiled executor's time went (``DISC_PROFILE=1``): one line
    per step label, slowest first, with calls and total / mean microseconds."""
    c = counters()
    rows = sorted(((v, k[len("profile."):-len("_ns")]) for k, v in c.items()
                   if k.startswith("profile.") and k.endswith("_ns")), reverse=True)
    if not rows:
        return "no profile: set DISC_PROFILE=1 before the graphs compile"
    width = max(len(label) for _, label in rows)
    lines = [f"{'step':<{width}}  {'calls':>7}  {'total us':>10}  {'us/call':>8}"]
    for ns, label in rows:
        calls = max(c.get(f"profile.{label}.calls", 0), 1)
        lines.append(f"{label:<{width}}  {calls:>7}  {ns / 1e3:>10.1f}  {ns / 1e3 / calls:>8.2f}")
    return "\n".join(lines)


def _isa_line() -> str:
    isa, native = _C.build_components()["cpu_isa"], _C.native_cpu_isa()
    bf16 = "bf16 native" if _C.bf16_native() else "no native bf16"
    if isa == native:
        return f"{isa} (this CPU's; {bf16})"
    return f"{isa} (DISC_CPU_ISA; this CPU has {native}; {bf16})"


def report() -> str:
    """A printable table of the counters."""
    c = counters()
    ops = max(c["ops_traced"], 1)
    rows = [
        ("ops traced", f"{c['ops_traced']}"),
        ("tracing", f"{c['trace_ns'] / 1e6:.1f} ms ({c['trace_ns'] / 1e3 / ops:.2f} us/op)"),
        ("graphs run", f"{c['graphs_run']} ({c['graph_nodes']} nodes)"),
        ("cache hits / misses", f"{c['cache_hits']} / {c['cache_misses']}"),
        ("hashing", f"{c['hash_ns'] / 1e6:.1f} ms"),
        ("compiling", f"{c['compile_ns'] / 1e6:.1f} ms"),
        ("executing", f"{c['execute_ns'] / 1e6:.1f} ms"
                      + (" (graph worker, beside tracing)" if _C.is_async() else "")),
        ("reads that waited", "{} ({} results delivered early)".format(
            c.get("async.host_waits", 0), c.get("async.early_outputs", 0))),
        ("kernels launched", "{} (fused {} / library {} / aten {}; views {} more)".format(
            c.get("kernels_launched", 0), c.get("launches.fused", 0),
            c.get("launches.library", 0), c.get("launches.aten", 0), c.get("launches.views", 0))),
        ("library calls", "oneDNN {} ({} with epilogue) / aten {}".format(
            c.get("library.onednn", 0), c.get("library.epilogues", 0), c.get("library.aten", 0))),
        ("kernels generated", "{} ({} JIT-compiled, {} from the kernel cache)".format(
            c.get("kernels_compiled", 0), c.get("kernels_jitted", 0), c.get("kernel_cache_hits", 0))),
        ("planned kernels", "kLoop {} / kInput {} / kStitch {} / library {} / unfused {}".format(
            c.get("planned.kLoop", 0), c.get("planned.kInput", 0), c.get("planned.kStitch", 0),
            c.get("planned.library_calls", 0), c.get("planned.unfused_ops", 0))),
        ("compile failures", f"{c.get('compile_failures', 0)}"),
        ("CPU ISA", _isa_line()),
        # A build without the code generator (torch_disc.build_components()).
        *([("no CPU codegen", f"{c['executor.no_cpu_codegen']} graphs on the reference executor")]
          if c.get("executor.no_cpu_codegen", 0) else []),
        ("transfers to cpu / disc", f"{c['transfers_to_cpu']} / {c['transfers_to_disc']}"),
        ("syncs", f"{c['syncs']}"),
    ]
    rows += [(f"  sync: {cause}", str(n)) for cause, n in sorted(syncs().items())]
    rows.append(("fallbacks", f"{c['fallbacks']}"))
    rows += [(f"  fallback: {op}", str(n)) for op, n in sorted(fallbacks().items())]
    width = max(len(name) for name, _ in rows)
    lines = ["torch_disc metrics", "-" * (width + 24)]
    lines += [f"{name:<{width}}  {value}" for name, value in rows]
    return "\n".join(lines)
