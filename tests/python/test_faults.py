"""Faults in the compile path: a failing compiler pipeline or codegen runs the
graph on the reference executor (counted, warned, same results); Ctrl-C
during a compile leaves the backend usable."""
import _thread
import signal
import threading
import time

import pytest
import torch

import torch_disc
from torch_disc import _C


def program(x):
    return (x * 2).tanh().exp() + x.sigmoid()


@pytest.fixture
def inject():
    """Sets DISC_INJECT_FAULT for new compiles; forgets the failures after."""
    def set_stage(stage):
        torch_disc.options.set("DISC_INJECT_FAULT", stage)  # clears the compile cache
    yield set_stage
    torch_disc.options.set("DISC_INJECT_FAULT", "none")
    _C.clear_compile_cache()
    torch_disc.metrics.reset()  # the failures were the point


@pytest.mark.parametrize("stage,warning", [
    ("pipeline", "compiler pipeline failed.*fault-injection"),
    ("codegen", "codegen failed.*DISC_INJECT_FAULT=codegen"),
])
def test_failing_compile_falls_back_to_the_reference_executor(inject, stage, warning, counters):
    x = torch.randn(64, 32)
    inject(stage)
    with pytest.warns(UserWarning, match=warning):
        got = program(x.to("disc")).cpu()
    torch.testing.assert_close(got, program(x))
    c = counters()
    assert c["compile_failures"] == 1
    assert c.get("launches.fused", 0) == 0  # it really ran on the reference executor
    # The next graph (fault gone) compiles and fuses again.
    torch.testing.assert_close(program(x.to("disc") + 1).cpu(), program(x + 1), rtol=1e-5, atol=1e-6)


def test_keyboard_interrupt_during_a_compile_leaves_the_backend_usable():
    _C.clear_compile_cache()
    x = torch.randn(256, 64)
    d = x.to("disc")
    # Every sync below compiles a new structure (a longer chain each time), so
    # Ctrl-C lands while the sync is compiling or right after it returns to
    # Python (where KeyboardInterrupt is raised); a loaded machine may need
    # many iterations before the timer thread runs.
    # The interrupt is re-sent every 0.5 s until one arrives: on a loaded
    # machine the first can land before the loop's `try` has started.
    stop = threading.Event()

    def interrupt():
        while not stop.wait(0.01 if sent[0] == 0 else 0.5):
            sent[0] += 1
            _thread.interrupt_main()
    sent = [0]
    interrupted = False
    # interrupt_main() does nothing unless Python's own SIGINT handler is
    # installed; in the full suite something before this test replaces it.
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sender = threading.Thread(target=interrupt, daemon=True)
    deadline = time.monotonic() + 30
    try:
        sender.start()
        y = d
        while time.monotonic() < deadline:
            y = (y * 0.5).tanh()
            y.sum().cpu()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        sender.join()
    try:  # a second interrupt already on its way is absorbed here
        time.sleep(0.01)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted, f"no KeyboardInterrupt in 30 s after {sent[0]} interrupts"
    torch.testing.assert_close(((d * 3).cos().exp().mul(d).tanh().sum(1)).cpu(),
                               (x * 3).cos().exp().mul(x).tanh().sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close((d + 1).cpu(), x + 1)
    assert torch_disc.metrics.counters().get("compile_failures", 0) == 0
