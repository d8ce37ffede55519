"""Running and comparing: each program on disc under every executor and on
CPU eager (with a float64 run for the rounding error), the tolerance check,
and ``Failure`` reports with the replay command."""
import math
import traceback
from dataclasses import dataclass
from typing import List, Optional

import torch

from .config import CLASS_NAMES, FLOAT32, MAX_OPS, ROUNDING_FACTOR, TOLERANCES
from .generator import generate
from .program import Program

# --------------------------------------------------------------------------
# Running and comparing


@dataclass
class Failure:
    program: Program
    instance: int
    what: str
    graph_seeds: tuple = ()  # the programs traced into the same graph

    def report(self) -> str:
        p = self.program
        shapes = p.instance_shapes(self.instance)
        max_ops = f" --max-ops {p.max_ops}" if p.max_ops != MAX_OPS else ""
        others = ""
        if len(self.graph_seeds) > 1:
            others = (f"\n(traced into one graph with seeds {list(self.graph_seeds)}: replay them "
                      f"together with --seeds {','.join(map(str, self.graph_seeds))}{max_ops})")
        return (f"random graph seed {p.seed} (instance {self.instance}, input shapes {shapes}): "
                f"{self.what}\n{p.text()}\n"
                f"replay: OMP_NUM_THREADS=1 PYTHONPATH=. python tests/python/random_graphs "
                f"--seed {p.seed}{max_ops}{others}")


def tolerance(program: Program, k: int, magnitudes: dict):
    """(rtol, atol) of output k: its class's, atol times its scale."""
    rtol, atol = TOLERANCES[program.out_classes[k]]
    scale = max([1.0] + [magnitudes.get(d, 0.0) for d in program.out_deps[k]])
    return rtol, atol * scale


