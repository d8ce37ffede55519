"""What the benchmark modules' command lines share.

Each module keeps its own ``parse_args`` and ``main``; these are the parts
they have in common: the ``--threads`` and ``--out`` options, filling the
options left unset from the module's normal or ``--quick`` defaults, setting
the thread count, timing ``run(args)``, and printing the header and table
and writing the result as JSON at the end.

    args = p.parse_args(argv)          # p has cli.add_threads(p), cli.add_out(p)
    cli.fill_defaults(args, QUICK if args.quick else DEFAULTS)
    cli.set_threads(args.threads)
    result = cli.timed_run(run, args)
    return cli.finish(result, args, header, table)
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import torch

THREADS_HELP = "torch CPU threads (default: torch's choice)"
OUT_HELP = "also write the result as JSON"


def add_threads(parser, default=None, help=THREADS_HELP):
    parser.add_argument("--threads", type=int, default=default, help=help)


def add_out(parser, default=None, help=OUT_HELP):
    parser.add_argument("--out", type=Path, default=default, help=help)


def fill_defaults(args, defaults):
    """Options still None take their value from ``defaults``; returns args."""
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def set_threads(threads):
    """``--threads``: torch's CPU threads; unset or 0 leaves torch's choice."""
    if threads:
        torch.set_num_threads(threads)


def timed_run(run, args):
    """``run(args)``'s result dict, with the seconds it took as ``seconds``."""
    start = time.perf_counter()
    result = run(args)
    result["seconds"] = time.perf_counter() - start
    return result


def isa_line():
    """The CPU and the instruction sets the figures ran at: disc's (the CPU's
    own or DISC_CPU_ISA's cap) and ATen's (ATEN_CPU_CAPABILITY);
    scripts/with_isa.sh caps both."""
    import torch_disc
    from benchmarks import roofline
    cap = os.environ.get("DISC_CPU_ISA", "native")
    disc = torch_disc.build_components()["cpu_isa"]
    return (f"CPU: {roofline.machine_info()['cpu_model']}; ISA: disc {disc}"
            f"{' (native)' if cap == 'native' else f' (DISC_CPU_ISA={cap})'}, "
            f"ATen {torch.backends.cpu.get_cpu_capability()}")


def finish(result, args, header, text):
    """Prints a benchmark's header, table and total time; writes --out if set."""
    print(isa_line())
    print(header)
    print(text)
    print(f"\n({result['seconds']:.0f} s in all)")
    if args.out:
        write_json(args.out, result)
    return result


def write_json(path, result):
    """Writes a benchmark's result dict as JSON (creating the folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


def fmt(value, spec):
    """A table cell: ``value`` formatted, or "n/a" for None."""
    return "n/a" if value is None else format(value, spec)


def worker_failure(returncode, stderr):
    """One line saying why a benchmark's worker process failed: the signal
    that killed it (a crash prints no traceback, and its stderr's last line
    is some unrelated warning), else the last line it wrote."""
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    lines = stderr.strip().splitlines() or [f"exit code {returncode}"]
    return lines[-1][:120]


def run_worker(cmd, cwd, timeout, env=None):
    """Runs a benchmark's worker process; returns ``(stdout, failure)``.
    ``failure`` is None when it exited with 0, else one line saying why
    (its timeout, or ``worker_failure``); ``stdout`` is what it printed,
    before a timeout too.  The worker gets a session of its own, so that a
    timeout also kills the processes it started (inductor's compile
    workers)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return out, f"timed out after {timeout:g}s"
    return out, None if proc.returncode == 0 else worker_failure(proc.returncode, err)


def run_ranks(module, world, tag, options, timeout, env=None):
    """Runs ``world`` processes of ``python -m module --worker RANK WORLD
    PORT TAG OUT *options`` on one free 127.0.0.1 port (Gloo over lo, one
    OpenMP thread each); returns the JSON each wrote to its OUT, by rank, or
    None when a rank failed or outlived ``timeout`` seconds (then killed)."""
    import socket
    import sys
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"{r}.json") for r in range(world)]
        procs = [subprocess.Popen(
            [sys.executable, "-m", module, "--worker", str(r), str(world), str(port), tag, outs[r],
             *options],
            cwd=root, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
                           **(env or {})})
            for r in range(world)]
        for p in procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        ranks = []
        for p, out in zip(procs, outs):
            if p.returncode != 0 or not os.path.exists(out):
                return None
            with open(out) as f:
                ranks.append(json.load(f))
    return ranks
