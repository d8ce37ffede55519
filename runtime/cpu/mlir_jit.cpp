#include "runtime/cpu/mlir_jit.h"
#include "runtime/cpu/cpu_isa.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <algorithm>
#include <stdexcept>

#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/Support/Host.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/SubtargetFeature.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Conversion/ArithmeticToLLVM/ArithmeticToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Arithmetic/IR/Arithmetic.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/X86Vector/X86VectorToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Operator.h"
#include "llvm/Target/TargetMachine.h"

namespace disc::runtime {

struct JitModule::Impl {
  mlir::MLIRContext context;
  std::unique_ptr<mlir::ExecutionEngine> engine;  // made by compile()
  std::unique_ptr<llvm::orc::LLJIT> linked;       // made by load()
};

namespace {

void init_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

// The lowering to the LLVM dialect, in order: structured control flow
// first, then each dialect; math functions without an LLVM intrinsic
// (tanh...) become libm calls; x86vector ops (exp's vscalefps on AVX-512)
// become their LLVM intrinsics with the vector dialect.
void add_lowering(mlir::PassManager& pm) {
  pm.addPass(mlir::createConvertSCFToCFPass());
  pm.addPass(mlir::createConvertVectorToLLVMPass(mlir::LowerVectorToLLVMOptions().enableX86Vector()));
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::arith::createConvertArithmeticToLLVMPass());
  pm.addPass(mlir::createMemRefToLLVMPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::cf::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
}

std::string error_text(llvm::Error err) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << err;
  return os.str();
}

// The object file the engine compiled, via a private temporary file (the
// engine only writes objects to files).
std::string dump_object(mlir::ExecutionEngine& engine) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = "/tmp/disc_object." + std::to_string(getpid()) + "." +
                          std::to_string(counter++) + ".o";
  engine.dumpToObjectFile(tmp);
  std::ifstream f(tmp, std::ios::binary);
  std::ostringstream bytes;
  bytes << f.rdbuf();
  std::remove(tmp.c_str());
  return bytes.str();
}

std::string first_function(mlir::ModuleOp module) {
  std::string name;
  module.walk([&](mlir::func::FuncOp f) {
    if (name.empty()) name = f.getName().str();
  });
  return name;
}

// exp, log, tanh... as polynomials of arith ops instead of libm calls: the
// loop vectorizer cannot widen a call to expf, but it widens arithmetic.
// (Accuracy: within a few ulp of libm over the whole f32 range.)
mlir::LogicalResult approximate_math(mlir::ModuleOp module) {
  mlir::RewritePatternSet patterns(module.getContext());
  mlir::populateMathPolynomialApproximationPatterns(patterns);
  patterns.add<mlir::math::ErfPolynomialApproximation>(module.getContext());  // GELU
  return mlir::applyPatternsAndFoldGreedily(module, std::move(patterns));
}

// The CPU generated code is for: the host, or, where DISC_CPU_ISA caps the
// ISA, the level of the cap and nothing above it, so no instruction the
// capped CPU lacks can be emitted: x86's psABI level (x86-64-v2 / v3 / v4),
// or AArch64's generic CPU with the cap's extensions.
struct JitTarget {
  std::string cpu;
  std::vector<std::string> features;  // "+avx2", sorted
  int sve_bits = 0;                   // fixed-length code for this SVE vector length
};

#if defined(__x86_64__)
constexpr const char* kGenericCpu = "x86-64";
#else
constexpr const char* kGenericCpu = "generic";
#endif

// AArch64's extensions up to `isa`; those above it are switched off, so a
// host CPU name cannot bring them back.
std::vector<std::string> aarch64_features(CpuIsa isa) {
  auto on = [&](CpuIsa level) { return cpu_isa_at_least(isa, level) ? "+" : "-"; };
  return {on(CpuIsa::kNeon) + std::string("neon"), on(CpuIsa::kSve) + std::string("sve"),
          on(CpuIsa::kSveBf16) + std::string("bf16")};
}

