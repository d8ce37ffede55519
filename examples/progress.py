"""Progress of a training or evaluation loop, for a person or for a log.

On a terminal (stdout is a TTY) a tqdm bar, its loss updated every
``postfix_every`` steps. Otherwise -- output to a log file, CI, ``nohup``
-- one line on stdout every ``interval`` seconds and after the last step:

    epoch 1/1: step 300/1875 (16%), loss 0.4123, 2210 samples/s, 4.3 s

so that a log shows how far a run is before the epoch ends. Reading the
loss for a line is a sync on disc, once per line, not per step.
"""

import sys
import time

from tqdm import tqdm


class Progress:
    def __init__(self, total, desc, enabled=True, interval=10.0, postfix_every=50, stream=None):
        self.total, self.desc, self.interval = total, desc, interval
        self.postfix_every = postfix_every
        self.stream = stream or sys.stdout
        self.bar = None
        self.lines = enabled and not self.stream.isatty()
        if enabled and not self.lines:
            self.bar = tqdm(total=total, desc=desc, leave=False)
        self.step = self.samples = 0
        self.start = self.last = time.perf_counter()

    def update(self, samples, loss=None):
        """One step of ``samples`` samples; ``loss`` a tensor (read only when shown)."""
        self.step += 1
        self.samples += samples
        if self.bar is not None:
            self.bar.update(1)
            if loss is not None and (self.step - 1) % self.postfix_every == 0:
                self.bar.set_postfix(loss=f"{loss.item():.4f}")
        elif self.lines:
            now = time.perf_counter()
            if now - self.last >= self.interval or self.step == self.total:
                self.last = now
                self.print_line(now, loss)

    def print_line(self, now, loss):
        elapsed = now - self.start
        parts = [f"step {self.step}/{self.total} ({100 * self.step // max(self.total, 1)}%)"]
        if loss is not None:
            parts.append(f"loss {loss.item():.4f}")
        parts.append(f"{self.samples / max(elapsed, 1e-9):.0f} samples/s")
        parts.append(f"{elapsed:.1f} s")
        print(f"{self.desc}: " + ", ".join(parts), file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