def compare(program, k, got, want, magnitudes, rounding=None) -> Optional[str]:
    """None if ``got`` matches ``want`` (output k), else what differs.
    ``rounding``: |float32 - float64| of the eager output, per element."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"output {program.outputs[k]}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if not want.dtype.is_floating_point:
        if not torch.equal(got, want):
            return f"output {program.outputs[k]}: integers differ ({(got != want).sum()} elements)"
        return None
    rtol, atol = tolerance(program, k, magnitudes)
    g, w = got.double(), want.double()
    allowed = atol + rtol * w.abs()
    if rounding is not None:
        allowed = allowed + ROUNDING_FACTOR * torch.nan_to_num(rounding, nan=math.inf, posinf=math.inf)
    allowed = torch.nan_to_num(allowed, nan=0.0, posinf=math.inf)
    diff = (g - w).abs()
    same = (torch.isnan(g) & torch.isnan(w)) | (g == w)
    diff = torch.where(same, torch.zeros_like(diff), torch.nan_to_num(diff, nan=math.inf, posinf=math.inf))
    bad = diff > allowed
    if not bool(bad.any()):
        return None
    i = int(torch.where(bad, diff, torch.zeros_like(diff)).flatten().argmax())
    r = "" if rounding is None else f" + {ROUNDING_FACTOR} * {float(rounding.flatten()[i]):.3g} (rounding)"
    return (f"output {program.outputs[k]} ({CLASS_NAMES[program.out_classes[k]]}): at flat index {i} "
            f"{float(got.flatten()[i])!r} vs {float(want.flatten()[i])!r}: |diff| "
            f"{float(diff.flatten()[i]):.3g} > {atol:.3g} + {rtol:g} * |b|{r}")


@dataclass
class Eager:
    outputs: List[torch.Tensor]
    strides: List[tuple]
    magnitudes: dict
    rounding: List[Optional[torch.Tensor]]  # |float32 - float64| per float output


def run_eager(program: Program, instance: int) -> Optional[Eager]:
    """The program on CPU in float32, and in float64 for the rounding error
    of each output; None if the instance does not exist or eager mode
    rejects it."""
    shapes = program.instance_shapes(instance)
    if shapes is None:
        return None
    mags = {}
    inputs = program.make_inputs(instance, shapes)
    try:
        with torch.no_grad():
            outs = program.run(inputs, mags)
    except Exception:
        if instance == 0:
            raise
        return None
    strides = [tuple(o.stride()) for o in outs]
    outs = [o.clone() for o in outs]
    rounding = [None] * len(outs)
    wide = [_widened(t) for t in program.make_inputs(instance, shapes)]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # int64 * 2.5 is float64 too
    try:
        with torch.no_grad():
            exact = program.run(wide)
        rounding = [(o.double() - e.double()).abs() if o.dtype.is_floating_point and e.shape == o.shape
                    else None for o, e in zip(outs, exact)]
    except Exception:
        pass  # no estimate: the fixed tolerances alone
    finally:
        torch.set_default_dtype(default)
    return Eager(outs, strides, mags, rounding)


def _widened(t: torch.Tensor) -> torch.Tensor:
    """A float64 copy of a float32 tensor with its strides (so that views
    and reshapes alias as they do in float32)."""
    if t.dtype != FLOAT32:
        return t
    return torch.empty_strided(t.shape, t.stride(), dtype=torch.float64).copy_(t)


def run_disc(jobs):
    """Runs (program, instance) jobs on disc as one graph (one sync).
    Returns per job: (outputs on CPU, strides), or an error string."""
    import torch_disc

    results = [None] * len(jobs)
    pending = {}
    for j, (program, instance) in enumerate(jobs):
        try:
            ins = [t.to("disc") for t in program.make_inputs(instance)]
            outs = program.run(ins)
            pending[j] = (outs, [tuple(o.stride()) for o in outs])
        except Exception as e:
            results[j] = f"tracing raised {type(e).__name__}: {e}"
    try:
        torch_disc.sync("fuzz")
        for j, (outs, strides) in pending.items():
            results[j] = ([o.cpu() for o in outs], strides)
    except Exception:
        error = f"sync raised: {traceback.format_exc(limit=3)}"
        again = list(pending)
        pending.clear()  # drop the failed graph's tensors before retrying
        for j in again:  # isolate: each program on its own
            results[j] = error if len(jobs) == 1 else run_disc([jobs[j]])[0]
    return results


def _strides_differ(shape, a, b) -> bool:
    """Strides differ in a dim that matters (size > 1, tensor not empty)."""
    if 0 in shape:
        return False
    return any(n > 1 and x != y for n, x, y in zip(shape, a, b))


def run_graphs(seeds, batch: int = 16, executors=("compiled", "reference"), max_ops: int = MAX_OPS):
    """Generates, runs and compares the programs of these seeds; returns
    (failures, stats).

    ``batch`` programs are traced into one graph and synced once; then the
    same programs again at their instance-1 sizes (instance 0 where a program
    has none): the second graph has the first one's structure, so the
    compiled executor revalidates or hits the cache instead of compiling.
    Each executor in ``executors`` runs everything (``set_executor`` clears
    the compile cache); neighbours are compared, and the last with eager. The
    ``DISC_EXECUTOR`` default (``compiled``) is set again at the end."""
    import torch_disc

    programs = [generate(s, max_ops) for s in seeds]
    stats = {"programs": len(programs), "statements": sum(len(p.lines) for p in programs)}
    # jobs[k] = (program, instance); one eager result per distinct job.
    groups = [programs[k:k + batch] for k in range(0, len(programs), batch)]
    chunks, eager = [], {}
    for group in groups:
        for p in group:
            eager[(p.seed, 0)] = run_eager(p, 0)
        chunks.append([(p, 0) for p in group])
        second = []
        for p in group:
            e = run_eager(p, 1)
            if e is not None:
                eager[(p.seed, 1)] = e
            second.append((p, 1 if e is not None else 0))
        chunks.append(second)
    jobs = [job for chunk in chunks for job in chunk]
    graph_of = [tuple(q.seed for q, _ in chunk) for chunk in chunks for _ in chunk]
    stats["graphs"] = len({(p.seed, i) for p, i in jobs})
    got = {}
    default = torch_disc.options.get("DISC_EXECUTOR")
    try:
        for ex in executors:
            torch_disc._C.set_executor(ex)
            got[ex] = [r for chunk in chunks for r in run_disc(chunk)]
    finally:
        torch_disc._C.set_executor(default)
    failures: List[Failure] = []
    pairs = list(zip(executors, executors[1:])) + [(executors[-1], "eager")]
    for j, (p, inst) in enumerate(jobs):
        graph = graph_of[j]
        e = eager[(p.seed, inst)]
        res = {ex: got[ex][j] for ex in executors}
        res["eager"] = (e.outputs, e.strides)
        for ex in executors:
            if isinstance(res[ex], str):
                failures.append(Failure(p, inst, f"{ex}: {res[ex]}", graph))
        for x, y in pairs:
            if isinstance(res[x], str) or isinstance(res[y], str):
                continue
            for k in range(len(p.outputs)):
                msg = compare(p, k, res[x][0][k], res[y][0][k], e.magnitudes, e.rounding[k])
                shape = tuple(res[y][0][k].shape)
                if (msg is None and (y != "eager" or p.out_same_layout[k])
                        and _strides_differ(shape, res[x][1][k], res[y][1][k])):
                    msg = f"output {p.outputs[k]}: strides {res[x][1][k]} vs {res[y][1][k]}"
                if msg:
                    failures.append(Failure(p, inst, f"{x} vs {y}: {msg}", graph))
                    break
    # One report per program and comparison (a second pass repeats it).
    seen, unique = set(), []
    for f in failures:
        key = (f.program.seed, f.instance, f.what.split(":")[0])
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, stats
