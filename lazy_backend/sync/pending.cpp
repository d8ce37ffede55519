#include "lazy_backend/sync/pending.h"

#include "lazy_backend/base/failures.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/sync/compile.h"
#include "lazy_backend/trace/node_builder.h"

namespace disc {

bool discard_work_of_failing_threads() {
  if (!any_thread_failing()) return false;
  size_t discarded = 0;
  for (LazyStorage* s : live_storages()) {
    if (!s->pending()) continue;
    if (std::exception_ptr e = failure_of(s->writer())) {
      s->discard(e);
      ++discarded;
    }
  }
  if (discarded) metrics::bump("failures.discarded_buffers", static_cast<int64_t>(discarded));
  return discarded > 0;
}

Pending collect_pending() {
  Pending p;
  std::vector<LazyStorage*> later;
  for (LazyStorage* s : live_storages()) {
    if (!s->pending()) {
      if (s->value()) p.kept.insert(s->value().node.get());
      continue;
    }
    (type_of(s->value()).numel() == 1 ? p.storages : later).push_back(s);
  }
  p.storages.insert(p.storages.end(), later.begin(), later.end());
  for (LazyStorage* s : p.storages) p.roots.push_back(s->value());
  return p;
}

ir::Graph build_and_hash(const std::vector<ir::Value>& roots,
                         const std::unordered_set<const ir::Node*>& kept) {
  metrics::ScopedTimer t(metrics::counters().hash_ns);
  ir::Graph g = ir::build_graph(roots);
  g.read_only_params.reserve(g.params.size());
  for (uint32_t i : g.params) g.read_only_params.push_back(kept.count(g.nodes[i].node) > 0);
  return g;
}

std::shared_ptr<Executable> lookup_or_compile(const ir::Graph& g) {
  metrics::ScopedTimer t(metrics::counters().compile_ns);
  bool hit = false;
  std::shared_ptr<Executable> exe = executable_for(g, active_executor(), &hit);
  (hit ? metrics::counters().cache_hits : metrics::counters().cache_misses)++;
  return exe;
}

}  // namespace disc
