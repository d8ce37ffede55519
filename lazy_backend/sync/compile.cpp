#include "lazy_backend/sync/compile.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/profiler_range.h"
#include "lazy_backend/cache/compile_cache.h"
#include "lazy_backend/cache/persistent_cache.h"
#include "lowering/ir/hash.h"
#include "lowering/passes/pipeline.h"
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
  for (const lowering::GemmGroup& g : p.gemm_groups)
    metrics::bump(g.kind == lowering::GemmMergeKind::kAttentionBackward ? "planned.attention_backwards"
                                                                       : "gemm_merge.groups");
  metrics::bump("planned.unfused_ops", static_cast<int64_t>(p.unfused_ops()));
  metrics::bump("codegen.declined", static_cast<int64_t>(p.plan.declined.size()));
  if (options::flag(options::Id::kDebugCompile))
    for (const lowering::DeclinedGroup& d : p.plan.declined)
      std::fprintf(stderr, "disc: group %u (%s) runs op by op: %s\n", d.group,
                   lowering::fusion_kind_name(p.groups[d.group].kind), d.why.c_str());
  for (const lowering::PassTiming& t : r.timings)
    metrics::bump(std::string("pass_ns.") + t.pass, static_cast<int64_t>(t.ms * 1e6));
}

// Runs `stage` of the compiler on a new graph. A failure is counted and
// warned once per pass, never fatal: the graph then runs on the reference
// executor.
template <class Stage>
bool compiled_without_error(Stage stage) {
  try {
    stage();
    return true;
  } catch (const lowering::CompileError& e) {
    metrics::bump("compile_failures");
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(std::string(e.what()).substr(0, std::string(e.what()).find(':'))).second)
      TORCH_WARN("disc: compiler pipeline failed, graph runs on the reference executor: ", e.what());
    return false;
  }
}

// The plan of a new graph (every pass before codegen), or nullopt.
std::optional<lowering::CompileResult> plan(const ir::Graph& graph) {
  std::optional<lowering::CompileResult> r;
  if (!compiled_without_error([&] {
        if (fault_injected("pipeline"))
          throw lowering::CompileError("fault-injection", 0, "none", "DISC_INJECT_FAULT=pipeline");
        r = lowering::plan(graph);
      }))
    return std::nullopt;
  return r;
}

std::mutex& compile_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::shared_ptr<Executable> executable_for(const ir::Graph& graph, Executor& executor, bool* hit) {
  CompileCache& cache = compile_cache();
  std::lock_guard<std::mutex> lock(compile_mutex());
  *hit = true;
  if (std::shared_ptr<Executable> cached = cache.find(graph)) return cached;
  ProfilerRange range([&] { return "disc::compile " + ir::hash_hex(graph.hash); });
  const auto start = std::chrono::steady_clock::now();
  std::optional<lowering::CompileResult> r = plan(graph);
  uint64_t signature = r ? r->program.signature() : 0;
  if (std::shared_ptr<Executable> same = cache.find_same_plan(graph, signature)) {
    metrics::bump("cache_revalidated");
    cache.insert(graph, signature, same, /*new_executable=*/false);
    return same;
  }
  // A plan no cached executable has: its kernels' code is written now.
  if (r && !compiled_without_error([&] { lowering::write_code(*r, graph); })) {
    r.reset();
    signature = 0;
  }
  const lowering::Program* program = r ? &r->program : nullptr;
  // Compiled by an earlier process: its kernels come from disk.
  *hit = graph_known(graph, signature);
  if (*hit) {
    std::shared_ptr<Executable> exe = executor.compile(graph, program);
    cache.insert(graph, signature, exe, /*new_executable=*/true);
    return exe;
  }
  if (r) count_plan(*r);
  CompileRecord record;
  record.hash = graph.hash;
  record.ops = graph.num_ops();
  record.reason = cache.explain_miss(graph);
  std::shared_ptr<Executable> exe = executor.compile(graph, program);
  record.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  cache.log_compile(std::move(record));
  remember_graph(graph, signature);
  cache.insert(graph, signature, exe, /*new_executable=*/true);
  return exe;
}

}  // namespace disc
