"""Streams and events on disc (lazy_backend/accelerator/events.h): one execution
order behind every stream; an event ends the current graph and completes
when it has run; timed events measure graph execution, not tracing."""
import time

import pytest
import torch
import torch_disc


def slow_chain(x, n=20):
    for _ in range(n):
        x = x @ x / x.shape[0]
    return x


def test_streams_come_from_torch_stream_the_accelerator_and_the_device_module():
    s = torch.Stream(device="disc")
    assert s.device_type == torch.accelerator.current_stream().device_type
    assert s.stream_id != torch.disc.default_stream().stream_id == 0
    assert torch.disc.current_stream() == torch.accelerator.current_stream()
    high = torch.get_device_module("disc").Stream(priority=-1)
    assert isinstance(high, torch.Stream) and isinstance(high, torch.disc.Stream)
    assert not isinstance(torch.Stream(device="cpu"), torch.disc.Stream)
    with torch.disc.stream(high):
        assert torch.disc.current_stream() == high
        with s:
            assert torch.accelerator.current_stream() == s
        assert torch.disc.current_stream() == high
    assert torch.disc.current_stream().stream_id == 0


def test_an_untimed_event_rides_the_next_sync(counters):
    x = torch.randn(256, 256).to("disc")
    torch_disc.wait()
    torch_disc.metrics.reset()
    y = slow_chain(x)
    event = torch.Event(device="disc")
    event.record()
    assert counters().get("syncs", 0) == 0  # recording ends no graph
    z = y + 1  # traced after the event: the same graph
    torch_disc.sync()
    event.synchronize()
    assert event.query()
    assert counters()["graphs_run"] == 1 and counters().get("sync.event", 0) == 0
    torch.testing.assert_close(z.cpu(), slow_chain(x.cpu()) + 1, rtol=1e-4, atol=1e-4)


def test_waiting_on_an_event_no_sync_handed_over_syncs_once(counters):
    x = torch.randn(64, 64).to("disc")
    torch_disc.wait()
    torch_disc.metrics.reset()
    y = x * 2
    event = torch.disc.Event()
    event.record()
    event.synchronize()  # nothing else would make y's graph run
    assert event.query()
    assert counters()["sync.event"] == 1 and counters()["graphs_run"] == 1
    event.synchronize()
    assert counters()["sync.event"] == 1
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_a_timed_event_ends_the_graph(counters):
    x = torch.randn(64, 64).to("disc")
    torch_disc.wait()
    torch_disc.metrics.reset()
    y = x * 2
    torch.disc.Event(enable_timing=True).record()
    assert counters()["sync.event"] == 1
    z = y + 1
    torch_disc.sync()
    torch_disc.wait()
    assert counters()["graphs_run"] == 2
    torch.testing.assert_close(z.cpu(), x.cpu() * 2 + 1)


def test_an_event_recorded_with_nothing_traced_adds_no_graph(counters):
    torch_disc.wait()
    torch_disc.metrics.reset()
    e = torch.disc.Event()
    e.record()
    e.synchronize()
    assert e.query() and counters().get("graphs_run", 0) == 0


def test_a_never_recorded_event_is_complete():
    assert torch.Event(device="disc").query()


def test_elapsed_time_measures_graph_execution_not_tracing():
    x = torch.randn(384, 384).to("disc")
    torch_disc.wait()
    torch_disc.metrics.reset()
    start, end = torch.disc.Event(enable_timing=True), torch.disc.Event(enable_timing=True)
    start.record()
    y = slow_chain(x, 30)
    time.sleep(0.3)  # host time between the events: not graph time
    end.record()
    end.synchronize()  # as on CUDA, elapsed_time needs both events complete
    ms = start.elapsed_time(end)
    assert 0 < ms < 300, ms
    # The one graph between the events, timed by the executor's own clock.
    assert torch_disc.metrics.counters()["graphs_run"] == 1
    assert ms == pytest.approx(torch_disc.metrics.counters()["execute_ns"] / 1e6, rel=0.05)
    del y


def test_stream_and_device_synchronize_run_everything(counters):
    x = torch.randn(64, 64).to("disc")
    y = x * 2
    s = torch.disc.current_stream()
    assert not s.query()  # y is traced, not run
    s.synchronize()
    assert s.query()
    z = y + 1
    torch.accelerator.synchronize()
    assert torch.disc.current_stream().query()
    torch.testing.assert_close(z.cpu(), x.cpu() * 2 + 1)


def test_waiting_on_events_and_streams_keeps_program_order():
    x = torch.ones(8).to("disc")
    side = torch.disc.Stream()
    with torch.disc.stream(side):
        y = x * 3
        done = side.record_event()
    torch.disc.current_stream().wait_event(done)
    torch.disc.current_stream().wait_stream(side)
    assert torch.equal((y + 1).cpu(), torch.full((8,), 4.0))


def test_bad_uses_are_clear_errors():
    untimed = torch.disc.Event()
    untimed.record()
    timed = torch.disc.Event(enable_timing=True)
    timed.record()
    timed.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):  # torch's own check
        untimed.elapsed_time(timed)
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(torch.disc.Event(enable_timing=True))
    with pytest.raises(RuntimeError, match="disc:1"):
        torch.Stream(device="disc:1")
    with pytest.raises(RuntimeError, match="interprocess"):
        torch.disc.Event(interprocess=True)
    with pytest.raises(RuntimeError, match="disc:1"):
        torch.disc.current_stream(1)
    with pytest.raises(RuntimeError, match="disc:3"):
        torch.disc.synchronize("disc:3")
    with pytest.raises(RuntimeError, match="does not match"):
        torch.Event(device="disc").record(torch.Stream(device="cpu"))
    with pytest.raises(RuntimeError, match="CPU"):
        torch.disc.set_stream(torch.Stream(device="cpu"))


def test_events_work_with_graphs_on_the_syncing_thread():
    torch_disc.set_async(False)
    try:
        x = torch.randn(128, 128).to("disc")
        start, end = torch.disc.Event(enable_timing=True), torch.disc.Event(enable_timing=True)
        start.record()
        y = slow_chain(x, 5)
        end.record()
        assert end.query()  # the graph ran inside record
        assert start.elapsed_time(end) > 0
        del y
    finally:
        torch_disc.set_async(True)
