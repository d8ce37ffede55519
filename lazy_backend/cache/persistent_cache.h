// The compile cache on disk (~/.cache/torch_disc by default): compiled
// kernels by their MLIR text, and a manifest per compiled graph, so a second
// process running the same script compiles nothing. See docs/env_vars.md
// (DISC_CACHE_DIR, DISC_PERSISTENT_CACHE) and runtime/disk_cache.h for the
// file format and its checks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "lowering/ir/graph.h"
#include "runtime/cpu/mlir_jit.h"

namespace disc {

// False when DISC_PERSISTENT_CACHE=0.
bool persistent_cache_enabled();
// Where entries go, and the version string every entry must carry.
std::string persistent_cache_dir();
std::string persistent_cache_version();

// A kernel compiled by an earlier process from exactly this MLIR text, or
// null. Counts disk_cache.kernel_hits / disk_cache.discarded.
std::shared_ptr<runtime::JitModule> load_kernel(const std::string& mlir);
void store_kernel(const std::string& mlir, const std::string& object);

// Whether an earlier process compiled a graph of this structure, size
// pattern and plan (its manifest checks out); records it if not.
bool graph_known(const ir::Graph& graph, uint64_t plan_signature);
void remember_graph(const ir::Graph& graph, uint64_t plan_signature);

}  // namespace disc
