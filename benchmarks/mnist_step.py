"""Time MNIST training steps and per-op tracing cost on disc vs CPU.

Step time: one SGD (momentum 0.9) step of the example MLP and CNN on a fixed
random batch that already lives on the device, so the number is the step
itself without input transfer.  Each timed step ends with ``loss.item()``.
On ``disc`` the step's graph runs on the graph worker (``DISC_ASYNC``):
``loss.item()`` waits for the loss, which the graph computes first, and the
next step's Python runs while the backward and the update still compute,
as on an accelerator; the steady-state time per step is then the
throughput.  That uses one core more than ``--threads`` says.  ``disc-sync``
runs the same with graphs on the syncing thread (``DISC_ASYNC=0``), where
``loss.item()`` returns after the whole step.  Reported: median over
``--steps`` after ``--warmup`` steps, and the speedup over CPU eager (eager
ms / ms).  The in-process devices take turns: the timed steps are split
into ``--rounds`` blocks, and each round times one block of every device,
so that a shared machine's drifting speed affects them alike.

torch.compile runs in a subprocess with ``--compile-timeout`` because a slow
or broken compiler must not hang or crash the whole benchmark ('n/a').

Tracing cost: a chain of ``y = y * 1.0001 + 0.5`` on a [16] tensor, timed
without syncing and divided by the ``ops_traced`` counter delta (CPU eager:
by the number of ops issued).

Per step-time row, also: compiles (disc: compile-cache misses from
``torch_disc.metrics``; torch.compile: graphs Dynamo compiled), in all and
after the warm-up; on disc, kernel launches per timed step and the tracing
cost per op over the timed steps (``trace_ns / ops_traced``) and the graphs
the on-disk compile cache served instead of compiling; peak resident
memory over the measurement (``benchmarks.memory``; for torch.compile, of its
subprocess).  ``--quick``: a smoke test with few steps.

A model name with ``-bf16`` (``mlp-bf16``) runs its forward under
``torch.autocast`` in bfloat16 on every device (CPU autocast for eager and
torch.compile).

Run from the repository root: ``python -m benchmarks`` (see ``--help``).
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    # Run as a script: make the repository root importable for `examples.*`.
    sys.path.insert(0, str(ROOT))

import torch
import torch.nn.functional as F

from benchmarks.cli import (THREADS_HELP, add_out, add_threads, fill_defaults, fmt, isa_line, run_worker,
                            set_threads, write_json)
from benchmarks.memory import PeakRSS
from examples.mnist.train import build_model

EAGER = "cpu"
QUICK = {"steps": 3, "warmup": 2, "trace_ops": 200, "rounds": 1}
DEFAULTS = {"steps": 20, "warmup": 5, "trace_ops": 1000, "rounds": 5}


class Unavailable(Exception):
    """A measurement that cannot run here; the message goes in the table."""


def describe(exc):
    """One short line for a table cell."""
    if isinstance(exc, Unavailable):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:120]


def dynamo_counters():
    from torch._dynamo.utils import counters

    return {"compiles": counters["stats"]["unique_graphs"]}


AUTOCAST_SUFFIX = "-bf16"


def split_model_name(name):
    """(the example's model, whether the forward runs under bf16 autocast)."""
    if name.endswith(AUTOCAST_SUFFIX):
        return name[:-len(AUTOCAST_SUFFIX)], True
    return name, False


class Stepper:
    """One device's model, optimizer and batch, stepped in blocks.

    Blocks let the devices take turns (see ``run``): on a shared VM the
    machine's speed drifts over seconds, and timing one device after the
    other would fold that drift into their ratio.  ``counters`` (a callable
    returning a dict of counters) makes ``info`` hold the counter deltas over
    this stepper's blocks (``"all"``) and its timed ones (``"timed"``), not
    over the other devices' blocks in between."""

    def __init__(self, model_name, device, sync, batch_size, compile_backend=None,
                 counters=None):
        torch.manual_seed(0)
        base, self.autocast = split_model_name(model_name)
        self.device_type = torch.device(device).type
        self.model = build_model(base).to(device)
        if compile_backend:
            self.model = torch.compile(self.model, backend=compile_backend)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.x = torch.randn(batch_size, 1, 28, 28).to(device)
        self.y = torch.randint(0, 10, (batch_size,)).to(device)
        self.sync = sync
        self.counters = counters
        self.times = []
        sync()
        self.info = {"all": {}, "timed": {}}

    def run(self, steps, timed=True):
        """``steps`` training steps; their wall times in ms join ``times``
        when ``timed``."""
        before = self.counters() if self.counters else None
        for _ in range(steps):
            start = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.autocast):
                loss = F.cross_entropy(self.model(self.x), self.y)
            loss.backward()
            self.opt.step()
            self.sync()
            loss.item()  # waits until the device has really finished the step
            if timed:
                self.times.append((time.perf_counter() - start) * 1e3)
        if self.counters:
            end = self.counters()
            for key in ("all", "timed") if timed else ("all",):
                acc = self.info[key]
                for k, v in end.items():
                    if isinstance(v, int):
                        acc[k] = acc.get(k, 0) + v - before.get(k, 0)


