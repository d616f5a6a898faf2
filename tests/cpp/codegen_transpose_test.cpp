// Transposed tiles in the LLVM backend (codegen_transpose.cpp): a loop whose
// one vector store reads its lanes down a column is emitted as row loads
// transposed in registers, not a gather. Hand-built transposes over several
// tile sizes, vector widths, element types and loop kinds are checked
// against a naive loop; near misses of the pattern keep the gather and stay
// correct.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/codegen/llvm.h"
#include "kiln/codegen/target.h"
#include "kiln/ir/op.h"
#include "test_util.h"

namespace kiln {
namespace {

// The host, and AVX2 (which every x86 host here runs): vector widths differ, the rule does not.
std::vector<Target> targets() {
  std::vector<Target> t{Target::parse("llvm")};
  if (t[0].triple.rfind("x86_64", 0) == 0) t.push_back(Target::parse("llvm -mcpu=haswell"));
  return t;
}

struct Tile {
  int n;      // the loop's iterations (columns of a tile)
  int lanes;  // the vector's lanes (rows of a tile)
  ForKind kind = ForKind::Serial;
  int column_step = 1;  // how far the load's base moves per iteration: 1 is the pattern
};

// T[c, r] = X[r, c] for X [R, C]: for each (r0, c0) tile,
//   for ii in [0, n): T[(c0 + ii) * R + r0 + ramp(0, 1, lanes)] = X[ramp(r0 * C + (c0 + ii) * step, C, lanes)].
PrimFunc transpose_func(const std::string& name, DataType t, int R, int C, const Tile& tile) {
  Buffer X = Buffer::make("X", t, {Expr(R * C)}), T = Buffer::make("T", t, {Expr(R * C)});
  Var ro("ro"), co("co"), ii("ii");
  Expr r0 = ro * tile.lanes, c = co * tile.n + ii;
  Expr in = Ramp::make(r0 * C + c * tile.column_step, C, tile.lanes);
  Stmt st = BufferStore::make(T, BufferLoad::make(X, {in}), {Ramp::make(c * R + r0, 1, tile.lanes)});
  Stmt body = For::make(ro, 0, R / tile.lanes, ForKind::Serial,
                        For::make(co, 0, C / (tile.n * tile.column_step), ForKind::Serial, For::make(ii, 0, tile.n, tile.kind, st)));
  return PrimFunc::make(name, {Param{X->data, X}, Param{T->data, T}}, body);
}

template <typename E>
void check_transpose(DataType t, int R, int C, const Tile& tile, bool want_gather) {
  SCOPED_TRACE(t.str() + " " + std::to_string(R) + "x" + std::to_string(C) + " n=" + std::to_string(tile.n) + " lanes=" + std::to_string(tile.lanes));
  PrimFunc f = transpose_func("tr", t, R, C, tile);
  std::vector<E> x(R * C), want(R * C, E(0));
  for (int i = 0; i < R * C; ++i) x[i] = static_cast<E>((i * 7 + 3) % 251);
  int cols = C / (tile.n * tile.column_step) * tile.n;  // the columns the loops visit
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < cols; ++c) want[c * R + r] = x[r * C + c * tile.column_step];
  for (const Target& target : targets()) {
    SCOPED_TRACE(target.str());
    std::string ir = codegen::emit_llvm_ir({f}, target, false);
    EXPECT_EQ(ir.find("masked.gather") != std::string::npos, want_gather);
    codegen::JitModule mod = codegen::jit_compile({f}, target);
    std::vector<E> out(R * C, E(0));
    std::vector<void*> args{x.data(), out.data()};
    ASSERT_EQ(mod.get_function("tr")(args.data()), 0);
    EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(E)), 0);
  }
}

TEST(CodegenTranspose, SquareTilesOfEveryWidthAreRowLoadsAndShuffles) {
  for (int n : {4, 8, 16}) {
    check_transpose<float>(DataType::Float(32), 2 * n, 3 * n, {n, n}, false);
    check_transpose<float>(DataType::Float(32), 4 * n, 2 * n, {n, n, ForKind::Unrolled}, false);
  }
}

TEST(CodegenTranspose, WideVectorsStackSquareBlocks) {
  // 32 lanes over a loop of 16 (the default transpose schedule on AVX-512): two 16 x 16 blocks a column.
  check_transpose<float>(DataType::Float(32), 64, 48, {16, 32}, false);
  check_transpose<float>(DataType::Float(32), 32, 32, {8, 32}, false);
}

TEST(CodegenTranspose, OtherElementTypes) {
  check_transpose<int32_t>(DataType::Int(32), 32, 16, {8, 16}, false);
  check_transpose<uint16_t>(DataType::BFloat16(), 32, 32, {16, 16}, false);  // bits moved, never converted
  check_transpose<int8_t>(DataType::Int(8), 64, 32, {16, 16}, false);
  check_transpose<double>(DataType::Float(64), 16, 16, {8, 8}, false);
}

TEST(CodegenTranspose, NearMissesKeepTheGather) {
  // A load that moves two columns per iteration is not one row's contiguous elements: gathered, still correct.
  check_transpose<float>(DataType::Float(32), 16, 32, {8, 8, ForKind::Serial, 2}, true);
  // A loop of 3 (no power of two) and lanes that 16 does not divide.
  check_transpose<float>(DataType::Float(32), 8, 24, {3, 8}, true);
  check_transpose<float>(DataType::Float(32), 24, 32, {16, 8}, true);
}

}  // namespace
}  // namespace kiln
