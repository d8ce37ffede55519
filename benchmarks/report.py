"""One report from a ``python -m benchmarks`` run: ``bench.json``,
``bench.md`` and ``bench.png`` in the results folder.

The rows of the three workloads (``mnist_step``, ``bert_step``,
``dynamic_shapes``) are brought to one form:

    workload, backend ("cpu eager", "disc", "cpu+inductor"), ms_per_step and
    the statistic it is (median or mean over the timed steps), vs_eager and
    vs_compile (other backend's time / this one's: above 1 is faster),
    compiles (in all) and compiles_after_warmup, launches_per_step and
    trace_us_per_op (disc), peak_rss_mib / peak_rss_delta_mib (peak resident
    memory over the measurement, and its growth over the measurement's
    start; see ``benchmarks.memory``), error.

The modules' own result dicts are kept whole under ``workloads`` in the
JSON.
"""

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch
import torch_disc

from benchmarks import memory, roofline

ROOT = Path(__file__).resolve().parents[1]
EAGER = "cpu eager"


# ---------------------------------------------------------------- machine

def git_state():
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return {"commit": head or None, "uncommitted_changes": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "uncommitted_changes": None}


def machine(info=None):
    info = dict(info or roofline.machine_info())
    flags = set(info.pop("flags", []))
    info["vector_flags"] = sorted(f for f in flags
                                  if f in {"sse4_2", "avx", "avx2", "fma", "avx512f",
                                           "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16"})
    info.update({
        "torch": torch.__version__,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "disc_cpu_isa": torch_disc.build_components()["cpu_isa"],
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    })
    return info


# ---------------------------------------------------------------- rows

def _backend(name):
    return EAGER if name == "cpu" else name


def _memory(row):
    m = row.get("memory") or {}
    return {"peak_rss_mib": m.get("peak_rss_mib"),
            "peak_rss_delta_mib": m.get("peak_rss_delta_mib"),
            "memory_method": m.get("method")}


def _row(workload, backend, **fields):
    row = {"workload": workload, "backend": _backend(backend), "ms_per_step": None,
           "statistic": None, "vs_eager": None, "vs_compile": None, "compiles": None,
           "compiles_after_warmup": None, "disk_hits": None, "launches_per_step": None, "trace_us_per_op": None,
           "peak_rss_mib": None, "peak_rss_delta_mib": None, "memory_method": None}
    row.update(fields)
    return row


def mnist_rows(result):
    cfg = result["config"]
    rows = []
    for r in result["steps"]:
        rows.append(_row(
            f"mnist-{r['model']} train (batch {cfg['batch_size']})", r["device"],
            ms_per_step=r.get("ms"), statistic="median", vs_eager=r.get("speedup"),
            vs_compile=r.get("vs_compile"), compiles=r.get("compiles"),
            compiles_after_warmup=r.get("compiles_timed"), disk_hits=r.get("disk_hits"),
            launches_per_step=r.get("launches_per_step"),
            trace_us_per_op=r.get("trace_us_per_op"), error=r.get("error"), **_memory(r)))
    return rows


def bert_rows(result):
    cfg = result["config"]
    rows = []
    for r in result["rows"]:
        stat = "mean" if r["part"] == "eval" else "median"
        compiles = None
        if "compiles" in r:
            compiles = r["compiles"] + r.get("warmup_compiles", 0)
        rows.append(_row(
            f"minilm-l6 {r['part']} (batch {cfg['batch_size']})",
            r["backend"],
            ms_per_step=r.get("mean_ms" if stat == "mean" else "ms"), statistic=stat,
            vs_eager=r.get("vs_eager"), vs_compile=r.get("vs_inductor"), compiles=compiles,
            compiles_after_warmup=r.get("compiles"), disk_hits=r.get("disk_hits"),
            launches_per_step=r.get("launches_per_step"),
            trace_us_per_op=r.get("trace_us_per_op"), error=r.get("error"), **_memory(r)))
    return rows


def dynamic_rows(result):
    cfg = result["config"]
    eager = {r["run"]: r["mean_ms"] for r in result["rows"] if r["backend"] == "cpu"}
    rows = []
    for r in result["rows"]:
        ref = eager.get(r["run"])
        rows.append(_row(
            f"dynamic {r['run']} ({cfg['layers']}-layer encoder, batch {cfg['batch_size']})",
            r["backend"], ms_per_step=r["mean_ms"], statistic="mean",
            vs_eager=ref / r["mean_ms"] if ref and r["mean_ms"] else None,
            compiles=r.get("compiles"), compiles_after_warmup=r.get("compiles_timed"),
            disk_hits=r.get("disk_hits"),
            launches_per_step=r.get("launches_per_step"),
            trace_us_per_op=r.get("trace_us_per_op"), **_memory(r)))
    return rows