JitTarget jit_target() {
  JitTarget t;
  const CpuIsa isa = cpu_isa();
  if (!cpu_isa_capped()) {
    t.cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> host;
    if (llvm::sys::getHostCPUFeatures(host))
      for (const auto& f : host) t.features.push_back((f.getValue() ? "+" : "-") + f.getKey().str());
  } else {
    switch (isa) {
      case CpuIsa::kGeneric: t.cpu = kGenericCpu; break;
      case CpuIsa::kSse42: t.cpu = "x86-64-v2"; break;
      case CpuIsa::kAvx2: t.cpu = "x86-64-v3"; break;
      case CpuIsa::kAvx512: t.cpu = "x86-64-v4"; break;
      case CpuIsa::kAvx512Bf16:
      case CpuIsa::kAmx: t.cpu = "x86-64-v4", t.features = {"+avx512bf16"}; break;
      case CpuIsa::kNeon:
      case CpuIsa::kSve:
      case CpuIsa::kSveBf16: t.cpu = "generic"; break;
    }
  }
#if defined(__aarch64__)
  // LLVM reads an Arm CPU's features from /proc/cpuinfo, which qemu's user
  // mode does not emulate: the kernel's hardware capabilities (cpu_isa())
  // decide NEON, SVE and BF16 either way.
  for (const std::string& f : aarch64_features(isa)) {
    std::erase_if(t.features, [&](const std::string& g) { return g.substr(1) == f.substr(1); });
    t.features.push_back(f);
  }
  if (cpu_isa_at_least(isa, CpuIsa::kSve)) t.sve_bits = sve_vector_bits();
#endif
  std::sort(t.features.begin(), t.features.end());
  return t;
}

// LLVM 15 crashes lowering the arguments of a function that takes or
// returns fixed-width vectors when SVE holds them (vscale_range > 1): such
// functions (the vector exp) keep NEON registers at their boundary.
bool has_vector_signature(const llvm::Function& f) {
  if (f.getReturnType()->isVectorTy()) return true;
  for (const llvm::Argument& a : f.args())
    if (a.getType()->isVectorTy()) return true;
  return false;
}

// The target's features as LLVM spells them ("+avx2,-avx512f,...").
std::string feature_text(const JitTarget& target) {
  llvm::SubtargetFeatures features;
  for (const std::string& f : target.features) features.AddFeature(f);
  return features.getString();
}

// Every function is compiled for the JIT target: the target machine's CPU
// and features are only defaults, which the engine's own code generator
// takes from the host. With SVE, vscale_range fixes the vector length, so
// LLVM may put the kernels' fixed-width vectors in SVE registers.
void set_target_attributes(llvm::Module* m, const JitTarget& target, const std::string& feature_text) {
  for (llvm::Function& f : *m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", target.cpu);
    f.addFnAttr("target-features", feature_text);
    if (target.sve_bits >= 128 && !has_vector_signature(f)) {
      const unsigned vscale = target.sve_bits / 128;
      f.addFnAttr(llvm::Attribute::getWithVScaleRangeArgs(m->getContext(), vscale, vscale));
    }
  }
}

// LLVM's -O3 for the target CPU (its vector widths for the vectorizer; a
// null target machine would leave the loops scalar). Float ops may be
// reassociated so that sum / max reductions vectorize: a reordered float
// reduction, as torch's own vectorized kernels do.
std::function<llvm::Error(llvm::Module*)> target_optimizer() {
  static const JitTarget target = jit_target();
  static const std::string features = feature_text(target);
  static std::unique_ptr<llvm::TargetMachine> tm = [] {
    auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!builder) return std::unique_ptr<llvm::TargetMachine>();
    builder->setCPU(target.cpu);
    builder->setFeatures(features);
    auto machine = builder->createTargetMachine();
    return machine ? std::move(*machine) : std::unique_ptr<llvm::TargetMachine>();
  }();
  auto optimize = mlir::makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, tm.get());
  return [optimize](llvm::Module* m) {
    set_target_attributes(m, target, features);
    for (llvm::Function& f : *m)
      for (llvm::Instruction& inst : llvm::instructions(f))
        if (llvm::isa<llvm::FPMathOperator>(inst) && !llvm::isa<llvm::CallInst>(inst))
          inst.setHasAllowReassoc(true);
    return optimize(m);
  };
}

}  // namespace

JitModule::JitModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitModule::~JitModule() = default;

// Bump when the lowering or the LLVM options change: cached objects made by
// an older pipeline must not be relinked.
constexpr const char* kPipelineVersion = "jit-3";

std::string host_target() {
  const JitTarget t = jit_target();
  std::string s = std::string(kPipelineVersion) + "/llvm-" LLVM_VERSION_STRING "/" +
                  llvm::sys::getProcessTriple() + "/" + t.cpu;
  for (const std::string& f : t.features)
    if (f[0] == '+') s += "," + f.substr(1);
  if (t.sve_bits) s += ",vl" + std::to_string(t.sve_bits);
  return s;
}

