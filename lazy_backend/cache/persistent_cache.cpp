#include "lazy_backend/cache/persistent_cache.h"

#include <torch/headeronly/version.h>

#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "lazy_backend/base/metrics.h"
#include "lowering/ir/hash.h"
#include "runtime/disk_cache.h"
#include "runtime/options.h"

namespace disc {

namespace {

// Bump when the meaning of an entry changes (manifest layout, codegen ABI).
constexpr const char* kFormat = "torch_disc-cache-1";

const runtime::DiskCache* disk() {
  static const std::unique_ptr<runtime::DiskCache> cache =
      persistent_cache_enabled()
          ? std::make_unique<runtime::DiskCache>(persistent_cache_dir(), persistent_cache_version())
          : nullptr;
  return cache.get();
}

void count(runtime::DiskCache::Status s, const char* hit) {
  if (s == runtime::DiskCache::Status::kHit) metrics::bump(hit);
  if (s == runtime::DiskCache::Status::kDiscarded) metrics::bump("disk_cache.discarded");
}

// Length-prefixed fields, so one entry can never be read as another.
void put(std::string& out, const void* p, size_t n) {
  uint64_t len = n;
  out.append(reinterpret_cast<const char*>(&len), sizeof(len));
  out.append(static_cast<const char*>(p), n);
}

std::string manifest(const ir::Graph& g, uint64_t signature) {
  std::string m;
  put(m, &g.structure_hash, sizeof(g.structure_hash));
  put(m, &signature, sizeof(signature));
  put(m, g.pattern.data(), g.pattern.size() * sizeof(int32_t));
  std::vector<uint64_t> nodes;
  nodes.reserve(g.nodes.size());
  for (const ir::GraphNode& gn : g.nodes) nodes.push_back(gn.node->local_hash);
  put(m, nodes.data(), nodes.size() * sizeof(uint64_t));
  return m;
}

}  // namespace

bool persistent_cache_enabled() { return options::flag(options::Id::kPersistentCache); }

std::string persistent_cache_dir() {
  if (std::string d = options::text(options::Id::kCacheDir); !d.empty()) return d;
  return options::user_cache_dir() + "/torch_disc";
}

std::string persistent_cache_version() {
  return std::string(kFormat) + "/torch-" + TORCH_VERSION + "/" + runtime::host_target();
}

std::shared_ptr<runtime::JitModule> load_kernel(const std::string& mlir) {
  const runtime::DiskCache* d = disk();
  if (!d) return nullptr;
  const std::string key = "k-" + ir::hash_hex(ir::hash_string(mlir)) + ".o";
  runtime::DiskCache::Status status;
  std::optional<std::string> entry = d->load(key, &status);
  // The entry starts with the full MLIR text: a hash collision is a miss.
  if (entry && (entry->size() < mlir.size() || entry->compare(0, mlir.size(), mlir) != 0))
    entry.reset(), status = runtime::DiskCache::Status::kMissing;
  count(status, "disk_cache.kernel_hits");
  if (!entry) return nullptr;
  try {
    return runtime::JitModule::load(entry->substr(mlir.size()));
  } catch (const std::exception&) {
    metrics::bump("disk_cache.discarded");  // checks out but does not link
    return nullptr;
  }
}

void store_kernel(const std::string& mlir, const std::string& object) {
  const runtime::DiskCache* d = disk();
  if (!d || object.empty()) return;
  if (d->store("k-" + ir::hash_hex(ir::hash_string(mlir)) + ".o", mlir + object))
    metrics::bump("disk_cache.stores");
}

bool graph_known(const ir::Graph& graph, uint64_t plan_signature) {
  const runtime::DiskCache* d = disk();
  if (!d) return false;
  runtime::DiskCache::Status status;
  std::optional<std::string> m = d->load("g-" + ir::hash_hex(graph.hash), &status);
  const bool known = m && *m == manifest(graph, plan_signature);
  // Another graph's manifest under this hash (a collision) is a miss.
  if (m && !known) status = runtime::DiskCache::Status::kMissing;
  count(status, "disk_cache.graph_hits");
  return known;
}

void remember_graph(const ir::Graph& graph, uint64_t plan_signature) {
  const runtime::DiskCache* d = disk();
  if (d && d->store("g-" + ir::hash_hex(graph.hash), manifest(graph, plan_signature)))
    metrics::bump("disk_cache.stores");
}

}  // namespace disc
