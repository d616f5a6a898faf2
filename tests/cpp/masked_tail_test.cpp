// Masked vector tails: vectorize_loops turns a vectorized loop of symbolic
// extent bounded by a constant (min(n - jo*W, W), a dynamic shape's last
// tile) into one vector of W lanes whose loads and stores are predicated by
// lane < extent. Checked against naive loops for every n in 1..67, on AVX2
// and AVX-512 targets and in the interpreter, with each array ending where
// an inaccessible page begins, so that a lane touching memory past the end
// faults.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <csignal>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/codegen/llvm.h"
#include "kiln/codegen/target.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/passes.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

const char* const kTargets[] = {"llvm -mcpu=znver3", "llvm -mcpu=skylake-avx512"};

bool host_runs(const Target& t) { return !t.has_feature("avx512f") || Target::parse("llvm").has_feature("avx512f"); }

Param bparam(const Buffer& b) { return Param{b->data, b}; }
Param sparam(const Var& v) { return Param{v, Buffer()}; }

// `count` elements of T that end exactly where an inaccessible page begins.
template <typename T>
class Fenced {
 public:
  explicit Fenced(size_t count) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    data_pages_ = (count * sizeof(T) + page_ - 1) / page_ + 1;
    mem_ = static_cast<char*>(mmap(nullptr, (data_pages_ + 1) * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    KILN_CHECK(mem_ != MAP_FAILED) << "mmap";
    KILN_CHECK(mprotect(mem_ + data_pages_ * page_, page_, PROT_NONE) == 0) << "mprotect";
    ptr_ = reinterpret_cast<T*>(mem_ + data_pages_ * page_) - count;
  }
  ~Fenced() { munmap(mem_, (data_pages_ + 1) * page_); }
  T* data() { return ptr_; }
  T& operator[](size_t i) { return ptr_[i]; }

 private:
  size_t page_, data_pages_;
  char* mem_;
  T* ptr_;
};

// for jo in [0, ceil(n / w)): for ji vectorized in [0, min(n - jo*w, w)): body(jo*w + ji)
Stmt tiled(const Var& n, int w, const std::function<Stmt(const Expr&)>& body) {
  Var jo("jo"), ji("ji");
  Expr extent = min(n - jo * w, make_const(n.dtype(), w));
  Stmt inner = For::make(ji, 0, extent, ForKind::Vectorized, body(jo * w + ji));
  return For::make(jo, 0, floordiv(n + (w - 1), make_const(n.dtype(), w)), ForKind::Serial, inner);
}

PrimFunc lowered(const PrimFunc& f) { return pass::simplify(pass::vectorize_loops(f)); }

std::string text(const PrimFunc& f) {
  std::ostringstream os;
  os << f;
  return os.str();
}

// B[i] = A[i] * 3 + 1 (float32 or int32) over n elements.
PrimFunc affine(DataType t, int w) {
  Var n("n");
  Buffer A = Buffer::make("A", t, {n}), B = Buffer::make("B", t, {n});
  Stmt s = tiled(n, w, [&](const Expr& i) { return BufferStore::make(B, BufferLoad::make(A, {i}) * make_const(t, 3) + make_const(t, 1), {i}); });
  return lowered(PrimFunc::make("affine", {bparam(A), bparam(B), sparam(n)}, s));
}

TEST(MaskedTail, IsOnePredicatedVectorNotPowerOfTwoChunks) {
  std::string ir = text(affine(DataType::Float(32), 32));
  EXPECT_NE(ir.find("A[ramp("), std::string::npos) << ir;
  EXPECT_NE(ir.find("] if ("), std::string::npos) << ir;  // the predicate
  EXPECT_EQ(ir.find("x16"), std::string::npos) << ir;    // no 16-lane chunk
  // KILN_MASKED_TAILS=0 goes back to the chunks (32, 16, ..., 1 lanes).
  const char* was = std::getenv("KILN_MASKED_TAILS");
  std::string saved = was ? was : "";
  setenv("KILN_MASKED_TAILS", "0", 1);
  std::string chunks = text(affine(DataType::Float(32), 32));
  if (was) setenv("KILN_MASKED_TAILS", saved.c_str(), 1);
  else unsetenv("KILN_MASKED_TAILS");
  EXPECT_EQ(chunks.find(" if (ramp"), std::string::npos) << chunks;
}

template <typename T>
void check_affine(DataType t) {
  for (int w : {8, 16, 32}) {
    PrimFunc f = affine(t, w);
    for (const char* spec : kTargets) {
      Target target = Target::parse(spec);
      codegen::JitModule mod = codegen::jit_compile({f}, target);
      if (!host_runs(target)) continue;
      KilnKernel k = mod.get_function("affine");
      for (int32_t n = 1; n <= 67; ++n) {
        Fenced<T> a(n), b(n);
        for (int i = 0; i < n; ++i) a[i] = static_cast<T>(i - 20);
        void* args[] = {a.data(), b.data(), &n};
        ASSERT_EQ(k(args), 0);
        for (int i = 0; i < n; ++i) ASSERT_EQ(b[i], static_cast<T>((i - 20) * 3 + 1)) << spec << " w=" << w << " n=" << n << " i=" << i;
      }
    }
    // The interpreter bounds-checks every lane it touches: the masked-off ones must not count.
    for (int32_t n = 1; n <= 67; ++n) {
      std::vector<T> a(n), b(n, T(0));
      for (int i = 0; i < n; ++i) a[i] = static_cast<T>(i - 20);
      interpret(f, {a.data(), b.data(), &n});
      for (int i = 0; i < n; ++i) ASSERT_EQ(b[i], static_cast<T>((i - 20) * 3 + 1)) << "interpreter w=" << w << " n=" << n;
    }
  }
}

TEST(MaskedTail, Float32MatchesNaiveLoopAndStaysInBounds) { check_affine<float>(DataType::Float(32)); }
TEST(MaskedTail, Int32MatchesNaiveLoopAndStaysInBounds) { check_affine<int32_t>(DataType::Int(32)); }

// A reduction into an accumulator row: C[j] += A[r, j] over 3 rows. The
// masked-off lanes of C's store keep what is there (the identity, for a
// reduction), and C ends at the guard page.
TEST(MaskedTail, AccumulatorLanesOffTheMaskKeepTheirValues) {
  Var n("n"), r("r");
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {n * 3}), C = Buffer::make("C", f32, {n});
  // The rows inside the column tiles, the vector loop innermost.
  Var jo("jo"), ji("ji");
  Stmt inner = For::make(ji, 0, min(n - jo * 16, 16), ForKind::Vectorized,
                         BufferStore::make(C, BufferLoad::make(C, {jo * 16 + ji}) + BufferLoad::make(A, {r * n + jo * 16 + ji}), {jo * 16 + ji}));
  Stmt s = For::make(jo, 0, floordiv(n + 15, 16), ForKind::Serial, For::make(r, 0, 3, ForKind::Serial, inner));
  PrimFunc f = lowered(PrimFunc::make("colsum", {bparam(A), bparam(C), sparam(n)}, s));
  ASSERT_NE(text(f).find("] if ("), std::string::npos) << text(f);
  for (const char* spec : kTargets) {
    Target target = Target::parse(spec);
    codegen::JitModule mod = codegen::jit_compile({f}, target);
    if (!host_runs(target)) continue;
    KilnKernel k = mod.get_function("colsum");
    for (int32_t n = 1; n <= 67; ++n) {
      Fenced<float> a(3 * n), c(n);
      for (int i = 0; i < 3 * n; ++i) a[i] = static_cast<float>(i % 7);
      for (int j = 0; j < n; ++j) c[j] = 0.5f;
      void* args[] = {a.data(), c.data(), &n};
      ASSERT_EQ(k(args), 0);
      for (int j = 0; j < n; ++j) ASSERT_EQ(c[j], 0.5f + (j % 7) + ((n + j) % 7) + ((2 * n + j) % 7)) << spec << " n=" << n << " j=" << j;
    }
  }
}

