// Non-tensor operands of a traced op (ints, floats, lists, strings...).
// Torch-free: lazy_backend converts IValues to and from these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace disc::ir {

struct Attr {
  enum class Kind : uint8_t {
    kNone, kInt, kDouble, kBool, kString, kIntList, kDoubleList, kBoolList,
    kScalarInt, kScalarDouble, kScalarBool,  // c10::Scalar of each type
    kDevice,                                 // the disc device; CPU on replay
    kDType,                                  // i holds an ir::DType
  };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double d = 0.0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  // An int or int list derived from tensor sizes (a SymInt in the op's
  // schema: view sizes, slice bounds, as_strided strides...). The structural
  // hash leaves its values out; they enter the graph's size pattern instead,
  // so a new batch size or sequence length does not change the hash.
  bool symbolic = false;

  static Attr none() { return {}; }
  static Attr of_int(Kind k, int64_t v) { Attr a; a.kind = k; a.i = v; return a; }
  static Attr of_double(Kind k, double v) { Attr a; a.kind = k; a.d = v; return a; }

  uint64_t hash() const;
  bool operator==(const Attr& o) const;
  // An int or double (plain or Scalar) equal to 1: an addmm's alpha / beta,
  // an add's alpha that changes nothing.
  bool is_one() const;
  std::string to_string() const;
};

}  // namespace disc::ir
