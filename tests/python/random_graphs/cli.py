"""The command line: ``python tests/python/random_graphs --seed N`` replays
one program (``--seeds a,b``: one graph), without a seed it runs a sweep."""
import argparse
import sys

import torch_disc

from .config import MAX_OPS
from .generator import generate
from .runner import run_graphs


def main(argv=None):
    ap = argparse.ArgumentParser(description=sys.modules[__package__].__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, help="replay one program (printed first)")
    ap.add_argument("--seeds", help="comma-separated seeds, traced into one graph (a failure's graph)")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=torch_disc.options.get("DISC_FUZZ_GRAPHS"))
    ap.add_argument("--batch", type=int, default=16, help="programs per graph (sync)")
    ap.add_argument("--max-ops", type=int, default=MAX_OPS, help="longest program")
    args = ap.parse_args(argv)

    if args.seed is not None or args.seeds:
        seeds = [args.seed] if args.seed is not None else [int(s) for s in args.seeds.split(",")]
        for s in seeds:
            print(generate(s, args.max_ops).text() + "\n")
        args.batch = len(seeds)
    else:
        seeds = range(args.start, args.start + args.count)
    failures = []
    step = 250
    for s in range(0, len(seeds), step):
        f, stats = run_graphs(seeds[s:s + step], batch=args.batch, max_ops=args.max_ops)
        failures += f
        print(f"seeds {seeds[s]}..{seeds[min(s + step, len(seeds)) - 1]}: {stats}, "
              f"{len(f)} failures", flush=True)
    for f in failures:
        print("\n" + f.report())
    c = torch_disc.metrics.counters()
    print(f"\n{len(failures)} failures; fallbacks {c.get('fallbacks', 0)}, compile failures "
          f"{c.get('compile_failures', 0)}, fused launches {c.get('launches.fused', 0)}")
    return 1 if failures else 0
