// float16 in generated kernels, as bfloat16.cpp does bf16: an f16 element
// lives in memory as its 16 bits (i16) and is converted with integer ops,
// because LLVM 15 lowers f16 conversions to F16C instructions or to libgcc
// calls, and the JIT may have neither. Values are computed in f32 and
// rounded as ATen's c10::Half rounds (to nearest, ties to even, through
// f16's subnormals; inf past 65504; a NaN stays a NaN) after every op whose
// traced output is f16.
#include "lowering/codegen/cpu/value_emitter.h"

namespace disc::lowering {

namespace {

constexpr int64_t kAbsBits = 0x7FFFFFFF;
constexpr int64_t kF32Inf = 0x7F800000;
constexpr int64_t kF16Inf = 0x7C00, kF16Nan = 0x7E00;
// f32 bits of 2^-14 (f16's smallest normal), of 65520 (the least f32 that
// rounds to f16's inf) and of 2^-24 (f16's smallest subnormal).
constexpr int64_t kMinNormal = 0x38800000, kOverflow = 0x477FF000, kSubnormalUnit = 0x33800000;
constexpr int64_t kRebias = (127 - 15) << 23;  // f32's exponent bias less f16's, in place

}  // namespace

std::string ValueEmitter::int_op(const char* op, const std::string& a, const std::string& b) {
  std::string r = fresh();
  line(r + " = " + op + " " + a + ", " + b + " : " + vec("i32"));
  return r;
}

std::string ValueEmitter::int_select(const char* pred, const std::string& a, const std::string& b,
                                     const std::string& then, const std::string& otherwise) {
  std::string c = fresh(), r = fresh();
  const std::string i32 = vec("i32");
  line(c + " = arith.cmpi " + pred + ", " + a + ", " + b + " : " + i32);
  line(r + " = arith.select " + c + ", " + then + ", " + otherwise + " : " + vec("i1") + ", " +
       i32);
  return r;
}

// The f16 bits of f32 `value`, in the low half of an i32.
std::string ValueEmitter::f16_rounded_bits(const std::string& value) {
  auto k = [&](int64_t v) { return int_constant(v, "i32"); };
  std::string bits = fresh();
  line(bits + " = arith.bitcast " + value + " : " + type_ + " to " + vec("i32"));
  const std::string a = int_op("arith.andi", bits, k(kAbsBits));
  const std::string sign = int_op("arith.shrui", int_op("arith.xori", bits, a), k(16));
  // Normal: rebias the exponent and drop 13 mantissa bits, rounding to
  // nearest even; a carry out of the mantissa raises the exponent (to inf
  // past 65504).
  const std::string odd = int_op("arith.andi", int_op("arith.shrui", a, k(13)), k(1));
  const std::string biased =
      int_op("arith.addi", int_op("arith.subi", a, k(kRebias)), int_op("arith.addi", odd, k(0xFFF)));
  const std::string normal = int_op("arith.shrui", biased, k(13));
  // Subnormal: the mantissa with its leading 1, shifted right so that one
  // unit is 2^-24, rounded to nearest even. The shift is clamped to 14..31,
  // where LLVM defines it: below 14 the value is normal, past 31 it rounds
  // to 0 either way.
  const std::string exponent = int_op("arith.shrui", a, k(23));
  const std::string mantissa =
      int_op("arith.ori", int_op("arith.andi", a, k(0x7FFFFF)), k(0x800000));
  const std::string exact = int_op("arith.subi", k(126), exponent);  // signed
  const std::string shift = int_select("sgt", exact, k(31), k(31),
                                       int_select("slt", exact, k(14), k(14), exact));
  const std::string kept = int_op("arith.shrui", mantissa, shift);
  const std::string half = int_op("arith.shli", k(1), int_op("arith.subi", shift, k(1)));
  const std::string rest = int_op("arith.andi", mantissa,
                                  int_op("arith.subi", int_op("arith.shli", k(1), shift), k(1)));
  // Round up past half, or at half when the kept bits are odd.
  const std::string up = int_select(
      "ugt", rest, half, k(1),
      int_select("eq", rest, half, int_op("arith.andi", kept, k(1)), k(0)));
  const std::string subnormal = int_op("arith.addi", kept, up);
  std::string r = int_select("ult", a, k(kMinNormal), subnormal, normal);
  r = int_select("uge", a, k(kOverflow), k(kF16Inf), r);
  r = int_select("ugt", a, k(kF32Inf), k(kF16Nan), r);
  return int_op("arith.ori", r, sign);
}

std::string ValueEmitter::f32_to_f16_bits(const std::string& value) {
  std::string bits = fresh();
  line(bits + " = arith.trunci " + f16_rounded_bits(value) + " : " + vec("i32") + " to " +
       vec("i16"));
  return bits;
}

std::string ValueEmitter::f16_to_f32(const std::string& bits) {
  auto k = [&](int64_t v) { return int_constant(v, "i32"); };
  std::string wide = fresh();
  line(wide + " = arith.extui " + bits + " : " + vec("i16") + " to " + vec("i32"));
  const std::string sign = int_op("arith.shli", int_op("arith.andi", wide, k(0x8000)), k(16));
  const std::string shifted = int_op("arith.shli", int_op("arith.andi", wide, k(0x7FFF)), k(13));
  const std::string normal = int_op("arith.addi", shifted, k(kRebias));
  const std::string inf_or_nan = int_op("arith.ori", shifted, k(kF32Inf));
  // A subnormal is its mantissa times 2^-24: exact in f32, and normal there.
  std::string units = fresh(), scaled = fresh(), unit = fresh(), sub_bits = fresh();
  line(units + " = arith.uitofp " + int_op("arith.andi", wide, k(0x3FF)) + " : " + vec("i32") +
       " to " + type_);
  line(unit + " = arith.bitcast " + k(kSubnormalUnit) + " : " + vec("i32") + " to " + type_);
  line(scaled + " = arith.mulf " + units + ", " + unit + " : " + type_);
  line(sub_bits + " = arith.bitcast " + scaled + " : " + type_ + " to " + vec("i32"));
  std::string r = int_select("ult", shifted, k(0x00800000), sub_bits, normal);
  r = int_select("uge", shifted, k(0x0F800000), inf_or_nan, r);
  std::string f = fresh();
  line(f + " = arith.bitcast " + int_op("arith.ori", r, sign) + " : " + vec("i32") + " to " +
       type_);
  return f;
}

std::string ValueEmitter::round_to_f16(const std::string& value) {
  return f16_to_f32(f32_to_f16_bits(value));
}

std::string ValueEmitter::round_to(ir::DType t, const std::string& value) {
  if (t == ir::DType::kBFloat16) return round_to_bf16(value);
  if (t == ir::DType::kFloat16) return round_to_f16(value);
  return value;
}

std::string ValueEmitter::to_bits(ir::DType t, const std::string& value) {
  return t == ir::DType::kFloat16 ? f32_to_f16_bits(value) : f32_to_bf16_bits(value);
}

}  // namespace disc::lowering
