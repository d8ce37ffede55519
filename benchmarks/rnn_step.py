"""Time training steps of recurrent classifiers on disc vs CPU eager and
torch.compile.

The model: an embedding (1000 x 64), one nn.LSTM / nn.GRU / nn.RNN layer
(64 -> 128, batch_first) and a linear head on the last step's output,
cross entropy, Adam; a fixed random batch of ``--batch`` sequences of
``--length`` tokens that already lives on the device. Each timed step ends
with ``loss.item()``. ``disc`` runs graphs on the graph worker (one core
more than ``--threads``), ``disc-sync`` on the syncing thread
(``DISC_ASYNC=0``): the figure to compare at equal cores. torch.compile
(inductor) runs in-process; a failure is reported, not raised. Reported:
median ms over ``--steps`` after ``--warmup`` steps, the devices taking
turns in ``--rounds`` blocks, and the speedup over eager (eager ms / ms).

Run from the repository root: ``python -m benchmarks.rnn_step``.
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.cli import add_out, add_threads, fmt, set_threads, write_json

CELLS = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}
DEVICES = ["eager", "inductor", "disc", "disc-sync"]


class Classifier(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        self.rnn = CELLS[cell](64, 128, batch_first=True)
        self.head = nn.Linear(128, 2)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out[:, -1])


class Stepper:
    """One device's model, optimizer and batch; step() is one training step."""

    def __init__(self, cell, device, args):
        import torch_disc

        torch.manual_seed(0)
        self.disc = device.startswith("disc")
        self.sync = device == "disc-sync"
        where = "disc" if self.disc else "cpu"
        self.model = Classifier(cell).to(where)
        forward = torch.compile(self.model) if device == "inductor" else self.model
        self.forward = forward
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.ids = torch.randint(0, 1000, (args.batch, args.length)).to(where)
        self.labels = torch.randint(0, 2, (args.batch,)).to(where)
        self.times = []
        self.torch_disc = torch_disc

    def step(self):
        if self.disc:
            self.torch_disc.set_async(not self.sync)
        start = time.perf_counter()
        self.opt.zero_grad()
        loss = F.cross_entropy(self.forward(self.ids), self.labels)
        loss.backward()
        self.opt.step()
        loss.item()
        elapsed = (time.perf_counter() - start) * 1e3
        if self.disc:
            self.torch_disc.set_async(True)
        return elapsed


def time_cell(cell, args):
    """Median step ms per device ({device: ms or an error string})."""
    steppers, result = {}, {}
    for device in DEVICES:
        try:
            s = Stepper(cell, device, args)
            for _ in range(args.warmup):
                s.step()
            steppers[device] = s
        except Exception as e:  # a compiler that fails here is a table entry
            result[device] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    per_round = max(1, args.steps // args.rounds)
    for _ in range(args.rounds):
        for device, s in steppers.items():
            s.times += [s.step() for _ in range(per_round)]
    for device, s in steppers.items():
        result[device] = statistics.median(s.times)
    return result


def markdown(rows):
    lines = ["| model | " + " | ".join(f"{d} ms" for d in DEVICES) + " | "
             + " | ".join(f"{d} vs eager" for d in DEVICES[1:]) + " |",
             "|---|" + "---:|" * (2 * len(DEVICES) - 1)]
    for cell, r in rows.items():
        eager = r.get("eager")
        ms = [fmt(r[d], ".2f") if isinstance(r.get(d), float) else str(r.get(d)) for d in DEVICES]
        ratios = [fmt(eager / r[d], ".2f") if isinstance(r.get(d), float) and
                  isinstance(eager, float) else "n/a" for d in DEVICES[1:]]
        lines.append(f"| {cell} | " + " | ".join(ms) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_threads(p, default=1)
    add_out(p)
    p.add_argument("--cells", default="LSTM,GRU,RNN")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    set_threads(args.threads)
    rows = {cell: time_cell(cell, args) for cell in args.cells.split(",")}
    print(f"recurrent classifier training step, batch {args.batch}, length {args.length}, "
          f"{torch.get_num_threads()} thread(s) (disc: + the graph worker)")
    print(markdown(rows))
    if args.out:
        write_json(args.out, {"threads": torch.get_num_threads(), "rows": rows})


if __name__ == "__main__":
    main()
