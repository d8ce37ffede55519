// torch_disc._C: the Python surface of the backend. Thin: each function
// forwards to lazy_backend.
#include <Python.h>
#include <frameobject.h>
#include <torch/extension.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/python_location.h"
#include "lazy_backend/cache/compile_cache.h"
#include "lazy_backend/device/host_cache.h"
#include "lazy_backend/device/rng.h"
#include "lazy_backend/device/target.h"
#include "lazy_backend/dist/collectives.h"
#include "lazy_backend/exec/executor.h"
#include "lazy_backend/exec/cast_cache.h"
#include "lazy_backend/exec/prepack.h"
#include "lazy_backend/frontend/graph_template.h"
#include "lazy_backend/sync/sync.h"
#include "lazy_backend/trace/capture.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lowering/ir/graph.h"
#include "lowering/passes/pipeline.h"
#include "runtime/components.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/onednn_gemm.h"
#include "runtime/options.h"

namespace py = pybind11;

namespace disc {
namespace {

bool internal_file(const char* f) {
  // Frames of torch and of this package are not the user's line.
  return std::strstr(f, "/torch/") || std::strstr(f, "/torch_disc/") ||
         std::strncmp(f, "<frozen", 7) == 0;
}

std::string describe_frame(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);
  std::string where = std::string(PyUnicode_AsUTF8(code->co_filename)) + ":" +
                      std::to_string(PyFrame_GetLineNumber(frame)) + " (" +
                      PyUnicode_AsUTF8(code->co_name) + ")";
  Py_DECREF(code);
  return where;
}

// "file:line (function)" of the innermost user frame (else the innermost
// frame). Called for every op that may fail on its data: only the frame
// returned is formatted.
std::string current_python_location() {
  if (!Py_IsInitialized()) return "";
  py::gil_scoped_acquire gil;
  PyFrameObject* innermost = PyEval_GetFrame();
  for (PyFrameObject* frame = innermost; frame;) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const bool user = !internal_file(PyUnicode_AsUTF8(code->co_filename));
    Py_DECREF(code);
    if (user) {
      std::string where = describe_frame(frame);
      if (frame != innermost) Py_DECREF(frame);
      return where;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // a new reference
    if (frame != innermost) Py_DECREF(frame);
    frame = back;
  }
  return innermost ? describe_frame(innermost) : "";
}

std::string graph_text(const std::vector<at::Tensor>& tensors) {
  TraceLock lock;
  std::vector<ir::Value> roots;
  for (const at::Tensor& t : tensors) roots.push_back(lazy_storage_of(t).read(t));
  return ir::build_graph(roots).to_string();
}

bool is_pending(const at::Tensor& t) {
  TraceLock lock;
  return lazy_storage_of(t).pending();
}

at::Generator& mutable_generator() { return default_disc_generator(); }

// The thread that imported torch_disc: Python runs signal handlers there.
std::thread::id& main_thread() {
  static std::thread::id id;
  return id;
}

// A pending signal's exception (KeyboardInterrupt for Ctrl-C), raised into
// the host waiting on the main thread; torch's bindings hand it back to
// Python. A host waits without the GIL (a read, our sync binding), so the
// check takes it for a moment, under the trace lock when a sync settles:
// no thread waits for that lock holding the GIL (TraceLock).
void raise_pending_signal() {
  if (!Py_IsInitialized() || std::this_thread::get_id() != main_thread()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

void* release_gil_if_held() {
  if (!Py_IsInitialized() || !PyGILState_Check()) return nullptr;
  return PyEval_SaveThread();
}

void restore_gil(void* state) { PyEval_RestoreThread(static_cast<PyThreadState*>(state)); }

// An option's value as Python sees it: bool, int or str.
py::object option_value(const options::Info& o) {
  switch (o.type) {
    case options::Type::kBool: return py::bool_(options::flag(o.id));
    case options::Type::kInt: return py::int_(options::integer(o.id));
    default: return py::str(options::text(o.id));
  }
}

// Changes option `id` by `change` with what a change of it implies: the
// graph worker finishes before DISC_ASYNC changes, graphs compiled under
// other values of the compile options are dropped, packed weights go with
// DISC_PREPACK. Every in-process setter goes through here.
// The values of the options graphs are compiled under.
std::vector<std::string> compile_options() {
  std::vector<std::string> values;
  for (const options::Info& o : options::all())
    if (o.effect == options::Effect::kCompile) values.push_back(options::text(o.id));
  return values;
}

void change_option(options::Id id, const std::function<void()>& change) {
  if (id == options::Id::kAsync) wait_for_worker();
  const std::vector<std::string> before = compile_options();
  change();  // may set more than `id` (set_gemm_merge)
  if (compile_options() != before) clear_compile_cache();
  if (id == options::Id::kPrepack) clear_packed_weights();
  if (id == options::Id::kCastCache) clear_kept_casts();
}

// Sets option `name` in-process (change_option).
void set_option(const std::string& name, const py::object& value) {
  const options::Id id = options::info(name).id;
  const std::string text = py::isinstance<py::bool_>(value) ? (value.cast<bool>() ? "1" : "0")
                                                             : py::str(value).cast<std::string>();
  py::gil_scoped_release no_gil;
  change_option(id, [&] { options::set(id, text); });
}

py::list option_list() {
  py::list out;
  static const char* types[] = {"bool", "int", "choice", "text"};
  static const char* effects[] = {"process", "compile", "run", "test"};
  for (const options::Info& o : options::all()) {
    py::dict d;
    d["name"] = o.name;
    d["type"] = types[static_cast<int>(o.type)];
    d["default"] = o.default_value;
    d["choices"] = o.choices;
    d["effect"] = effects[static_cast<int>(o.effect)];
    d["doc"] = o.doc;
    d["value"] = option_value(o);
    out.append(d);
  }
  return out;
}

// `f` run once the graph worker has finished: what it reports or frees then
// includes the graphs that were still running (their counters, the blocks
// they held).
template <class F>
auto after_worker(F f) {
  return [f] {
    wait_for_worker();
    return f();
  };
}

// Syncs, the graph worker, and what is pending.
void bind_sync(py::module_& m) {
  m.def("sync", [](const std::string& cause) { disc::sync(cause); }, py::arg("cause") = "user",
        py::call_guard<py::gil_scoped_release>());
  m.def("wait", &disc::wait, py::call_guard<py::gil_scoped_release>(),
        "Waits for the graph of the last sync; raises its error");
  m.def("set_async", &set_async_enabled, py::call_guard<py::gil_scoped_release>(),
        "Graphs run on the graph worker (True) or on the syncing thread");
  m.def("is_async", &async_enabled);
  m.def("graph_text", &graph_text, py::call_guard<py::gil_scoped_release>(),
        "IR of the pending graph computing these tensors");
  m.def("is_pending", &is_pending, py::call_guard<py::gil_scoped_release>());
  m.def("python_location", &python_location);
}

// torch.distributed: the "disc" backend over a transport made in Python
// (torch_disc/distributed.py).
void bind_dist(py::module_& m) {
  m.def("dist_backend", &dist::make_backend, py::arg("transport"), py::arg("rank"), py::arg("size"),
        "The disc c10d backend: records collectives on disc tensors, runs them through transport");
}

// Counters and the caches (compiled graphs, host buffers, packed weights).
void bind_caches(py::module_& m) {
  m.def("metrics", after_worker(&metrics::snapshot), py::call_guard<py::gil_scoped_release>());
  m.def("bump", [](const std::string& name, int64_t by) { metrics::bump(name, by); }, py::arg("name"),
        py::arg("by") = 1, "Adds to a named counter (the Python side's own counts)");
  m.def("reset_metrics", after_worker(&metrics::reset), py::call_guard<py::gil_scoped_release>());
  m.def("compile_cache_size", &compile_cache_size);
  m.def("clear_compile_cache", &clear_compile_cache);
  m.def("compile_log", [] {
    py::list out;
    for (const CompileRecord& r : compile_cache().log()) {
      py::dict d;
      d["hash"] = r.hash;
      d["ops"] = r.ops;
      d["ms"] = r.ms;
      d["reason"] = r.reason;
      d["location"] = r.location;
      out.append(d);
    }
    return out;
  });
  m.def("target", [] { return std::string(target_name()); },
        "Where disc values live (DISC_TARGET): \"cpu\" or \"cuda\".");
  m.def("build_components", [] {
    py::dict d;
    d["cpu_codegen"] = runtime::has_cpu_codegen();
    d["onednn"] = runtime::has_onednn();
    d["cpu_isa"] = runtime::cpu_isa_name(runtime::cpu_isa());
    return d;
  }, "The optional back ends this build has (runtime/components.h) and the ISA it uses.");
  m.def("native_cpu_isa", [] { return runtime::cpu_isa_name(runtime::native_cpu_isa()); },
        "The ISA level of this CPU, whatever DISC_CPU_ISA caps (runtime/cpu/cpu_isa.h).");
  m.def("bf16_native", &runtime::onednn_bf16_native,
        "Whether this CPU has bf16 instructions, as oneDNN sees them.");
  m.def("bf16_widened", [] { return runtime::onednn_bf16_widened(at::get_num_threads()); },
        "Whether bf16 GEMMs and convolutions run widened to f32 (DISC_ONEDNN_BF16).");
  m.def("host_cache_stats", after_worker([] {
    const HostCacheStats s = host_cache_stats();
    return std::map<std::string, int64_t>{{"idle_bytes", s.idle_bytes},
                                          {"in_use_bytes", s.in_use_bytes},
                                          {"idle_blocks", s.idle_blocks},
                                          {"idle_cap_bytes", s.idle_cap_bytes}};
  }), py::call_guard<py::gil_scoped_release>());
  m.def("empty_host_cache", after_worker(&empty_host_cache), py::call_guard<py::gil_scoped_release>(),
        "Frees the idle cached host blocks; bytes freed");
  m.def("packed_weights", after_worker(&packed_weights_size), py::call_guard<py::gil_scoped_release>(),
        "How many packed weights are cached");
  m.def("kept_casts", after_worker(&kept_casts_size), py::call_guard<py::gil_scoped_release>(),
        "How many parameter casts are kept across graphs");
  m.def("clear_compile_log", [] { compile_cache().clear_log(); });
}

// Traced graphs rerun without tracing: the compile-once front end
// (torch_disc/frontend/compiled.py).
void bind_templates(py::module_& m) {
  // The leaves of a trace's inputs, held for make_template.
  struct TracedInputs {
    std::vector<ir::Value> leaves;
  };
  py::class_<TracedInputs>(m, "TracedInputs");
  py::class_<GraphTemplate, std::shared_ptr<GraphTemplate>>(m, "GraphTemplate")
      .def_property_readonly("structure_hash", [](const GraphTemplate& t) { return t.graph().structure_hash; })
      .def("dims", [](const GraphTemplate& t) {
        // (node, is_attr, which, pos, value, symbol) per dim; symbol -1: a literal
        const ir::Graph& g = t.graph();
        py::list out;
        size_t k = 0;
        ir::for_each_dim(g, [&](const ir::DimSite& s, int64_t v) {
          const int32_t p = g.pattern[k++];
          out.append(py::make_tuple(s.node, s.is_attr, s.which, s.pos, v,
                                    p >= ir::kFirstSymbol ? p - ir::kFirstSymbol : -1));
        });
        return out;
      }, "Every dim of the graph: (node, is_attr, which, pos, value, symbol or -1)")
      .def("node_of", &GraphTemplate::node_of, py::call_guard<py::gil_scoped_release>(),
           "(node, output) of the graph value a disc tensor holds; node -1 if none")
      .def("with_sources", &GraphTemplate::with_sources,
           "A copy taking per dim the run value at this index (-1: the traced size)")
      .def("run", &GraphTemplate::run, py::call_guard<py::gil_scoped_release>(),
           "Runs the graph with these size values on these CPU inputs")
      .def("traced", &GraphTemplate::traced, py::call_guard<py::gil_scoped_release>(),
           "(structure hash, dims) of the graph traced for these disc outputs")
      .def("mismatch", [](const GraphTemplate& t, const std::vector<at::Tensor>& outputs,
                          const TracedInputs& inputs, const std::vector<int64_t>& values) {
             return t.mismatch(outputs, inputs.leaves, values);
           }, py::call_guard<py::gil_scoped_release>(),
           "What differs between a graph traced at new sizes and this one there; '' if nothing")
      .def("text", [](const GraphTemplate& t) { return t.graph().to_string(); });
  m.def("input_leaves", [](const std::vector<at::Tensor>& inputs) {
    return TracedInputs{GraphTemplate::leaves_of(inputs)};
  }, py::call_guard<py::gil_scoped_release>(), "What disc inputs hold before a trace, for make_template");
  m.def("make_template", [](const std::vector<at::Tensor>& outputs, const TracedInputs& inputs) {
    std::string why_not;
    std::shared_ptr<GraphTemplate> t;
    {
      py::gil_scoped_release release;
      t = GraphTemplate::make(outputs, inputs.leaves, &why_not);
    }
    return py::make_tuple(t, why_not);
  }, "The graph computing disc `outputs` from input_leaves(): (template or None, why not)");
}

// DISC_* options, and the switches tests and benchmarks flip.
void bind_options(py::module_& m) {
  m.def("options", &option_list, "Every DISC_* option: name, type, default, value, doc");
  m.def("get_option", [](const std::string& name) { return option_value(options::info(name)); });
  m.def("set_option", &set_option, "Sets a DISC_* option in-process (see docs/env_vars.md)");
  m.def("reset_option", [](const std::string& name) {
    const options::Id id = options::info(name).id;
    py::gil_scoped_release no_gil;
    change_option(id, [&] { options::reset(id); });
  }, "An option back to its environment value or default, with what that implies");
  m.def("set_executor", [](const std::string& name) {
    change_option(options::Id::kExecutor, [&] { set_active_executor(name); });
  }, "Runs new graphs on 'compiled' or 'reference'; clears the compile cache");
  m.def("set_gemm_merge", [](bool on, bool batched) {
    change_option(options::Id::kGemmMerge, [&] {
      options::set(options::Id::kGemmMerge, on ? "1" : "0");
      options::set(options::Id::kGemmMergeBatched, batched ? "1" : "0");
    });
  }, py::arg("on"), py::arg("batched") = false,
     "GEMM merge on / off (and batched merging of independent GEMMs); clears the compile cache");
  m.def("gemm_merge", [] {
    return py::make_tuple(options::flag(options::Id::kGemmMerge),
                          options::flag(options::Id::kGemmMergeBatched));
  });
  m.def("set_prepack", [](bool on) {
    change_option(options::Id::kPrepack, [&] { set_prepack(on); });
  }, "Pre-packed GEMM weights on / off; drops the packed ones");
}

// The disc generator (torch.disc.manual_seed and friends).
void bind_generator(py::module_& m) {
  m.def("manual_seed", [](uint64_t seed) {
    at::Generator& g = mutable_generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(seed);
  });
  m.def("seed", [] {
    at::Generator& g = mutable_generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.seed();
  });
  m.def("initial_seed", [] { return default_disc_generator().current_seed(); });
  m.def("get_rng_state", [] {
    at::Generator& g = default_disc_generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    return at::Tensor(g.get_state());
  });
  m.def("set_rng_state", [](const at::Tensor& state) {
    at::Generator& g = mutable_generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state.cpu().contiguous());
  });
}

}  // namespace
}  // namespace disc

PYBIND11_MODULE(_C, m) {
  using namespace disc;
  set_python_location_provider(&current_python_location);
  main_thread() = std::this_thread::get_id();
  set_interrupt_check(&raise_pending_signal);
  set_gil_hooks(&release_gil_if_held, &restore_gil);
  register_structured_captures();
  m.doc() = "torch_disc native backend";
  bind_sync(m);
  bind_caches(m);
  bind_templates(m);
  bind_options(m);
  bind_generator(m);
  bind_dist(m);
}
