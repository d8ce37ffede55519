#include "lowering/ir/attr.h"

#include <charconv>
#include <cstring>
#include <ostream>
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

bool Attr::is_one() const {
  if (kind == Kind::kScalarInt || kind == Kind::kInt) return i == 1;
  if (kind == Kind::kScalarDouble || kind == Kind::kDouble) return d == 1.0;
  return false;
}

bool Attr::operator==(const Attr& o) const {
  return kind == o.kind && symbolic == o.symbolic && i == o.i && bits(d) == bits(o.d) && s == o.s && ints == o.ints &&
         doubles.size() == o.doubles.size() &&
         std::equal(doubles.begin(), doubles.end(), o.doubles.begin(),
                    [](double a, double b) { return bits(a) == bits(b); });
}

namespace {
// Shortest text that reads back to the same bits, and always reads as a
// double ("1.0", not "1"), so the parser can tell it from an int.
void put_double(std::ostream& os, double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string_view s(buf, static_cast<size_t>(end - buf));
  os << s;
  if (s.find_first_of(".enai") == std::string_view::npos) os << ".0";
}

void put_string(std::ostream& os, const std::string& s) {
  os << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') os << '\\' << c;
    else if (c == '\n') os << "\\n";
    else os << c;
  }
  os << '"';
}
}  // namespace

// The text form is what ir/parse.cpp reads back: every kind prints
// differently (1, 1.0, Scalar(1), [True], bool[]), and a symbolic value is
// wrapped in sym(...) / sym[...], so that a parsed attr hashes alike.
std::string Attr::to_string() const {
  std::ostringstream os;
  if (symbolic) os << (kind == Kind::kIntList ? "sym" : "sym(");
  switch (kind) {
    case Kind::kNone: os << "None"; break;
    case Kind::kInt: os << i; break;
    case Kind::kBool: os << (i ? "True" : "False"); break;
    case Kind::kDouble: put_double(os, d); break;
    case Kind::kScalarInt: os << "Scalar(" << i << ")"; break;
    case Kind::kScalarBool: os << "Scalar(" << (i ? "True" : "False") << ")"; break;
    case Kind::kScalarDouble: os << "Scalar("; put_double(os, d); os << ")"; break;
    case Kind::kString: put_string(os, s); break;
    case Kind::kIntList:
      os << "[";
      for (size_t k = 0; k < ints.size(); ++k) os << (k ? ", " : "") << ints[k];
      os << "]";
      break;
    case Kind::kBoolList:
      os << (ints.empty() ? "bool[" : "[");
      for (size_t k = 0; k < ints.size(); ++k) os << (k ? ", " : "") << (ints[k] ? "True" : "False");
      os << "]";
      break;
    case Kind::kDoubleList:
      os << (doubles.empty() ? "float[" : "[");
      for (size_t k = 0; k < doubles.size(); ++k) {
        if (k) os << ", ";
        put_double(os, doubles[k]);
      }
      os << "]";
      break;
    case Kind::kDevice: os << "device"; break;
    case Kind::kDType: os << dtype_name(static_cast<DType>(i)); break;
  }
  if (symbolic && kind != Kind::kIntList) os << ")";
  return os.str();
}

}  // namespace disc::ir
