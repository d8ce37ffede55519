"""Entry point for ``python -m benchmarks``: the machine roofline, the MNIST
step benchmark, the MiniLM-L6 (BERT) one and the dynamic-shapes one, then
one report.

    python -m benchmarks [--quick] [--results DIR] [MNIST options]
                         [--bert [BERT options]] [--dynamic [options]]

``--quick`` before any marker makes everything a smoke test (few steps,
fewer roofline repetitions); ``--results DIR`` (default ``results/``) is
where the report goes.  Other options before ``--bert`` / ``--dynamic`` go
to ``benchmarks.mnist_step``, those after ``--bert`` to
``benchmarks.bert_step``, those after ``--dynamic`` to
``benchmarks.dynamic_shapes`` (e.g. ``python -m benchmarks --bert --quick
--dynamic --quick``: only those two quick); the two markers may come in
either order.  Each module's ``--help`` lists its options.

Each benchmark prints its own tables as it goes.  At the end, in the
results folder: ``bench.json`` (machine, roofline, every row, and each
module's full result), ``bench.md`` (the tables) and ``bench.png``
(speedups over CPU eager; needs matplotlib, which ``scripts/setup.sh``
installs -- without it the run says why and writes the other two).  The
MNIST module also writes its own ``bench_mnist.json`` there (unless given
``--out``), as before.
A benchmark that fails is reported in the table; the others still run.
"""

import sys
import time
import traceback
from pathlib import Path

from benchmarks import bert_step, dynamic_shapes, mnist_step, report, roofline

ROOT = Path(__file__).resolve().parents[1]
MARKERS = {"--bert": "bert", "--dynamic": "dynamic"}
MODULES = {"mnist": mnist_step, "bert": bert_step, "dynamic": dynamic_shapes}


def split_argv(argv):
    """(quick, results dir, {section: args}); exits on --help."""
    sections = {"mnist": [], "bert": [], "dynamic": []}
    current, quick, results = "mnist", False, ROOT / "results"
    args = iter(argv)
    for arg in args:
        if arg in MARKERS:
            current = MARKERS[arg]
        elif current == "mnist" and arg in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        elif current == "mnist" and arg == "--quick":
            quick = True
        elif current == "mnist" and (arg == "--results" or arg.startswith("--results=")):
            value = arg.partition("=")[2] if "=" in arg else next(args, None)
            if not value:
                sys.exit("--results needs a folder")
            results = Path(value)
        else:
            sections[current].append(arg)
    if not any(a == "--out" or a.startswith("--out=") for a in sections["mnist"]):
        sections["mnist"] += ["--out", str(results / "bench_mnist.json")]
    if quick:
        for section in sections.values():
            if "--quick" not in section:
                section.append("--quick")
    return quick, results, sections


def main(argv):
    quick, results, sections = split_argv(argv)
    for name, module in MODULES.items():  # bad options fail here, before any measuring
        module.parse_args(sections[name])

    start = time.perf_counter()
    rep = report.new_report(quick, argv)
    print("Machine roofline" + (" (--quick)" if quick else ""), flush=True)
    try:
        rep["roofline"] = roofline.run(quick=quick)
        print(roofline.table(rep["roofline"]))
    except Exception as exc:
        rep["roofline_error"] = f"{type(exc).__name__}: {exc}"
        print(f"roofline failed: {rep['roofline_error']}")

    for name, module in MODULES.items():
        print(flush=True)
        t0 = time.perf_counter()
        try:
            result = module.main(sections[name])
            report.add_workload(rep, name, result)
        except Exception as exc:  # one broken benchmark must not lose the others
            traceback.print_exc()
            msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            rep["workload_errors"][name] = msg
            rep["rows"].append(report._row(f"{name} (whole benchmark)", "all", error=msg[:200]))
        rep["workload_seconds"][name] = time.perf_counter() - t0

    rep["seconds"] = time.perf_counter() - start
    paths = report.write(rep, results)
    print("\nSummary")
    print(report.rows_table(rep["rows"]))
    if not rep["plot"].get("path"):
        print(f"\nno plot: {rep['plot']['error']}")
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 1 if rep["workload_errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
