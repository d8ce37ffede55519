#include "lazy_backend/trace/aten_ops.h"

#include <unordered_map>
#include <utility>

namespace disc::aten_ops {

namespace {

struct Facts {
  bool sizes_from_inputs = false;
  bool whole = false;
  const char* host_only = nullptr;
};

enum class Scalars { kData, kSizes, kForm };

struct Family {
  const char* prefix;
  bool sizes_from_inputs;
  Scalars scalars;
};

// The table's columns as values; the shape columns are shape_rules.cpp's.
constexpr bool PATTERN = true, EXACT = false;
constexpr bool WHOLE = true, OP = false;
constexpr Scalars SCALARS_ARE_DATA = Scalars::kData, SCALARS_ARE_SIZES = Scalars::kSizes,
                  SCALARS_ARE_FORM = Scalars::kForm;
constexpr const char* DEVICE = nullptr;
constexpr const char* HOST(const char* why) { return why; }

const std::unordered_map<std::string, Facts>& table() {
  static const auto* rows = [] {
    auto* m = new std::unordered_map<std::string, Facts>;
#define ATEN_OP(name, sizes, shapes, capture, host) m->emplace(name, Facts{sizes, capture, host});
#include "lazy_backend/trace/aten_ops.def"
    return m;
  }();
  return *rows;
}

const std::vector<Family>& families() {
  static const std::vector<Family> rows = {
#define ATEN_OP_FAMILY(prefix, sizes, scalars) {prefix, sizes, scalars},
#include "lazy_backend/trace/aten_ops.def"
  };
  return rows;
}

const Family* family_of(const std::string& name) {
  for (const Family& f : families())
    if (name.rfind(f.prefix, 0) == 0) return &f;
  return nullptr;
}

const Facts* facts_of(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : &it->second;
}

}  // namespace

bool sizes_from_inputs(const std::string& schema_name) {
  if (const Family* f = family_of(schema_name)) return f->sizes_from_inputs;
  const Facts* f = facts_of(schema_name);
  return f && f->sizes_from_inputs;
}

bool scalars_are_sizes(const std::string& schema_name) {
  const Family* f = family_of(schema_name);
  return f && f->scalars == Scalars::kSizes;
}

bool scalars_are_form(const std::string& schema_name) {
  const Family* f = family_of(schema_name);
  return f && f->scalars == Scalars::kForm;
}

const char* host_only(const std::string& schema_name) {
  const Facts* f = facts_of(schema_name);
  return f ? f->host_only : nullptr;
}

std::vector<std::string> recorded_whole() {
  std::vector<std::string> names;
  for (const auto& [name, facts] : table())
    if (facts.whole) names.push_back(name.substr(name.find("::") + 2));
  return names;
}

}  // namespace disc::aten_ops
