#include "lowering/ops.h"

#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lowering/ir/node.h"

namespace disc::lowering {

namespace {

enum Codegen : bool { kNone = false, kEmit = true };

const std::unordered_map<std::string, OpInfo>& rows() {
  static const auto* table = [] {
    auto* m = new std::unordered_map<std::string, OpInfo>();
#define DISC_OP(id, name, cls, codegen) (*m)[name] = OpInfo{Op::id, OpClass::cls, codegen};
#include "lowering/ops.def"
#undef DISC_OP
    return m;
  }();
  return *table;
}

}  // namespace

const OpInfo& op_info(uint32_t op) {
  // Interned ids are dense and few: rows by id, filled on first sight. A
  // deque keeps the references handed out valid as it grows.
  static std::mutex mu;
  static std::deque<OpInfo> by_id;
  static std::deque<bool> known;
  static const OpInfo data{Op::kOther, OpClass::kData, false}, opaque{};
  std::lock_guard<std::mutex> lock(mu);
  if (op >= by_id.size()) {
    by_id.resize(op + 1);
    known.resize(op + 1, false);
  }
  if (!known[op]) {
    if (op == ir::data_op()) {
      by_id[op] = data;
    } else {
      auto it = rows().find(ir::op_name(op));
      by_id[op] = it == rows().end() ? opaque : it->second;
    }
    known[op] = true;
  }
  return by_id[op];
}

std::string_view op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kData: return "data";
    case OpClass::kElementwise: return "elementwise";
    case OpClass::kBroadcast: return "broadcast";
    case OpClass::kReduction: return "reduction";
    case OpClass::kStitch: return "stitch";
    case OpClass::kLibrary: return "library";
    case OpClass::kLayout: return "layout";
    case OpClass::kOpaque: return "opaque";
  }
  return "?";
}

}  // namespace disc::lowering
