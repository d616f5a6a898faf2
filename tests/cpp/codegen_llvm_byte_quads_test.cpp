// Byte quads in the LLVM backend (codegen_byte_quads.cpp): the uint32 that
// packs four consecutive bytes (ops::pad_quads_nchwc's word, uint8 bytes or
// int8 bytes moved to uint8 by +128) is emitted as one 4-byte load, not four
// byte loads; near misses (a gap between the bytes, a wrong shift, another
// offset) keep the byte loads. Every case is checked exactly against a
// naive integer loop.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kiln/codegen/llvm.h"
#include "kiln/codegen/target.h"
#include "kiln/ir/op.h"
#include "test_util.h"

namespace kiln {
namespace {

std::vector<Target> targets() {
  std::vector<Target> t{Target::parse("llvm")};
  if (t[0].triple.rfind("x86_64", 0) == 0) t.push_back(Target::parse("llvm -mcpu=haswell"));
  return t;
}

struct Quad {
  bool is_signed = false;   // X int8, each byte uint8(int32(x) + 128)
  int offsets[4] = {0, 1, 2, 3};  // byte j read at X[4 i + offsets[j]]
  int shifts[4] = {0, 8, 16, 24};
  bool reversed = false;    // the terms summed from the last to the first
};

// W[i] = sum_j uint32(byte(X[4 i + offsets[j]])) * 2^shifts[j], i in [0, n).
PrimFunc quad_func(const Quad& q, int n) {
  DataType xt = q.is_signed ? DataType::Int(8) : DataType::UInt(8), u32 = DataType::UInt(32);
  Buffer X = Buffer::make("X", xt, {Expr(4 * n + 4)}), W = Buffer::make("W", u32, {Expr(n)});
  Var i("i");
  Expr sum;
  for (int k = 0; k < 4; ++k) {
    int j = q.reversed ? 3 - k : k;
    Expr v = BufferLoad::make(X, {i * 4 + q.offsets[j]});
    if (q.is_signed) v = cast(DataType::UInt(8), cast(DataType::Int(32), v) + make_const(DataType::Int(32), 128));
    Expr term = cast(u32, v);
    if (q.shifts[j]) term = term * make_const(u32, static_cast<double>(uint32_t{1} << q.shifts[j]));
    sum = sum.defined() ? sum + term : term;
  }
  Stmt body = For::make(i, 0, n, ForKind::Serial, BufferStore::make(W, sum, {Expr(i)}));
  return PrimFunc::make("quads", {Param{X->data, X}, Param{W->data, W}}, body);
}

void check(const Quad& q, bool want_word_load) {
  const int n = 37;
  PrimFunc f = quad_func(q, n);
  std::vector<uint8_t> x(4 * n + 4);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<uint8_t>((k * 89 + 17) % 256);
  std::vector<uint32_t> want(n);
  for (int i = 0; i < n; ++i) {
    uint32_t w = 0;
    for (int j = 0; j < 4; ++j) {
      uint32_t b = x[4 * i + q.offsets[j]];
      if (q.is_signed) b = static_cast<uint8_t>(static_cast<int32_t>(static_cast<int8_t>(b)) + 128);
      w += b << q.shifts[j];
    }
    want[i] = w;
  }
  for (const Target& target : targets()) {
    SCOPED_TRACE(target.str());
    std::string ir = codegen::emit_llvm_ir({f}, target, false);
    EXPECT_EQ(ir.find("load i8") == std::string::npos, want_word_load) << ir;
    codegen::JitModule mod = codegen::jit_compile({f}, target);
    std::vector<uint32_t> out(n, 0);
    std::vector<void*> args{x.data(), out.data()};
    ASSERT_EQ(mod.get_function("quads")(args.data()), 0);
    EXPECT_EQ(out, want);
  }
}

TEST(CodegenByteQuads, ConsecutiveBytesAreOneWordLoad) {
  check(Quad{}, true);
  Quad r;
  r.reversed = true;  // the simplifier may order the terms either way
  check(r, true);
}

TEST(CodegenByteQuads, SignedBytesAreOneWordLoadWithTheTopBitsFlipped) {
  Quad s;
  s.is_signed = true;
  check(s, true);
  s.reversed = true;
  check(s, true);
}

TEST(CodegenByteQuads, NearMissesKeepTheByteLoads) {
  Quad gap;
  gap.offsets[3] = 4;
  check(gap, false);
  Quad shift;
  shift.shifts[2] = 20;
  check(shift, false);
  Quad swapped;  // bytes 1 and 2 exchanged: not the word's order
  swapped.offsets[1] = 2, swapped.offsets[2] = 1;
  check(swapped, false);
}

}  // namespace
}  // namespace kiln