// A row sum through a local accumulator of 16 lanes (the rfactor of a
// softmax's reductions): the tail reads the accumulator whole and blends its
// store (lanes off the mask keep the identity), so it can stay in registers;
// only A's load is masked.
TEST(MaskedTail, LocalAccumulatorIsBlendedNotMasked) {
  Var n("n"), jo("jo"), ji("ji"), k("k");
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {n}), O = Buffer::make("O", f32, {1});
  Buffer acc = Buffer::make("acc", f32, {16}, "local");
  Expr all = Ramp::make(0, 1, 16);
  Stmt tail = For::make(ji, 0, min(n - jo * 16, 16), ForKind::Vectorized,
                        BufferStore::make(acc, BufferLoad::make(acc, {ji}) + BufferLoad::make(A, {jo * 16 + ji}), {ji}));
  Stmt body = Seq::make({BufferStore::make(acc, Broadcast::make(make_zero(f32), 16), {all}),
                         For::make(jo, 0, floordiv(n + 15, 16), ForKind::Serial, tail),
                         BufferStore::make(O, make_zero(f32), {0}),
                         For::make(k, 0, 16, ForKind::Serial, BufferStore::make(O, BufferLoad::make(O, {0}) + BufferLoad::make(acc, {k}), {0}))});
  PrimFunc f = lowered(PrimFunc::make("rowsum", {bparam(A), bparam(O), sparam(n)}, Allocate::make(acc, body)));
  std::string ir = text(f);
  EXPECT_NE(ir.find("select("), std::string::npos) << ir;
  EXPECT_EQ(ir.find("acc[ramp(0, 1, 16)] if"), std::string::npos) << ir;
  EXPECT_NE(ir.find("A[ramp(jo*16, 1, 16)] if"), std::string::npos) << ir;
  auto expect = [](int n) { return static_cast<float>(n * (n - 1) / 2); };
  for (const char* spec : kTargets) {
    Target target = Target::parse(spec);
    codegen::JitModule mod = codegen::jit_compile({f}, target);
    if (!host_runs(target)) continue;
    KilnKernel kern = mod.get_function("rowsum");
    for (int32_t n = 1; n <= 67; ++n) {
      Fenced<float> a(n), o(1);
      for (int i = 0; i < n; ++i) a[i] = static_cast<float>(i);
      void* args[] = {a.data(), o.data(), &n};
      ASSERT_EQ(kern(args), 0);
      ASSERT_EQ(o[0], expect(n)) << spec << " n=" << n;
    }
  }
  for (int32_t n = 1; n <= 67; ++n) {
    std::vector<float> a(n), o(1);
    for (int i = 0; i < n; ++i) a[i] = static_cast<float>(i);
    interpret(f, {a.data(), o.data(), &n});
    ASSERT_EQ(o[0], expect(n)) << "interpreter n=" << n;
  }
}

