#include "lowering/ir/attr.h"

#include <cstring>
#include <sstream>

#include "lowering/ir/dtype.h"
#include "lowering/ir/hash.h"

namespace disc::ir {

namespace {
uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}
}  // namespace

uint64_t Attr::hash() const {
  uint64_t h = hash_mix(static_cast<uint64_t>(kind) + (symbolic ? 0x100 : 0),
                        symbolic ? 0 : static_cast<uint64_t>(i));
  h = hash_mix(h, bits(d));
  if (!s.empty()) h = hash_mix(h, hash_string(s));
  h = hash_mix(h, ints.size());
  if (!symbolic)
    for (int64_t v : ints) h = hash_mix(h, static_cast<uint64_t>(v));
  h = hash_mix(h, doubles.size());
  for (double v : doubles) h = hash_mix(h, bits(v));
  return h;
}

bool Attr::operator==(const Attr& o) const {
  return kind == o.kind && symbolic == o.symbolic && i == o.i && bits(d) == bits(o.d) && s == o.s && ints == o.ints &&
         doubles.size() == o.doubles.size() &&
         std::equal(doubles.begin(), doubles.end(), o.doubles.begin(),
                    [](double a, double b) { return bits(a) == bits(b); });
}

std::string Attr::to_string() const {
  std::ostringstream os;
  auto list = [&os](const auto& v) {
    os << "[";
    for (size_t k = 0; k < v.size(); ++k) os << (k ? ", " : "") << v[k];
    os << "]";
  };
  switch (kind) {
    case Kind::kNone: os << "None"; break;
    case Kind::kInt: case Kind::kScalarInt: os << i; break;
    case Kind::kBool: case Kind::kScalarBool: os << (i ? "True" : "False"); break;
    case Kind::kDouble: case Kind::kScalarDouble: os << d; break;
    case Kind::kString: os << '"' << s << '"'; break;
    case Kind::kIntList: case Kind::kBoolList: list(ints); break;
    case Kind::kDoubleList: list(doubles); break;
    case Kind::kDevice: os << "device"; break;
    case Kind::kDType: os << dtype_name(static_cast<DType>(i)); break;
  }
  return os.str();
}

}  // namespace disc::ir
