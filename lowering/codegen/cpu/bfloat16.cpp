// bfloat16 in generated kernels. LLVM 15 cannot lower bf16 arithmetic or
// conversions on x86, so a bf16 element lives in memory as its 16 bits
// (i16) and becomes an f32 by a shift; values are computed in f32 and
// rounded back as ATen rounds (to nearest, ties to even; NaN to 0x7FC0)
// after every op whose traced output is bf16 -- so a fused chain gives
// eager's bits, not a more precise answer than the reference executor's.
#include "lowering/codegen/cpu/value_emitter.h"

namespace disc::lowering {

std::string ValueEmitter::int_constant(int64_t v, const std::string& elem) {
  std::string name = fresh();
  const std::string t = vec(elem), text = std::to_string(v);
  line(name + " = arith.constant " + (width_ ? "dense<" + text + ">" : text) + " : " + t);
  return name;
}

std::string ValueEmitter::bf16_to_f32(const std::string& bits) {
  std::string wide = fresh(), shifted = fresh(), f = fresh();
  line(wide + " = arith.extui " + bits + " : " + vec("i16") + " to " + vec("i32"));
  line(shifted + " = arith.shli " + wide + ", " + int_constant(16, "i32") + " : " + vec("i32"));
  line(f + " = arith.bitcast " + shifted + " : " + vec("i32") + " to " + type_);
  return f;
}

// The f32 bits of `value` rounded to bf16's 8-bit mantissa, in the high
// half of an i32 (the low half zero); a NaN becomes the quiet NaN.
std::string ValueEmitter::bf16_rounded_bits(const std::string& value) {
  const std::string i32 = vec("i32");
  std::string bits = fresh(), lsb = fresh(), odd = fresh(), bias = fresh(), sum = fresh(),
              high = fresh(), rounded = fresh();
  line(bits + " = arith.bitcast " + value + " : " + type_ + " to " + i32);
  line(lsb + " = arith.shrui " + bits + ", " + int_constant(16, "i32") + " : " + i32);
  line(odd + " = arith.andi " + lsb + ", " + int_constant(1, "i32") + " : " + i32);
  line(bias + " = arith.addi " + odd + ", " + int_constant(0x7FFF, "i32") + " : " + i32);
  line(sum + " = arith.addi " + bits + ", " + bias + " : " + i32);
  line(high + " = arith.andi " + sum + ", " + int_constant(-65536, "i32") + " : " + i32);
  line(rounded + " = arith.select " + cmp("uno", value, value) + ", " +
       int_constant(0x7FC00000, "i32") + ", " + high + " : " + vec("i1") + ", " + i32);
  return rounded;
}

std::string ValueEmitter::round_to_bf16(const std::string& value) {
  std::string f = fresh();
  line(f + " = arith.bitcast " + bf16_rounded_bits(value) + " : " + vec("i32") + " to " + type_);
  return f;
}

std::string ValueEmitter::f32_to_bf16_bits(const std::string& value) {
  const std::string i32 = vec("i32");
  std::string high = fresh(), bits = fresh();
  line(high + " = arith.shrui " + bf16_rounded_bits(value) + ", " + int_constant(16, "i32") +
       " : " + i32);
  line(bits + " = arith.trunci " + high + " : " + i32 + " to " + vec("i16"));
  return bits;
}

}  // namespace disc::lowering
