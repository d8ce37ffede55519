#include "lazy_backend/trace/attr_ivalue.h"

#include <c10/core/Scalar.h>

#include "lazy_backend/trace/tensor_data.h"

namespace disc {

using Kind = ir::Attr::Kind;

namespace {

c10::TypePtr base_type(const c10::Argument& arg) {
  c10::TypePtr t = arg.real_type();
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType();
  return t;
}

std::optional<ir::Attr> scalar_attr(const c10::IValue& v) {
  if (v.isDouble()) return ir::Attr::of_double(Kind::kScalarDouble, v.toDouble());
  if (v.isInt()) return ir::Attr::of_int(Kind::kScalarInt, v.toInt());
  if (v.isBool()) return ir::Attr::of_int(Kind::kScalarBool, v.toBool());
  if (v.isSymInt()) return ir::Attr::of_int(Kind::kScalarInt, v.toSymInt().expect_int());
  return std::nullopt;  // complex scalars are not recorded
}

bool is_symint(const c10::Argument& arg) {
  c10::TypePtr t = base_type(arg);
  if (auto list = t->cast<c10::ListType>()) t = list->getElementType();
  return t->kind() == c10::TypeKind::SymIntType;
}

std::optional<ir::Attr> to_plain_attr(const c10::IValue& v, const c10::Argument& arg) {
  if (v.isNone()) return ir::Attr::none();
  const c10::TypePtr t = base_type(arg);
  switch (t->kind()) {
    case c10::TypeKind::NumberType:
      return scalar_attr(v);
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return ir::Attr::of_int(Kind::kInt, v.isSymInt() ? v.toSymInt().expect_int() : v.toInt());
    case c10::TypeKind::FloatType:
      return ir::Attr::of_double(Kind::kDouble, v.toDouble());
    case c10::TypeKind::BoolType:
      return ir::Attr::of_int(Kind::kBool, v.toBool());
    case c10::TypeKind::StringType: {
      ir::Attr a;
      a.kind = Kind::kString;
      a.s = v.toStringRef();
      return a;
    }
    case c10::TypeKind::DeviceObjType:
      return ir::Attr::of_int(Kind::kDevice, 0);
    case c10::TypeKind::ScalarTypeType:
      return ir::Attr::of_int(Kind::kDType, static_cast<int64_t>(to_ir(v.toScalarType())));
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
      return ir::Attr::of_int(Kind::kInt, v.toInt());
    case c10::TypeKind::ListType: {
      const c10::TypePtr elem = t->castRaw<c10::ListType>()->getElementType();
      ir::Attr a;
      if (elem->kind() == c10::TypeKind::IntType || elem->kind() == c10::TypeKind::SymIntType) {
        a.kind = Kind::kIntList;
        for (const c10::IValue& e : v.toListRef())
          a.ints.push_back(e.isSymInt() ? e.toSymInt().expect_int() : e.toInt());
        return a;
      }
      if (elem->kind() == c10::TypeKind::FloatType) {
        a.kind = Kind::kDoubleList;
        a.doubles = v.toDoubleVector();
        return a;
      }
      if (elem->kind() == c10::TypeKind::BoolType) {
        a.kind = Kind::kBoolList;
        for (bool b : v.toBoolList()) a.ints.push_back(b);
        return a;
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;  // Generator, Dimname, Storage, ...
  }
}

}  // namespace

bool is_runtime_scalar(const c10::IValue& v, const c10::Argument& arg) {
  return base_type(arg)->kind() == c10::TypeKind::NumberType && v.isDouble();
}

std::optional<ir::Attr> to_attr(const c10::IValue& v, const c10::Argument& arg) {
  std::optional<ir::Attr> a = to_plain_attr(v, arg);
  if (a && (a->kind == Kind::kInt || a->kind == Kind::kIntList)) a->symbolic = is_symint(arg);
  return a;
}

c10::IValue to_ivalue(const ir::Attr& a, c10::Device device) {
  switch (a.kind) {
    case Kind::kNone: return {};
    case Kind::kInt: return a.i;
    case Kind::kDouble: return a.d;
    case Kind::kBool: return static_cast<bool>(a.i);
    case Kind::kString: return a.s;
    case Kind::kIntList: return a.ints;
    case Kind::kDoubleList: return a.doubles;
    case Kind::kBoolList: {
      c10::List<bool> l;
      for (int64_t b : a.ints) l.push_back(b != 0);
      return l;
    }
    case Kind::kScalarInt: return c10::Scalar(a.i);
    case Kind::kScalarDouble: return c10::Scalar(a.d);
    case Kind::kScalarBool: return c10::Scalar(static_cast<bool>(a.i));
    case Kind::kDevice: return device;
    case Kind::kDType: return to_aten(static_cast<ir::DType>(a.i));
  }
  TORCH_CHECK(false, "disc: bad attribute kind");
}

}  // namespace disc
