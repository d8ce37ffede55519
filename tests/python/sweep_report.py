"""Runs the OpInfo sweep (test_opinfo_sweep.py) and writes its pass/fail/skip
table as Markdown; ``make sweep`` runs it over every op.

    python tests/python/sweep_report.py [--quick] [--out results/sweep.md] [pytest args]

A backend bug can kill or hang the process, so the sweep runs in a pytest
subprocess with this file as a plugin (``-p sweep_report``): it logs each
test's start and outcome to a JSON-lines file as it goes. When the process
dies (or logs nothing for ``--hang-seconds``), the test that was running is
recorded as ``crash`` (or ``hang``) and a new process goes on with the tests
that have no outcome yet. Beside ``--out`` (``X.md``) it leaves ``X.log.jsonl``
(every outcome, with the full message) and ``X.pytest.txt`` (pytest's output,
crash dumps included).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEST_FILE = os.path.join(HERE, "test_opinfo_sweep.py")

# ----------------------------------------------------------------------------
# The plugin side (inside the pytest process).


def _log(record):
    import torch_disc  # the plugin runs in the sweep's pytest, which imports it

    path = torch_disc.options.get("DISC_SWEEP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def pytest_collection_modifyitems(session, config, items):
    # One op's tests together (forward, then backward), so that after a crash
    # the next process only collects the ops that are left.
    items.sort(key=lambda it: split_id(it.nodeid)[0])
    import torch_disc

    path = torch_disc.options.get("DISC_SWEEP_DONE")
    done = set()
    if path and os.path.exists(path):
        with open(path) as f:
            done = set(line.strip() for line in f)
    keep = [it for it in items if it.nodeid not in done]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it.nodeid in done])
        items[:] = keep
    _log({"collected": [it.nodeid for it in items]})


def pytest_runtest_logstart(nodeid, location):
    _log({"start": nodeid})


def _message(report):
    if hasattr(report, "wasxfail"):
        return report.wasxfail
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).replace("Skipped: ", "")
    text = getattr(report, "longreprtext", "") or ""
    # The assertion's own message: the lines pytest marks with "E".
    lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    message = " / ".join(ln for ln in lines if ln) or (text.strip().splitlines() or [""])[-1]
    return message[:400]


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if hasattr(report, "wasxfail"):
            outcome = "xfail" if report.outcome == "skipped" else "xpass"
        else:
            outcome = {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
        message = _message(report)
        if outcome == "fail" and message.startswith("Failed: CPU fallback only"):
            outcome = "fallback"  # correct results, from ops that ran on the CPU fallback
        _log({"nodeid": report.nodeid, "outcome": outcome, "message": message,
              "seconds": round(report.duration, 3)})
    elif report.when == "teardown" and report.outcome == "failed":
        _log({"nodeid": report.nodeid, "outcome": "fail", "message": "teardown: " + _message(report),
              "seconds": round(report.duration, 3)})


# ----------------------------------------------------------------------------
# The driver side.


def read_log(path):
    outcomes, started, collected = {}, [], set()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if "collected" in r:
                    collected.update(r["collected"])
                elif "start" in r:
                    started.append(r["start"])
                else:
                    outcomes[r["nodeid"]] = r  # a teardown failure overrides the call's pass
    return outcomes, started, collected


def all_op_keys():
    """Every op of op_db, as test_opinfo_sweep.py names them, sorted."""
    sys.path[:0] = [os.path.join(ROOT, "python"), ROOT, HERE]
    from test_opinfo_sweep import op_key
    from torch.testing._internal.common_methods_invocations import op_db
    return sorted(op_key(op) for op in op_db)


def run_all(args, extra, log_path, done_path, output_path):
    """Runs the sweep in chunks of ``--chunk`` ops, one pytest process each (a
    crash's restart then collects only the rest of its chunk); returns the
    outcome of every test."""
    env = dict(os.environ)
    env["DISC_SWEEP_LOG"] = log_path
    env["DISC_SWEEP_DONE"] = done_path
    env.setdefault("OMP_NUM_THREADS", "1")
    if not args.quick:
        env["DISC_SWEEP"] = "all"
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "pytest", TEST_FILE, "-p", "sweep_report", "-q", "-p", "no:cacheprovider",
           "--no-header", "-rN", "--tb=short"] + extra
    for path in (log_path, done_path, output_path):
        if os.path.exists(path):
            os.remove(path)
    open(done_path, "w").close()
    keys = [None] if args.quick else all_op_keys()
    chunks = [keys[i:i + args.chunk] for i in range(0, len(keys), args.chunk)]
    for n, chunk in enumerate(chunks, 1):
        if chunk != [None]:
            env["DISC_SWEEP_OPS"] = ",".join(chunk)
            print(f"sweep: chunk {n}/{len(chunks)}: {chunk[0]} .. {chunk[-1]}", file=sys.stderr)
        run_chunk(args, cmd, env, log_path, done_path, output_path)
    return read_log(log_path)[0]


def run_chunk(args, cmd, env, log_path, done_path, output_path):
    """Runs pytest until every test it collects has an outcome, restarting
    it after each crash or hang."""
    while True:
        with open(output_path, "a") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                                    stdout=out, stderr=subprocess.STDOUT)
        size, last_change, hung = -1, time.time(), False
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                now_size = os.path.getsize(log_path) if os.path.exists(log_path) else 0
                if now_size != size:
                    size, last_change = now_size, time.time()
                elif time.time() - last_change > args.hang_seconds:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    hung = True
        finally:
            if proc.poll() is None:  # the driver itself was stopped: stop its pytest too
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        outcomes, started, collected = read_log(log_path)
        unfinished = [n for n in started if n not in outcomes]
        if not unfinished:
            if proc.returncode not in (0, 1, 5):
                print(f"sweep: pytest exited with {proc.returncode} outside any test", file=sys.stderr)
            return
        victim = unfinished[-1]
        rc = proc.returncode
        why = (f"no output for {args.hang_seconds:.0f}s (killed)" if hung else
               f"killed by signal {-rc}" if rc < 0 else f"process exited with {rc}")
        print(f"sweep: {victim}: {'hang' if hung else 'crash'}: {why}; going on", file=sys.stderr)
        with open(log_path, "a") as f:
            f.write(json.dumps({"nodeid": victim, "outcome": "hang" if hung else "crash",
                                "message": why, "seconds": 0}) + "\n")
        with open(done_path, "w") as f:
            f.write("\n".join(list(outcomes) + [victim]) + "\n")
        # The next process collects only the ops with tests left.
        left = {split_id(n)[0] for n in collected if n not in outcomes and n != victim}
        if not left:
            return
        env["DISC_SWEEP_OPS"] = ",".join(sorted(left))


STATUSES = ["pass", "fallback", "fail", "xfail", "xpass", "skip", "crash", "hang"]


def split_id(nodeid):
    """'...::test_forward[add-s3]' -> ('add', 'fwd', 's3');
    '...[add-s3-float16]' -> ('add (float16)', 'fwd', 's3')."""
    test, _, param = nodeid.partition("[")
    direction = "fwd" if test.endswith("test_forward") else "bwd"
    param, dtype = param.rstrip("]"), ""
    for name in ("bfloat16", "float16"):
        if param.endswith("-" + name):
            param, dtype = param[:-len(name) - 1], f" ({name})"
    op, _, sample = param.rpartition("-")
    return op + dtype, direction, sample


def cell(counts):
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts.get(s)]
    return ", ".join(parts) or "-"


def markdown(outcomes, title, seconds):
    per_op = defaultdict(lambda: {"fwd": defaultdict(int), "bwd": defaultdict(int), "notes": []})
    totals = {"fwd": defaultdict(int), "bwd": defaultdict(int)}
    for nodeid, r in sorted(outcomes.items()):
        op, direction, sample = split_id(nodeid)
        per_op[op][direction][r["outcome"]] += 1
        totals[direction][r["outcome"]] += 1
        if r["outcome"] != "pass" and r.get("message"):
            msg = " ".join(r["message"].split()).replace("|", "\\|")[:160]
            note = f"{direction} {sample}: {r['outcome']}: {msg}"
            if len(per_op[op]["notes"]) < 3 and not any(msg in n for n in per_op[op]["notes"]):
                per_op[op]["notes"].append(note)
    lines = [f"# {title}", "",
             f"PyTorch OpInfo samples (float32; the quick ops in bfloat16 and float16 too) on disc vs CPU, from `tests/python/test_opinfo_sweep.py`; "
             f"{len(outcomes)} tests, {seconds:.0f} s. Each cell counts samples by outcome; "
             f"`fallback`: the results match, but some op ran on the CPU fallback (a failure in CI).", "",
             "| | " + " | ".join(STATUSES) + " |", "|---|" + "---:|" * len(STATUSES)]
    for direction, name in (("fwd", "forward"), ("bwd", "backward")):
        lines.append(f"| {name} | " + " | ".join(str(totals[direction].get(s, 0)) for s in STATUSES) + " |")
    lines += ["", "| op | forward | backward | notes (first non-passing samples) |", "|---|---|---|---|"]
    for op in sorted(per_op):
        d = per_op[op]
        lines.append(f"| `{op}` | {cell(d['fwd'])} | {cell(d['bwd'])} | {'<br>'.join(d['notes'])} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the CI subset (default: every op)")
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "sweep.md"))
    parser.add_argument("--hang-seconds", type=float, default=180.0,
                        help="a test that logs nothing for this long is killed and recorded as a hang")
    parser.add_argument("--chunk", type=int, default=50, help="ops per pytest process")
    args, extra = parser.parse_known_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    base = os.path.splitext(os.path.abspath(args.out))[0]
    start = time.time()
    outcomes = run_all(args, extra, base + ".log.jsonl", base + ".done.txt", base + ".pytest.txt")
    seconds = time.time() - start
    title = "OpInfo sweep: " + ("quick subset" if args.quick else "all ops")
    with open(args.out, "w") as f:
        f.write(markdown(outcomes, title, seconds))
    counts = defaultdict(int)
    for r in outcomes.values():
        counts[r["outcome"]] += 1
    print(f"sweep: wrote {args.out}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]))


if __name__ == "__main__":
    main()
