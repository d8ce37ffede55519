#include "runtime/mlir_jit.h"

#include <mutex>
#include <stdexcept>

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
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
#include "mlir/Dialect/Arithmetic/IR/Arithmetic.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

namespace disc::runtime {

struct JitModule::Impl {
  mlir::MLIRContext context;
  std::unique_ptr<mlir::ExecutionEngine> engine;
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
// (tanh...) become libm calls.
void add_lowering(mlir::PassManager& pm) {
  pm.addPass(mlir::createConvertSCFToCFPass());
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::arith::createConvertArithmeticToLLVMPass());
  pm.addPass(mlir::createMemRefToLLVMPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::cf::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
}

}  // namespace

JitModule::JitModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitModule::~JitModule() = default;

std::unique_ptr<JitModule> JitModule::compile(const std::string& mlir_text, std::string* llvm_ir) {
  init_llvm_once();
  auto impl = std::make_unique<Impl>();
  mlir::MLIRContext& ctx = impl->context;
  ctx.getOrLoadDialect<mlir::func::FuncDialect>();
  ctx.getOrLoadDialect<mlir::scf::SCFDialect>();
  ctx.getOrLoadDialect<mlir::memref::MemRefDialect>();
  ctx.getOrLoadDialect<mlir::arith::ArithmeticDialect>();
  ctx.getOrLoadDialect<mlir::math::MathDialect>();
  ctx.getOrLoadDialect<mlir::cf::ControlFlowDialect>();
  ctx.getOrLoadDialect<mlir::LLVM::LLVMDialect>();
  mlir::registerLLVMDialectTranslation(ctx);

  std::string diagnostics;
  llvm::raw_string_ostream diag_os(diagnostics);
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic& d) {
    diag_os << d << "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(mlir_text, &ctx);
  if (!module) throw std::runtime_error("mlir parse failed: " + diag_os.str());
  mlir::PassManager pm(&ctx);
  add_lowering(pm);
  if (mlir::failed(pm.run(*module))) throw std::runtime_error("mlir lowering failed: " + diag_os.str());

  auto optimize = mlir::makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, nullptr);
  mlir::ExecutionEngineOptions options;
  options.transformer = optimize;
  auto engine = mlir::ExecutionEngine::create(*module, options);
  if (!engine) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    os << engine.takeError();
    throw std::runtime_error("mlir jit failed: " + os.str());
  }
  impl->engine = std::move(*engine);
  if (llvm_ir) {
    llvm::LLVMContext llvm_ctx;
    auto llvm_module = mlir::translateModuleToLLVMIR(*module, llvm_ctx);
    llvm::raw_string_ostream os(*llvm_ir);
    if (llvm_module) llvm_module->print(os, nullptr);
  }
  return std::unique_ptr<JitModule>(new JitModule(std::move(impl)));
}

void JitModule::invoke_packed(const std::string& fn, std::vector<void*>& args) const {
  llvm::Error err = impl_->engine->invokePacked(fn, args);
  if (err) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    os << err;
    throw std::runtime_error("mlir invoke failed: " + os.str());
  }
}

}  // namespace disc::runtime
