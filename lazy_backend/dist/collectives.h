// Collectives on disc tensors: the "disc" c10d backend (torch.distributed).
//
// A collective on disc tensors is not run when it is called: it is recorded
// as a node of the step's graph (disc::all_reduce_, disc::broadcast_,
// disc::all_gather, disc::reduce_scatter), so that DDP's gradient-bucket
// all-reduces run on the graph worker inside the optimizer step's graph
// instead of costing a sync each. The node runs the collective through the
// group's transport, a c10d backend for host tensors (Gloo on CPU; NCCL's
// would take its place on a GPU target), handed in when the group is made.
//
// Every recorded collective also reads the one recorded before it on the
// same group (an ordering input), so that the graphs run them in the order
// the program called them on every rank, and the backend holds the newest
// one, so the next sync runs them all even if nobody reads their results.
// Before its payload, each collective compares what every rank is about to
// run (its number on the group, kind, size, dtype and operator): a rank that
// took another branch gets a clear error on every rank instead of a hang.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace disc::dist {

// A backend serving `transport`'s group for disc tensors (recorded) and for
// CPU tensors (handed straight to the transport).
c10::intrusive_ptr<c10d::Backend> make_backend(c10::intrusive_ptr<c10d::Backend> transport,
                                               int rank, int size);

}  // namespace disc::dist