def blocks(steps, rounds):
    """``steps`` split into ``rounds`` blocks of near-equal size (none empty)."""
    rounds = max(1, min(rounds, steps))
    return [steps // rounds + (1 if i < steps % rounds else 0) for i in range(rounds)]


def time_steps(model_name, device, sync, steps, warmup, batch_size, compile_backend=None,
               counters=None, info=None):
    """Per-step wall times in ms of ``steps`` timed training steps after
    ``warmup`` untimed ones, in one block (Stepper has the counters)."""
    stepper = Stepper(model_name, device, sync, batch_size, compile_backend, counters)
    stepper.run(warmup, timed=False)
    stepper.run(steps)
    if info is not None:
        info.update(stepper.info)
    return stepper.times


def time_compiled(model_name, args):
    """Run the torch.compile measurement in a subprocess; returns the
    worker's dict (``times_ms``, ``counters``, ``memory``)."""
    cmd = [sys.executable, "-m", "benchmarks.mnist_step", "--compiled-worker", model_name,
           "--compile-backend", args.compile_backend, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch-size", str(args.batch_size)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    out, failure = run_worker(cmd, ROOT, args.compile_timeout)
    if failure:
        raise Unavailable(failure)
    return json.loads(out.strip().splitlines()[-1])


def trace_cost(device, sync, iters, counters=None):
    """Microseconds per op for a chain of small element-wise ops.

    ``counters`` (disc only) supplies ``ops_traced``; the loop is timed
    without syncing, so on disc this is the pure tracing cost.
    """
    y = torch.ones(16, device=device)
    for _ in range(10):  # warm up dispatch paths and caches
        y = y * 1.0001 + 0.5
    sync()
    before = counters()["ops_traced"] if counters else 0
    start = time.perf_counter()
    for _ in range(iters):
        y = y * 1.0001 + 0.5
    elapsed = time.perf_counter() - start
    ops = counters()["ops_traced"] - before if counters else 2 * iters
    start = time.perf_counter()
    sync()
    y.sum().item()
    sync_ms = (time.perf_counter() - start) * 1e3
    return {"us_per_op": elapsed * 1e6 / max(ops, 1), "ops": ops, "sync_ms": sync_ms}


def disc_stats(info, steps):
    """Row fields from disc counter deltas (see time_steps)."""
    timed = info["timed"]
    return {"compiles": info["all"].get("compiles", 0),
            "compiles_timed": timed.get("compiles", 0),
            "launches_per_step": timed.get("kernels_launched", 0) / steps,
            "trace_us_per_op": (timed["trace_ns"] / 1e3 / timed["ops_traced"]
                                if timed.get("ops_traced") else None),
            "fallbacks": info["all"].get("fallbacks", 0),
            "disk_hits": info["all"].get("disk_cache.graph_hits", 0)}


def markdown(rows, trace):
    """Render the step-time and tracing-cost tables."""
    lines = ["| model | device | ms/step | speedup vs cpu eager |",
             "|---|---|---:|---:|"]
    for r in rows:
        note = f" ({r['error']})" if r.get("error") else ""
        lines.append(f"| {r['model']} | {r['device']} | {fmt(r['ms'], '.3f')}{note} "
                     f"| {fmt(r['speedup'], '.2f')} |")
    lines += ["", "| device | us/op (tracing on disc) | ops | sync ms |",
              "|---|---:|---:|---:|"]
    for dev, t in trace.items():
        if "error" in t:
            lines.append(f"| {dev} | n/a ({t['error']}) | | |")
        else:
            lines.append(f"| {dev} | {t['us_per_op']:.2f} | {t['ops']} | {t['sync_ms']:.2f} |")
    return "\n".join(lines)


def in_process(dev, disc):
    """(device, sync, counters) of an in-process device."""
    if dev == EAGER:
        return "cpu", lambda: None, None
    return "disc", disc.sync, disc.metrics.counters


def time_model(model, args, disc, disc_error):
    """One model's rows, one per device.

    The in-process devices (cpu, disc, disc-sync) take turns: each warms up
    and times its first block, with its peak memory measured, then the
    remaining ``--rounds`` blocks go round the devices in turn, so every
    device sees the same phases of a drifting machine.  torch.compile runs
    after them, in its subprocess."""
    rows = {dev: {"model": model, "device": dev, "ms": None, "speedup": None}
            for dev in args.devices}
    steppers = {}
    sizes = blocks(args.steps, args.rounds)

    def block(dev, steps, timed=True):
        if dev == EAGER:
            steppers[dev].run(steps, timed)
            return
        was_async = disc._C.is_async()
        disc.set_async(dev == "disc")
        try:
            steppers[dev].run(steps, timed)
        finally:
            disc.set_async(was_async)

    for dev in args.devices:
        if dev == "compile":
            continue
        try:
            if dev != EAGER and disc is None:
                raise disc_error
            device, sync, counters = in_process(dev, disc)
            with PeakRSS() as mem:
                steppers[dev] = Stepper(model, device, sync, args.batch_size, counters=counters)
                block(dev, args.warmup, timed=False)
                block(dev, sizes[0])
            rows[dev]["memory"] = mem.as_dict()
        except Exception as exc:
            rows[dev]["error"] = describe(exc)
            steppers.pop(dev, None)
    for size in sizes[1:]:
        for dev in list(steppers):
            try:
                block(dev, size)
            except Exception as exc:
                rows[dev]["error"] = describe(exc)
                del steppers[dev]
    for dev, stepper in steppers.items():
        rows[dev]["ms"] = statistics.median(stepper.times)
        if dev != EAGER:
            rows[dev].update(disc_stats(stepper.info, len(stepper.times)))
    if "compile" in rows:
        row = rows.pop("compile")
        row["device"] = f"cpu+{args.compile_backend}"
        try:
            worker = time_compiled(model, args)
            row.update(ms=statistics.median(worker["times_ms"]),
                       compiles=worker["counters"]["all"].get("compiles", 0),
                       compiles_timed=worker["counters"]["timed"].get("compiles", 0),
                       memory=worker["memory"])
        except Exception as exc:
            row["error"] = describe(exc)
        rows[row["device"]] = row
    eager_ms = rows[EAGER]["ms"] if EAGER in rows else None
    for row in rows.values():
        if row["ms"] and eager_ms:
            row["speedup"] = eager_ms / row["ms"]
    return list(rows.values())


def run(args):
    """Run all measurements; returns the JSON-ready result dict."""
    disc, disc_error = None, None
    if {"disc", "disc-sync"} & set(args.devices):
        try:
            import torch_disc as disc
        except Exception as exc:  # not built yet, or broken: report, don't abort
            disc_error = Unavailable(describe(exc))

    rows = []
    for model in args.models:
        rows += time_model(model, args, disc, disc_error)

    trace = {"cpu": trace_cost("cpu", lambda: None, args.trace_ops)}
    if "disc" in args.devices:
        try:
            if disc is None:
                raise disc_error
            trace["disc"] = trace_cost("disc", disc.sync, args.trace_ops,
                                       disc.metrics.counters)
        except Exception as exc:
            trace["disc"] = {"error": describe(exc)}

    for model in args.models:
        group = {r["device"]: r["ms"] for r in rows if r["model"] == model}
        compiled = group.get(f"cpu+{args.compile_backend}")
        for row in rows:
            if row["model"] == model:
                row["vs_compile"] = compiled / row["ms"] if compiled and row["ms"] else None

    return {
        "config": {k: getattr(args, k) for k in
                   ("steps", "warmup", "rounds", "batch_size", "models", "devices", "trace_ops",
                    "compile_backend", "quick")},
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "steps": rows,
        "trace": trace,
    }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="MNIST step-time and tracing benchmark")
    p.add_argument("--models", type=lambda s: s.split(","), default=["mlp", "cnn", "mlp-bf16"],
                   help="mlp, cnn; with -bf16 (mlp-bf16) under bfloat16 autocast")
    p.add_argument("--devices", type=lambda s: s.split(","),
                   default=["cpu", "disc", "disc-sync", "compile"],
                   help="comma list of cpu, disc, disc-sync, compile (default: all)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"timed steps (median; default {DEFAULTS['steps']})")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"untimed steps first (default {DEFAULTS['warmup']})")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: {steps} timed steps after {warmup} warm-up, "
                        "{trace_ops} tracing-loop iterations".format(**QUICK))
    p.add_argument("--rounds", type=int, default=None,
                   help="blocks the timed steps are split into, the devices taking "
                        f"turns block by block (default {DEFAULTS['rounds']})")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--compile-timeout", type=float, default=300, help="seconds")
    p.add_argument("--trace-ops", type=int, default=None,
                   help="loop iterations for the tracing-cost test (2 ops each; "
                        f"default {DEFAULTS['trace_ops']})")
    add_threads(p, help=THREADS_HELP + "; fewer is steadier on a shared machine")
    add_out(p, default=ROOT / "results" / "bench_mnist.json", help=None)
    p.add_argument("--compiled-worker", metavar="MODEL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = set(args.devices) - {"cpu", "disc", "disc-sync", "compile"}
    if unknown:
        p.error(f"unknown devices: {', '.join(sorted(unknown))}")
    fill_defaults(args, QUICK if args.quick else DEFAULTS)
    if args.steps < 1 or args.warmup < 0 or args.trace_ops < 1 or args.rounds < 1:
        p.error("--steps, --rounds and --trace-ops must be >= 1, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    if args.compiled_worker:  # subprocess side of time_compiled()
        info = {}
        with PeakRSS() as mem:
            times = time_steps(args.compiled_worker, "cpu", lambda: None, args.steps,
                               args.warmup, args.batch_size, args.compile_backend,
                               counters=dynamo_counters, info=info)
        print(json.dumps({"times_ms": times, "counters": info, "memory": mem.as_dict()}))
        return None
    result = run(args)
    print(isa_line())
    print(markdown(result["steps"], result["trace"]))
    print()
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
