"""Peak resident memory of this process over a block of code.

Method, best first:

* ``vmhwm``: write ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0), which
  resets the kernel's high-water mark of resident memory (``VmHWM``) to the
  current RSS; after the block, ``VmHWM`` in ``/proc/self/status`` is the
  peak RSS reached inside it.  Exact, no sampling thread.
* ``ru_maxrss``: where that file cannot be written, the growth of
  ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the all-time peak) over the
  block: a lower bound, 0 when the block stayed below an earlier peak.

Both count the whole process (Python, torch, the model, the compile caches),
so the figure of interest is ``peak_rss_delta_mib``: peak inside the block
minus RSS at its start.  Child processes (torch.compile's workers) are not
included.

    with PeakRSS() as mem:
        work()
    mem.as_dict()  # {"peak_rss_mib": ..., "peak_rss_delta_mib": ..., "method": ...}
"""

import gc
import resource

METHODS = {
    "vmhwm": "VmHWM of /proc/self/status after a reset through /proc/self/clear_refs: "
             "peak RSS inside the measurement",
    "ru_maxrss": "growth of getrusage(RUSAGE_SELF).ru_maxrss over the measurement: "
                 "a lower bound (0 if it stayed below an earlier peak)",
}


def _status_kib(field):
    """A ``kB`` field of /proc/self/status, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _maxrss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


class PeakRSS:
    """Context manager: peak RSS of this process inside the ``with`` block."""

    def __enter__(self):
        gc.collect()
        self.start_kib = _status_kib("VmRSS")
        self.method = "vmhwm" if self.start_kib is not None and _reset_hwm() else "ru_maxrss"
        self.maxrss_before = _maxrss_kib()
        self.peak_kib = None
        return self

    def __exit__(self, *exc):
        if self.method == "vmhwm":
            self.peak_kib = _status_kib("VmHWM")
        else:
            after = _maxrss_kib()
            start = self.start_kib if self.start_kib is not None else self.maxrss_before
            self.peak_kib = max(after, start) if after > self.maxrss_before else start
        return False

    def as_dict(self):
        if self.peak_kib is None:
            return {}
        start = self.start_kib if self.start_kib is not None else self.maxrss_before
        return {"peak_rss_mib": self.peak_kib / 1024,
                "peak_rss_delta_mib": max(self.peak_kib - start, 0) / 1024,
                "method": self.method}