ROWS = {"mnist": mnist_rows, "bert": bert_rows, "dynamic": dynamic_rows}


# ---------------------------------------------------------------- output

def _fmt(value, spec, none=""):
    return none if value is None else format(value, spec)


def rows_table(rows):
    lines = ["| workload | backend | ms/step | vs eager | vs torch.compile "
             "| compiles (after warm-up) | launches/step | tracing us/op | peak RSS MiB, +growth |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['workload']} | {r['backend']} | n/a (error, see notes) "
                         "| | | | | | |")
            continue
        ms = _fmt(r["ms_per_step"], ".2f", "n/a")
        if r["statistic"] == "mean":
            ms += " (mean)"
        compiles = ""
        if r["compiles"] is not None:
            compiles = f"{r['compiles']}"
            if r["compiles_after_warmup"] is not None:
                compiles += f" ({r['compiles_after_warmup']})"
            if r.get("disk_hits"):
                compiles += f" + {r['disk_hits']} from disk"
        mem = ""
        if r["peak_rss_mib"] is not None:
            mem = f"{r['peak_rss_mib']:.0f}, +{r['peak_rss_delta_mib']:.0f}"
            if r["memory_method"] != "vmhwm":
                mem += " (lower bound)"
        lines.append(
            f"| {r['workload']} | {r['backend']} | {ms} | {_fmt(r['vs_eager'], '.2f')} "
            f"| {_fmt(r['vs_compile'], '.2f')} | {compiles} "
            f"| {_fmt(r['launches_per_step'], '.0f')} | {_fmt(r['trace_us_per_op'], '.2f')} "
            f"| {mem} |")
    return "\n".join(lines)