std::unique_ptr<JitModule> JitModule::compile(const std::string& mlir_text, std::string* llvm_ir,
                                              std::string* object) {
  init_llvm_once();
  auto impl = std::make_unique<Impl>();
  mlir::MLIRContext& ctx = impl->context;
  ctx.getOrLoadDialect<mlir::func::FuncDialect>();
  ctx.getOrLoadDialect<mlir::scf::SCFDialect>();
  ctx.getOrLoadDialect<mlir::memref::MemRefDialect>();
  ctx.getOrLoadDialect<mlir::arith::ArithmeticDialect>();
  ctx.getOrLoadDialect<mlir::math::MathDialect>();
  ctx.getOrLoadDialect<mlir::vector::VectorDialect>();
  ctx.getOrLoadDialect<mlir::cf::ControlFlowDialect>();
  ctx.getOrLoadDialect<mlir::x86vector::X86VectorDialect>();
  ctx.getOrLoadDialect<mlir::LLVM::LLVMDialect>();
  mlir::registerLLVMDialectTranslation(ctx);
  mlir::registerX86VectorDialectTranslation(ctx);

  std::string diagnostics;
  llvm::raw_string_ostream diag_os(diagnostics);
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic& d) {
    diag_os << d << "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(mlir_text, &ctx);
  if (!module) throw std::runtime_error("mlir parse failed: " + diag_os.str());
  const std::string entry = first_function(*module);  // before func.func becomes llvm.func
  if (mlir::failed(approximate_math(*module)))
    throw std::runtime_error("mlir math approximation failed: " + diag_os.str());
  mlir::PassManager pm(&ctx);
  add_lowering(pm);
  if (mlir::failed(pm.run(*module))) throw std::runtime_error("mlir lowering failed: " + diag_os.str());

  // options.transformer is a function_ref: the function must outlive create().
  const std::function<llvm::Error(llvm::Module*)> optimize = target_optimizer();
  mlir::ExecutionEngineOptions options;
  options.transformer = optimize;
  options.enableObjectCache = object != nullptr;
  auto engine = mlir::ExecutionEngine::create(*module, options);
  if (!engine) throw std::runtime_error("mlir jit failed: " + error_text(engine.takeError()));
  impl->engine = std::move(*engine);
  if (object) {
    // Code is generated on the first lookup; only then is there an object.
    auto fn = impl->engine->lookupPacked(entry);
    if (!fn) throw std::runtime_error("mlir jit failed: " + error_text(fn.takeError()));
    *object = dump_object(*impl->engine);
  }
  if (llvm_ir) {
    llvm::LLVMContext llvm_ctx;
    auto llvm_module = mlir::translateModuleToLLVMIR(*module, llvm_ctx);
    llvm::raw_string_ostream os(*llvm_ir);
    if (llvm_module) llvm_module->print(os, nullptr);
  }
  return std::unique_ptr<JitModule>(new JitModule(std::move(impl)));
}

std::unique_ptr<JitModule> JitModule::load(const std::string& object) {
  init_llvm_once();
  auto impl = std::make_unique<Impl>();
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) throw std::runtime_error("object load failed: " + error_text(jit.takeError()));
  // libm and the C runtime (expf, tanhf, memcpy...) come from this process.
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!process) throw std::runtime_error("object load failed: " + error_text(process.takeError()));
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  if (llvm::Error err = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object)))
    throw std::runtime_error("object load failed: " + error_text(std::move(err)));
  impl->linked = std::move(*jit);
  return std::unique_ptr<JitModule>(new JitModule(std::move(impl)));
}

PackedFn JitModule::lookup(const std::string& fn) const {
  if (impl_->engine) {
    auto f = impl_->engine->lookupPacked(fn);
    if (!f) throw std::runtime_error("mlir lookup failed: " + error_text(f.takeError()));
    return *f;
  }
  // The engine names the packed wrapper of `fn` "_mlir_<fn>".
  auto addr = impl_->linked->lookup("_mlir_" + fn);
  if (!addr) throw std::runtime_error("object lookup failed: " + error_text(addr.takeError()));
  return addr->toPtr<PackedFn>();
}

void JitModule::invoke_packed(const std::string& fn, std::vector<void*>& args) const {
  lookup(fn)(args.data());
}

}  // namespace disc::runtime
