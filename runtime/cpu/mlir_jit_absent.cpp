// A build without MLIR 15 (DISC_CPU_CODEGEN=OFF, or not found): no CPU
// kernel can be made. The compiled executor checks has_cpu_codegen() first;
// these throw for any caller that did not.
#include <stdexcept>

#include "runtime/cpu/mlir_jit.h"

namespace disc::runtime {

namespace {

[[noreturn]] void absent() {
  throw std::runtime_error(
      "disc: this build has no CPU code generator (MLIR 15 was not found when it was built)");
}

}  // namespace

struct JitModule::Impl {};

JitModule::JitModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitModule::~JitModule() = default;

std::unique_ptr<JitModule> JitModule::compile(const std::string&, std::string*, std::string*) { absent(); }
std::unique_ptr<JitModule> JitModule::load(const std::string&) { absent(); }
PackedFn JitModule::lookup(const std::string&) const { absent(); }
void JitModule::invoke_packed(const std::string&, std::vector<void*>&) const { absent(); }

// Names the persistent cache's directory: no native code is stored.
std::string host_target() { return "no-cpu-codegen"; }

}  // namespace disc::runtime
