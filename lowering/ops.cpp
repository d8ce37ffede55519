#include "lowering/ops.h"

#include <vector>

#include "lowering/ir/node.h"

namespace disc::lowering {

namespace {

// ops.def's codegen column: kEmitCpu is generated for the CPU target only.
enum Codegen : uint8_t { kNone, kEmit, kEmitCpu };

// Rows by interned id. Every name of ops.def is interned when the table is
// built, so an id beyond it, or a hole in it, is an op in no row: the
// table is read without a lock on every op an executor runs.
struct Table {
  std::vector<OpInfo> by_id;
  uint32_t data_op = 0;
};

const Table& table() {
  static const Table t = [] {
    Table t;
    t.data_op = ir::data_op();
    auto add = [&](const char* name, OpInfo info) {
      const uint32_t id = ir::intern_op(name);
      if (id >= t.by_id.size()) t.by_id.resize(id + 1);
      t.by_id[id] = info;
    };
#define DISC_OP(id, name, cls, codegen) \
  add(name, OpInfo{Op::id, OpClass::cls, codegen != kNone, codegen == kEmitCpu});
#include "lowering/ops.def"
#undef DISC_OP
    return t;
  }();
  return t;
}

}  // namespace

const OpInfo& op_info(uint32_t op) {
  static const OpInfo data{Op::kOther, OpClass::kData, false}, opaque{};
  const Table& t = table();
  if (op == t.data_op) return data;
  return op < t.by_id.size() ? t.by_id[op] : opaque;
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
