// The trace IR: node construction, operand bookkeeping, local hashes.
#include <gtest/gtest.h>

#include "lowering/ir/node.h"

using namespace disc::ir;

namespace {

NodePtr leaf(DType t, std::vector<int64_t> sizes) {
  return make_data_node({t, std::move(sizes)}, std::make_shared<Payload>());
}

NodePtr add(Value a, Value b, double alpha, bool alpha_runtime) {
  auto n = std::make_shared<Node>();
  n->op = intern_op("aten::add.Tensor");
  n->inputs = {a, b};
  n->operands = {{Operand::Kind::kTensor, 0, 1}, {Operand::Kind::kTensor, 1, 1}};
  Attr alpha_attr = Attr::of_double(Attr::Kind::kScalarDouble, alpha);
  if (alpha_runtime) {
    n->operands.push_back({Operand::Kind::kRuntime, 0, 1});
    n->runtime.push_back(alpha_attr);
  } else {
    n->operands.push_back({Operand::Kind::kAttr, 0, 1});
    n->attrs.push_back(alpha_attr);
  }
  n->outputs = {{DType::kFloat32, {2, 3}}};
  n->num_returns = 1;
  n->finalize();
  return n;
}

}  // namespace

TEST(Ir, InternedOpNamesAreStable) {
  uint32_t a = intern_op("aten::mul.Tensor");
  EXPECT_EQ(a, intern_op("aten::mul.Tensor"));
  EXPECT_NE(a, intern_op("aten::mul.Scalar"));
  EXPECT_EQ(op_name(a), "aten::mul.Tensor");
}

TEST(Ir, DataLeafHashesDTypeAndRankNotIdentityOrSizes) {
  // Two buffers of one type hash alike: the cache key is structural. Sizes
  // are left to the graph's size pattern.
  EXPECT_EQ(leaf(DType::kFloat32, {2, 3})->local_hash, leaf(DType::kFloat32, {2, 3})->local_hash);
  EXPECT_NE(leaf(DType::kFloat32, {2, 3})->local_hash, leaf(DType::kFloat64, {2, 3})->local_hash);
  EXPECT_EQ(leaf(DType::kFloat32, {2, 3})->local_hash, leaf(DType::kFloat32, {3, 2})->local_hash);
  EXPECT_NE(leaf(DType::kFloat32, {2, 3})->local_hash, leaf(DType::kFloat32, {6})->local_hash);
}

TEST(Ir, SymbolicAttrsAreHashedByLengthOnly) {
  Attr a;
  a.kind = Attr::Kind::kIntList;
  a.ints = {8, 16};
  Attr b = a;
  b.ints = {9, 16};
  EXPECT_NE(a.hash(), b.hash());
  a.symbolic = b.symbolic = true;
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_FALSE(a == b);  // equality (CSE) still compares values
}

TEST(Ir, ConstantAttrsAreHashedByValue) {
  Value x{leaf(DType::kFloat32, {2, 3}), 0};
  EXPECT_NE(add(x, x, 1.0, false)->local_hash, add(x, x, 2.0, false)->local_hash);
}

TEST(Ir, RuntimeScalarsAreHashedByKindOnly) {
  // A learning rate that changes every step must not change the key.
  Value x{leaf(DType::kFloat32, {2, 3}), 0};
  EXPECT_EQ(add(x, x, 0.1, true)->local_hash, add(x, x, 0.05, true)->local_hash);
  EXPECT_NE(add(x, x, 0.1, true)->local_hash, add(x, x, 0.1, false)->local_hash);
}

TEST(Ir, AttrRoundTripsToString) {
  Attr a;
  a.kind = Attr::Kind::kIntList;
  a.ints = {1, -1};
  EXPECT_EQ(a.to_string(), "[1, -1]");
  EXPECT_EQ(Attr::of_int(Attr::Kind::kDType, static_cast<int64_t>(DType::kBFloat16)).to_string(),
            "bfloat16");
  EXPECT_TRUE(a == a);
}

TEST(Ir, TensorTypeNumelAndText) {
  TensorType t{DType::kInt64, {4, 0, 2}};
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.to_string(), "int64[4,0,2]");
}