// A strided read (B[i] = A[2i]) is a masked gather: A has 2n - 1 elements,
// so the lanes past n would read past its end.
TEST(MaskedTail, StridedReadIsAMaskedGather) {
  Var n("n");
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {n * 2 - 1}), B = Buffer::make("B", f32, {n});
  Stmt s = tiled(n, 8, [&](const Expr& i) { return BufferStore::make(B, BufferLoad::make(A, {i * 2}), {i}); });
  PrimFunc f = lowered(PrimFunc::make("stride2", {bparam(A), bparam(B), sparam(n)}, s));
  ASSERT_NE(text(f).find("] if ("), std::string::npos) << text(f);
  for (const char* spec : kTargets) {
    Target target = Target::parse(spec);
    codegen::JitModule mod = codegen::jit_compile({f}, target);
    if (!host_runs(target)) continue;
    KilnKernel k = mod.get_function("stride2");
    for (int32_t n = 1; n <= 67; ++n) {
      Fenced<float> a(2 * n - 1), b(n);
      for (int i = 0; i < 2 * n - 1; ++i) a[i] = static_cast<float>(i);
      void* args[] = {a.data(), b.data(), &n};
      ASSERT_EQ(k(args), 0);
      for (int i = 0; i < n; ++i) ASSERT_EQ(b[i], 2.f * i) << spec << " n=" << n;
    }
  }
  for (int32_t n = 1; n <= 67; ++n) {
    std::vector<float> a(2 * n - 1), b(n);
    for (int i = 0; i < 2 * n - 1; ++i) a[i] = static_cast<float>(i);
    interpret(f, {a.data(), b.data(), &n});
    for (int i = 0; i < n; ++i) ASSERT_EQ(b[i], 2.f * i) << "interpreter n=" << n;
  }
}

// The fence works: the same tail with its predicates dropped reads and
// writes whole vectors past the arrays' ends, and faults.
class DropPredicates : public IRMutator {
 protected:
  using IRMutator::visit;
  Expr visit(const BufferLoad* op) override { return BufferLoad::make(Buffer(op->buffer), op->indices); }
  Stmt visit(const BufferStore* op) override { return BufferStore::make(op->buffer, mutate(op->value), op->indices); }
};

TEST(MaskedTailDeathTest, WithoutTheMaskTheTailFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  PrimFunc f = affine(DataType::Float(32), 8);
  PrimFunc bare = f.with_body(DropPredicates().mutate(f.body()));
  ASSERT_EQ(text(bare).find("] if ("), std::string::npos);
  auto run = [](const PrimFunc& g, int32_t n) {
    codegen::JitModule mod = codegen::jit_compile({g}, Target::parse("llvm -mcpu=znver3"));
    Fenced<float> a(n), b(n);
    void* args[] = {a.data(), b.data(), &n};
    return mod.get_function("affine")(args);
  };
  EXPECT_EQ(run(f, 5), 0);
  EXPECT_EXIT(run(bare, 5), testing::KilledBySignal(SIGSEGV), "");
}

// The interpreter's bounds check sees exactly the lanes of the predicate:
// without it, the same access past the end is an error.
TEST(MaskedTail, InterpreterChecksOnlyTheLanesOnTheMask) {
  Var n("n");
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {n}), B = Buffer::make("B", f32, {n});
  Expr idx = Ramp::make(make_const(n.dtype(), 0), make_const(n.dtype(), 1), 8);
  Expr mask = LT::make(idx, Broadcast::make(n, 8));
  PrimFunc masked = PrimFunc::make("m", {bparam(A), bparam(B), sparam(n)}, BufferStore::make(B, BufferLoad::make(A, {idx}, mask), {idx}, mask));
  PrimFunc bare = PrimFunc::make("b", {bparam(A), bparam(B), sparam(n)}, BufferStore::make(B, BufferLoad::make(A, {idx}), {idx}, mask));
  int32_t len = 5;
  std::vector<float> a = {1, 2, 3, 4, 5}, b(5, 0.f);
  interpret(masked, {a.data(), b.data(), &len});
  EXPECT_EQ(b, a);
  EXPECT_THROW(interpret(bare, {a.data(), b.data(), &len}), Error);
}

}  // namespace
}  // namespace kiln