def markdown(report):
    m = report["machine"]
    git = report["git"]
    lines = [
        "# torch_disc benchmarks",
        "",
        f"- date: {report['date']}" + (" -- **--quick smoke run: not a measurement**"
                                        if report["quick"] else ""),
        f"- commit: {git['commit'] or 'unknown'}"
        + (" (with uncommitted changes)" if git["uncommitted_changes"] else ""),
        f"- CPU: {m['cpu_model']}, {m['cpus_available']} CPUs available "
        f"({m['physical_cores_available']} physical cores), last-level cache "
        f"{_fmt(m['last_level_cache_bytes'] and m['last_level_cache_bytes'] / 2**20, '.0f', '?')} MiB; "
        f"vector flags: {', '.join(m['vector_flags']) or 'none'}",
        f"- torch {m['torch']}, Python {m['python']}, Linux {m['kernel']}; workloads run with "
        f"{m['torch_threads']} torch thread(s) (OMP_NUM_THREADS={m['OMP_NUM_THREADS']})",
        f"- command: `{report['command']}`; {report['seconds']:.0f} s in all",
        "",
        "## Machine roofline (measured in this run)",
        "",
    ]
    r = report.get("roofline")
    if r is None:
        lines.append(f"not measured: {report.get('roofline_error', 'skipped')}")
    else:
        lines.append(roofline.table(r))
        lines += ["", "Threads: " + r["method"]["threads"] + ". Bandwidth in GB/s = 1e9 B/s."]
    lines += ["", "## Step time", "", rows_table(report["rows"]), ""]
    lines += [
        "- ms/step: median over the timed steps after warm-up (mean where marked: BERT eval, "
        "the dynamic-shape runs, whose steps have different lengths); see each module's "
        "docstring for what a step includes.",
        "- vs eager / vs torch.compile: that backend's ms/step divided by this row's; "
        "above 1 is faster. cpu eager is plain PyTorch on the CPU, cpu+inductor is "
        "torch.compile (inductor) on the CPU; the dynamic-shape benchmark has no "
        "torch.compile runs.",
        "- compiles: disc compile-cache misses (torch.compile: graphs Dynamo compiled) over "
        "the whole run, in parentheses those after the warm-up steps; \"+ N from disk\": "
        "graphs the on-disk compile cache (`DISC_PERSISTENT_CACHE`) served instead of "
        "compiling them (compiled by an earlier run or process). launches/step: disc "
        "kernel launches (fused + ATen) per timed step. tracing us/op: disc tracing time per "
        "traced op over the timed steps (`trace_ns / ops_traced`).",
        f"- peak RSS: {memory.METHODS.get(report['memory_method'], report['memory_method'])}; "
        "first figure the process's peak RSS during the measurement, then its growth over the "
        "RSS at the measurement's start. torch.compile rows are measured in their own "
        "subprocess (its compile workers not included); the others share one process, so "
        "the absolute figure includes what earlier workloads left allocated, and the growth "
        "can be 0 where a workload reuses memory that earlier ones freed but the allocator "
        "kept.",
    ]
    notes = [f"- {r['workload']} / {r['backend']}: {r['error']}"
             for r in report["rows"] if r.get("error")]
    if notes:
        lines += ["", "Errors:", ""] + notes
    trace = report.get("tracing_microbenchmark")
    if trace:
        lines += ["", "## Tracing micro-benchmark (mnist_step)", "",
                  "`y = y * 1.0001 + 0.5` on a [16] tensor, timed without syncing (disc: pure "
                  "tracing cost; CPU eager: dispatch and kernel).", "",
                  "| backend | us/op | ops |", "|---|---:|---:|"]
        for dev, t in trace.items():
            if "error" in t:
                lines.append(f"| {_backend(dev)} | n/a ({t['error']}) | |")
            else:
                lines.append(f"| {_backend(dev)} | {t['us_per_op']:.2f} | {t['ops']} |")
    lines += ["", "## Plot", ""]
    plot = report["plot"]
    if plot.get("path"):
        lines.append(f"![speedup vs eager]({Path(plot['path']).name})")
    else:
        lines.append(f"no plot: {plot['error']}")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    """Grouped bars: speedup vs eager per workload, one bar per non-eager
    backend.  Returns {"path": ...} or {"error": why not}."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # not installed, or broken
        return {"error": f"matplotlib unavailable ({type(exc).__name__}: {exc}); "
                         "bash scripts/setup.sh installs it"}
    data = [r for r in rows if r["backend"] != EAGER and r.get("vs_eager")]
    if not data:
        return {"error": "no speedups to plot (every non-eager row failed or has no eager "
                         "reference)"}
    workloads = list(dict.fromkeys(r["workload"] for r in data))
    backends = list(dict.fromkeys(r["backend"] for r in data))
    value = {(r["workload"], r["backend"]): r["vs_eager"] for r in data}
    width = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(workloads) + 2), 4.8))
    for i, backend in enumerate(backends):
        xs = [k + (i - (len(backends) - 1) / 2) * width for k in range(len(workloads))]
        ys = [value.get((w, backend), 0) for w in workloads]
        bars = ax.bar(xs, ys, width, label=backend)
        for bar, y in zip(bars, ys):
            if y:
                ax.annotate(f"{y:.2f}", (bar.get_x() + bar.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="cpu eager = 1")
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([w.split(" (")[0] for w in workloads], rotation=30, ha="right",
                       fontsize=8)
    ax.set_ylabel("speedup vs CPU eager (eager ms / ms)")
    ax.set_title("torch_disc: training / eval step speedup over CPU eager")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return {"path": str(path)}


def write(report, out_dir):
    """bench.json, bench.md and bench.png in ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "bench.png"
    report["plot"] = plot(report["rows"], png)
    if not report["plot"].get("path") and png.exists():
        png.unlink()  # a stale chart from an earlier run would not match this report
    md, js = out_dir / "bench.md", out_dir / "bench.json"
    js.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md.write_text(markdown(report))
    return [js, md] + ([png] if report["plot"].get("path") else [])


def new_report(quick, argv):
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(["python -m benchmarks"] + list(argv)),
        "quick": quick,
        "git": git_state(),
        "machine": machine(),
        "roofline": None,
        "rows": [],
        "workloads": {},
        "workload_errors": {},
        "workload_seconds": {},
        "tracing_microbenchmark": None,
        "memory_method": None,
        "seconds": 0.0,
    }


def add_workload(report, name, result):
    rows = ROWS[name](result)
    report["workloads"][name] = result
    report["rows"] += rows
    if name == "mnist":
        report["tracing_microbenchmark"] = result.get("trace")
    methods = {r["memory_method"] for r in rows if r["memory_method"]}
    if methods and report["memory_method"] is None:
        report["memory_method"] = methods.pop()


if __name__ == "__main__":
    sys.exit("run python -m benchmarks")
