#include "lazy_backend/compile_cache.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <optional>
#include <set>

#include "lazy_backend/metrics.h"
#include "lowering/pipeline.h"

namespace disc {

namespace {

// Runs the compiler pipeline on a new graph and counts its plan. A failure
// is counted and warned once per pass, never fatal: the graph then runs on
// the reference executor.
std::optional<lowering::CompileResult> plan(const ir::Graph& graph) {
  try {
    lowering::CompileResult r = lowering::compile(graph);
    const lowering::Program& p = r.program;
    for (const lowering::FusionGroup& g : p.groups)
      metrics::bump(std::string("planned.") + lowering::fusion_kind_name(g.kind));
    metrics::bump("planned.library_calls", static_cast<int64_t>(p.library_calls()));
    metrics::bump("planned.unfused_ops", static_cast<int64_t>(p.unfused_ops()));
    for (const lowering::PassTiming& t : r.timings)
      metrics::bump(std::string("pass_ns.") + t.pass, static_cast<int64_t>(t.ms * 1e6));
    return r;
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

Executable& CompileCache::get_or_compile(const ir::Graph& graph, Executor& executor,
                                         bool* hit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(graph.hash);
  if (it != entries_.end()) {
    TORCH_INTERNAL_ASSERT(it->second.num_nodes == graph.nodes.size() &&
                              it->second.num_params == graph.params.size(),
                          "disc: graph hash collision");
    *hit = true;
    return *it->second.executable;
  }
  *hit = false;
  std::optional<lowering::CompileResult> r = plan(graph);
  Entry e{graph.nodes.size(), graph.params.size(),
          executor.compile(graph, r ? &r->program : nullptr)};
  return *entries_.emplace(graph.hash, std::move(e)).first->second.executable;
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

CompileCache& compile_cache() {
  static CompileCache c;
  return c;
}

}  // namespace disc
