// exp(x) = 2^k * p(r), k = round(x / ln2), r = x - k*ln2 with ln2 split in a
// short exact part and a correction (so r keeps its low bits), p a degree-7
// polynomial (Cephes' expf coefficients) in fused multiply-adds. 2^k is
// applied either from exponent bits built in two halves (so results that are
// subnormal come out right) or, on AVX-512, by one vscalefps, which rounds
// once into the subnormals and saves ten of the vector's ~35 instructions
// (exp bounds softmax). Overflow gives +inf, underflow 0, NaN stays NaN: by
// the choice of clamp bounds, not by selects after the fact (they were a
// sixth of softmax's instructions). Targets without FMA get fmaf calls
// (slow, exact).
#include "lowering/codegen/cpu/math_functions.h"
#include "runtime/cpu/cpu_isa.h"

#include <cstdlib>
#include <stdexcept>

namespace disc::lowering {

namespace {

// The function in scalar form; $F / $I are the f32 / i32 types of the
// variant, $S the select condition type prefix, $K<v> a constant.
constexpr const char* kExpTemplate = R"mlir(func.func private @disc_expf$N(%x: $F) -> $F {
  %log2e = arith.constant $K<1.44269504088896341> : $F
  %half = arith.constant $K<0.5> : $F
  %one = arith.constant $K<1.0> : $F
  %c1 = arith.constant $K<0.693359375> : $F
  %c2 = arith.constant $K<-2.12194440e-4> : $F
  %p0 = arith.constant $K<1.9875691500e-4> : $F
  %p1 = arith.constant $K<1.3981999507e-3> : $F
  %p2 = arith.constant $K<8.3334519073e-3> : $F
  %p3 = arith.constant $K<4.1665795894e-2> : $F
  %p4 = arith.constant $K<1.6666665459e-1> : $F
  %p5 = arith.constant $K<5.0000001201e-1> : $F
  // Clamp bounds just outside the float range of exp: at hi the result
  // overflows to +inf and at lo it rounds to 0 by itself, and a NaN passes
  // through every step, so no select is needed after the polynomial.
  %hi = arith.constant $K<88.8> : $F
  %lo = arith.constant $K<-104.0> : $F
  // Clamp first: k stays in [-150, 128] and the bit tricks stay valid.
  // (arith.maxf has no LLVM lowering in MLIR 15: compare and select.)
  %below = arith.cmpf olt, %x, %lo : $F
  %xc0 = arith.select %below, %lo, %x : $S$F
  %above = arith.cmpf ogt, %xc0, %hi : $F
  %xc = arith.select %above, %hi, %xc0 : $S$F
  %th = math.fma %xc, %log2e, %half : $F
  %kf = math.floor %th : $F
  // Fused multiply-adds: one rounding each, and half the instructions of
  // separate mul/add (the exp is what bounds softmax's speed).
  %nc1 = arith.negf %c1 : $F
  %nc2 = arith.negf %c2 : $F
  %r0 = math.fma %kf, %nc1, %xc : $F
  %r = math.fma %kf, %nc2, %r0 : $F
  %r2 = arith.mulf %r, %r : $F
  %q1 = math.fma %p0, %r, %p1 : $F
  %q3 = math.fma %q1, %r, %p2 : $F
  %q5 = math.fma %q3, %r, %p3 : $F
  %q7 = math.fma %q5, %r, %p4 : $F
  %q9 = math.fma %q7, %r, %p5 : $F
  %q11 = math.fma %q9, %r2, %r : $F
  %p = arith.addf %q11, %one : $F
)mlir";

// 2^k from exponent bits, in two halves: k + 127 may lie outside [1, 254].
constexpr const char* kExponentBitsTail = R"mlir(  %bias = arith.constant $K<127> : $I
  %c23 = arith.constant $K<23> : $I
  %c1i = arith.constant $K<1> : $I
  %k = arith.fptosi %kf : $F to $I
  %k1 = arith.shrsi %k, %c1i : $I
  %k2 = arith.subi %k, %k1 : $I
  %e1 = arith.addi %k1, %bias : $I
  %e2 = arith.addi %k2, %bias : $I
  %b1 = arith.shli %e1, %c23 : $I
  %b2 = arith.shli %e2, %c23 : $I
  %s1 = arith.bitcast %b1 : $I to $F
  %s2 = arith.bitcast %b2 : $I to $F
  %y0 = arith.mulf %p, %s1 : $F
  %y = arith.mulf %y0, %s2 : $F
  return %y : $F
})mlir";

// 2^k by AVX-512's vscalefps (x86vector), over all 16 lanes; rounding 4 is
// _MM_FROUND_CUR_DIRECTION. Operand order: MLIR 15 passes the op's operands
// to llvm.x86.avx512.mask.scalef.ps.512 as they stand, and the intrinsic
// takes (value, exponent, pass-through), not the op's documented (src, a,
// b): so p, then k, then p again (test_mlir_jit's ExpVariants pins it).
constexpr const char* kScalefTail = R"mlir(  %all = arith.constant -1 : i16
  %round = arith.constant 4 : i32
  %y = x86vector.avx512.mask.scalef %p, %kf, %p, %all, %round : $F
  return %y : $F
})mlir";

std::string instantiate(uint32_t width, Pow2 pow2) {
  const std::string w = std::to_string(width);
  const std::string f = width ? "vector<" + w + "xf32>" : "f32";
  const std::string i = width ? "vector<" + w + "xi32>" : "i32";
  std::string text = std::string(kExpTemplate) + (pow2 == Pow2::kScalef ? kScalefTail : kExponentBitsTail);
  std::string out;
  for (size_t k = 0; k < text.size();) {
    if (text.compare(k, 2, "$F") == 0) { out += f; k += 2; continue; }
    if (text.compare(k, 2, "$I") == 0) { out += i; k += 2; continue; }
    if (text.compare(k, 2, "$N") == 0) { out += width ? w : ""; k += 2; continue; }
    if (text.compare(k, 2, "$S") == 0) { out += width ? "vector<" + w + "xi1>, " : ""; k += 2; continue; }
    if (text.compare(k, 3, "$K<") == 0) {
      size_t end = text.find('>', k);
      std::string v = text.substr(k + 3, end - k - 3);
      out += width ? "dense<" + v + ">" : v;
      k = end + 1;
      continue;
    }
    out += text[k++];
  }
  return out;
}

}  // namespace

const std::string& expf_function(uint32_t width, Pow2 pow2) {
  static const std::string scalar = instantiate(0, Pow2::kExponentBits);
  static const std::string vector = instantiate(16, Pow2::kExponentBits);
  static const std::string vector_scalef = instantiate(16, Pow2::kScalef);
  if (width == 0 && pow2 == Pow2::kExponentBits) return scalar;
  if (width == 16) return pow2 == Pow2::kScalef ? vector_scalef : vector;
  throw std::logic_error("disc_expf: no variant of width " + std::to_string(width) +
                         (pow2 == Pow2::kScalef ? " with vscalefps" : ""));
}

Pow2 host_pow2() {
  static const Pow2 best =
      runtime::cpu_isa_at_least(runtime::cpu_isa(), runtime::CpuIsa::kAvx512) ? Pow2::kScalef : Pow2::kExponentBits;
  return best;
}

}  // namespace disc::lowering
