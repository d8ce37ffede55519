// Streams and events on disc (torch.Stream, torch.Event, torch.accelerator's
// stream calls), with the semantics a lazy device can honour.
//
// disc has one execution order: graphs run one after another on the graph
// worker in the order their syncs happened. Every stream is a name for that
// order, so work is never reordered and waiting on another stream or event
// has nothing to do. An event marks a point in it and completes when the
// graph computing what was traced before it has run. An untimed event is
// handed over by the next sync, whatever causes it, so recording one costs
// no graph of its own (FSDP2 records several per layer); querying or
// synchronizing it first syncs if no sync has come yet. A timed event is an
// exact point: recording it ends the current graph (a sync, cause "event").
// Its stamp is the graph clock (launch.h, graph_clock_ns): elapsed time
// between two events is the time graphs ran between them, not the tracing
// or the waits in between.
#pragma once
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace disc::events {

c10::Stream current_stream() noexcept;
c10::Stream exchange_stream(c10::Stream s) noexcept;
c10::Stream new_stream();
c10::Stream default_stream();

// Whether everything traced so far has run.
bool query_device();
// Runs everything traced so far and waits for it (interruptibly); raises
// the failure owed to the calling thread.
void synchronize_device();

void record(void** event, c10::EventFlag flag);
bool query(void* event);
void synchronize(void* event);
double elapsed_ms(void* start, void* end);
void destroy(void* event) noexcept;

}  // namespace disc::events
