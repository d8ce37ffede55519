// JIT-compiles MLIR (func / scf / memref / arith / math) to native code with
// LLVM, for the host CPU. Torch-free.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace disc::runtime {

class JitModule {
 public:
  // Parses `mlir_text`, lowers it to the LLVM dialect and JIT-compiles it.
  // With a non-null `llvm_ir`, stores the generated LLVM IR there.
  // Throws std::runtime_error with the MLIR diagnostic on failure.
  static std::unique_ptr<JitModule> compile(const std::string& mlir_text,
                                            std::string* llvm_ir = nullptr);
  ~JitModule();

  // Calls `fn` with the packed-argument convention: args[k] points to the
  // k-th argument after memref expansion (allocated, aligned, offset, size,
  // stride for each 1-D memref).
  void invoke_packed(const std::string& fn, std::vector<void*>& args) const;

 private:
  struct Impl;
  explicit JitModule(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A 1-D strided memref descriptor as MLIR lays it out.
template <typename T>
struct MemRef1D {
  T* allocated;
  T* aligned;
  int64_t offset;
  int64_t size;
  int64_t stride;
  // Appends pointers to the five fields to a packed argument list.
  void pack(std::vector<void*>& args) {
    args.push_back(&allocated);
    args.push_back(&aligned);
    args.push_back(&offset);
    args.push_back(&size);
    args.push_back(&stride);
  }
};

}  // namespace disc::runtime
