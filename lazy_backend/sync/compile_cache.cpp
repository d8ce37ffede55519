#include "lazy_backend/sync/compile_cache.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>

#include "lazy_backend/exec/profiler_range.h"
#include "lazy_backend/metrics.h"
#include "lazy_backend/sync/persistent_cache.h"
#include "lowering/ir/hash.h"
#include "lowering/pipeline.h"
#include "runtime/options.h"

namespace disc {

namespace {

// Counts a compiled graph's plan and the time of each pass.
void count_plan(const lowering::CompileResult& r) {
  const lowering::Program& p = r.program;
  for (const lowering::FusionGroup& g : p.groups)
    metrics::bump(std::string("planned.") + lowering::fusion_kind_name(g.kind));
  metrics::bump("planned.library_calls", static_cast<int64_t>(p.library_calls()));
  metrics::bump("planned.epilogues", static_cast<int64_t>(p.epilogues()));
  metrics::bump("gemm_merge.groups", static_cast<int64_t>(p.gemm_groups.size()));
  metrics::bump("planned.unfused_ops", static_cast<int64_t>(p.unfused_ops()));
  metrics::bump("codegen.declined", static_cast<int64_t>(p.plan.declined.size()));
  if (options::flag(options::Id::kDebugCompile))
    for (const lowering::DeclinedGroup& d : p.plan.declined)
      std::fprintf(stderr, "disc: group %u (%s) runs op by op: %s\n", d.group,
                   lowering::fusion_kind_name(p.groups[d.group].kind), d.why.c_str());
  for (const lowering::PassTiming& t : r.timings)
    metrics::bump(std::string("pass_ns.") + t.pass, static_cast<int64_t>(t.ms * 1e6));
}

// Runs the compiler pipeline on a new graph. A failure is counted and
// warned once per pass, never fatal: the graph then runs on the reference
// executor.
std::optional<lowering::CompileResult> plan(const ir::Graph& graph) {
  try {
    if (fault_injected("pipeline"))
      throw lowering::CompileError("fault-injection", 0, "none", "DISC_INJECT_FAULT=pipeline");
    return lowering::compile(graph);
  } catch (const lowering::CompileError& e) {
    metrics::bump("compile_failures");
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(std::string(e.what()).substr(0, std::string(e.what()).find(':'))).second)
      TORCH_WARN("disc: compiler pipeline failed, graph runs on the reference executor: ", e.what());
    return std::nullopt;
  }
}

}  // namespace

std::shared_ptr<Executable> CompileCache::get_or_compile(const ir::Graph& graph,
                                                         Executor& executor, bool* hit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry>& bucket = entries_[graph.hash];
  for (Entry& e : bucket) {
    if (e.key.matches(graph)) {
      *hit = true;
      return e.executable;
    }
  }
  ProfilerRange range([&] { return "disc::compile " + ir::hash_hex(graph.hash); });
  const auto start = std::chrono::steady_clock::now();
  std::optional<lowering::CompileResult> r = plan(graph);
  const uint64_t signature = r ? r->program.signature() : 0;
  if (const Entry* same = same_plan(graph, signature)) {
    metrics::bump("cache_revalidated");
    *hit = true;
    bucket.push_back({GraphKey::of(graph), signature, same->executable});
    return bucket.back().executable;
  }
  // Compiled by an earlier process: its kernels come from disk.
  *hit = graph_known(graph, signature);
  if (*hit) {
    bucket.push_back({GraphKey::of(graph), signature,
                      executor.compile(graph, r ? &r->program : nullptr)});
    ++size_;
    return bucket.back().executable;
  }
  if (r) count_plan(*r);
  CompileRecord record;
  record.hash = graph.hash;
  record.ops = graph.num_ops();
  {
    std::vector<const GraphKey*> cached;
    for (const auto& [h, b] : entries_)
      for (const Entry& e : b) cached.push_back(&e.key);
    record.reason = explain_miss(graph, cached);
  }
  Entry e{GraphKey::of(graph), signature, executor.compile(graph, r ? &r->program : nullptr)};
  record.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log_.push_back(std::move(record));
  remember_graph(graph, signature);
  ++size_;
  bucket.push_back(std::move(e));
  return bucket.back().executable;
}

const CompileCache::Entry* CompileCache::same_plan(const ir::Graph& graph,
                                                   uint64_t signature) const {
  for (const auto& [h, bucket] : entries_)
    for (const Entry& e : bucket)
      if (e.key.structure_hash == graph.structure_hash && e.plan_signature == signature &&
          e.key.node_hashes.size() == graph.nodes.size())
        return &e;
  return nullptr;
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  size_ = 0;
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

std::vector<CompileRecord> CompileCache::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void CompileCache::clear_log() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
}

CompileRecord CompileCache::locate_last(const std::string& location) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_.empty()) return {};
  log_.back().location = location;
  return log_.back();
}

CompileCache& compile_cache() {
  static CompileCache c;
  return c;
}

}  // namespace disc
