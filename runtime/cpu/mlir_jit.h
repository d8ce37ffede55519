// JIT-compiles MLIR (func / scf / memref / arith / math) to native code with
// LLVM, for the host CPU. Torch-free.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace disc::runtime {

// The packed-argument convention: args[k] points to the k-th argument after
// memref expansion (allocated, aligned, offset, size, stride for each 1-D
// memref).
using PackedFn = void (*)(void**);

class JitModule {
 public:
  // Parses `mlir_text`, lowers it to the LLVM dialect and JIT-compiles it.
  // With a non-null `llvm_ir`, stores the generated LLVM IR there; with a
  // non-null `object`, the native object file (for load(), in a later
  // process). Throws std::runtime_error with the MLIR diagnostic on failure.
  static std::unique_ptr<JitModule> compile(const std::string& mlir_text,
                                            std::string* llvm_ir = nullptr,
                                            std::string* object = nullptr);
  // Links an object file made by compile() on a machine of the same kind
  // (see host_target()); no LLVM optimization or codegen runs.
  static std::unique_ptr<JitModule> load(const std::string& object);
  ~JitModule();

  // The packed entry point of function `fn`; throws when there is none.
  PackedFn lookup(const std::string& fn) const;
  // lookup(fn)(args.data()).
  void invoke_packed(const std::string& fn, std::vector<void*>& args) const;

 private:
  struct Impl;
  explicit JitModule(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The host CPU and its features, and the LLVM version: what object files
// from compile() depend on besides their MLIR text.
std::string host_target();

// A 1-D strided memref descriptor as MLIR lays it out.
template <typename T>
struct MemRef1D {
  T* allocated;
  T* aligned;
  int64_t offset;
  int64_t size;
  int64_t stride;
  // Appends pointers to the five fields to a packed argument list (any
  // container of void* with push_back).
  template <typename Args>
  void pack(Args& args) {
    args.push_back(&allocated);
    args.push_back(&aligned);
    args.push_back(&offset);
    args.push_back(&size);
    args.push_back(&stride);
  }
};

}  // namespace disc::runtime
