// The groups disc backends serve, by number: what a recorded collective
// (a graph node, collective_ops.cpp) names to find its transport when the
// graph runs.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

namespace disc::dist {

struct Group {
  c10::intrusive_ptr<c10d::Backend> transport;  // runs collectives on host tensors
  int rank = 0, size = 1;
  // Collectives this rank has run on the group: the number of the next one,
  // which every rank must agree on (collective_ops.cpp).
  std::atomic<int64_t> ran{0};
};

// Registered for as long as its backend lives; the number is the node's.
int64_t register_group(std::shared_ptr<Group> g);
void unregister_group(int64_t id);
// Raises if the group was destroyed (dist.destroy_process_group) before a
// graph that uses it ran.
std::shared_ptr<Group> find_group(int64_t id);

}  // namespace disc::dist
