// The GPU lowering passes, CUDA C codegen, NVRTC and the GPU simulator on
// schedules written with the ordinary primitives: a tiled GEMM through
// shared memory, an elementwise op with a bounds guard, errors for schedules
// that are no valid kernel. Runs without a GPU (NVRTC parts skip without it).
#include <gtest/gtest.h>

#include <string>

#include "kiln/codegen/cuda.h"
#include "kiln/driver/build_cuda.h"
#include "kiln/interp/gpu_simulator.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/nn.h"
#include "kiln/pass/passes.h"
#include "kiln/runtime/cuda.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "reference_ops.h"
#include "test_util.h"

namespace kiln {
namespace {

using te::Schedule;
using te::Tensor;
using testing::all_close;
using testing::random_vector;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Expects a kiln::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

// C = A @ B tiled for the GPU: 16x16 tiles per block, 2x2 per thread, the
// tiles of A and B fetched cooperatively into shared memory per 8-wide k
// step, accumulation in local memory.
struct TiledGemm {
  static constexpr int M = 32, N = 48, K = 24;
  Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  Schedule s = te::create_schedule({C});

  TiledGemm() {
    Tensor CL = s.cache_write(C, "local");
    Tensor AS = s.cache_read(A, "shared", {CL});
    Tensor BS = s.cache_read(B, "shared", {CL});
    auto& c = s[C];
    auto [by, yi] = c.split(c.axis("i"), 16);
    auto [bx, xi] = c.split(c.axis("j"), 16);
    auto [ty, yii] = c.split(yi, 2);
    auto [tx, xii] = c.split(xi, 2);
    c.reorder({by, bx, ty, tx, yii, xii});
    c.bind(by, "blockIdx.y"), c.bind(bx, "blockIdx.x"), c.bind(ty, "threadIdx.y"), c.bind(tx, "threadIdx.x");
    s[CL].compute_at(c, bx);
    auto& cl = s[CL];
    auto [cty, cyi] = cl.split(cl.axis("i"), 2);
    auto [ctx, cxi] = cl.split(cl.axis("j"), 2);
    auto [ko, ki] = cl.split(cl.axis("k"), 8);
    cl.reorder({ko, cty, ctx, ki, cyi, cxi});
    cl.bind(cty, "threadIdx.y"), cl.bind(ctx, "threadIdx.x");
    for (const Tensor& t : {AS, BS}) {
      auto& st = s[t];
      st.compute_at(cl, ko);
      const auto& leaves = st.leaf_iter_vars();
      IterVar f = st.fuse(leaves[0], leaves[1]);
      auto [fo, fi] = st.split(f, 64);
      auto [fy, fx] = st.split(fi, 8);
      st.reorder({fy, fx, fo});
      st.bind(fy, "threadIdx.y"), st.bind(fx, "threadIdx.x");
    }
  }

  ::testing::AssertionResult simulate(const PrimFunc& f, GpuSimulation* stats = nullptr) {
    std::vector<float> a = random_vector(M * K, 1), b = random_vector(K * N, 2), c(M * N, 1234.f);
    GpuSimulation r = simulate_gpu(f, {a.data(), b.data(), c.data()});
    if (stats) *stats = r;
    return all_close(c, testing::ref::matmul(a, b, M, N, K));
  }
};

TEST(GpuGemm, SimulatesCorrectlyWithTwoBarriersPerStep) {
  TiledGemm g;
  PrimFunc f = lower_gpu(g.s, {g.A, g.B, g.C}, "gemm");
  std::string ir = to_string(f);
  // The classic pair: after the fetch (before the compute reads the tiles)
  // and before the next fetch overwrites them. No more.
  EXPECT_EQ(count(ir, "sync_threads"), 2) << ir;
  GpuSimulation stats;
  EXPECT_TRUE(g.simulate(f, &stats));
  EXPECT_EQ(stats.blocks, 2 * 3);
  EXPECT_EQ(stats.thread_runs, 6 * 64);
  EXPECT_EQ(stats.barriers, 6 * 3 * 2);  // 3 k steps of 2 barriers in each of 6 blocks
}

TEST(GpuGemm, LaunchConfigAndScopes) {
  TiledGemm g;
  PrimFunc f = lower_gpu(g.s, {g.A, g.B, g.C}, "gemm");
  pass::LaunchConfig cfg = pass::launch_config(f);
  EXPECT_EQ(cfg.grid[0], 3);
  EXPECT_EQ(cfg.grid[1], 2);
  EXPECT_EQ(cfg.block[0], 8);
  EXPECT_EQ(cfg.block[1], 8);
  EXPECT_EQ(cfg.shared_bytes, 2 * 16 * 8 * 4);
  // The scopes survive storage_flatten: the allocations are flat and keep them.
  std::string ir = to_string(f);
  EXPECT_NE(ir.find("allocate A.shared.shared[float32 * 128]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("allocate C.local.local[float32 * 256]"), std::string::npos) << ir;
  int shared = 0, local = 0;
  post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& s) {
    if (const Allocate* a = s.as<Allocate>()) {
      shared += a->buffer.scope() == "shared";
      local += a->buffer.scope() == "local";
      EXPECT_EQ(a->buffer.ndim(), 1);
    }
  });
  EXPECT_EQ(shared, 2);
  EXPECT_EQ(local, 1);
}

TEST(GpuGemm, MissingBarrierIsReportedAsRace) {
  TiledGemm g;
  GpuLowerOptions o;
  o.insert_barriers = false;
  PrimFunc f = lower_gpu(g.s, {g.A, g.B, g.C}, "gemm", o);
  EXPECT_EQ(count(to_string(f), "sync_threads"), 0);
  expect_error([&] { g.simulate(f); }, {"data race on shared buffer", ".shared'", "since the last barrier", "thread ("});
}

// Drops the first barrier: the one at the top of the k loop, which keeps the
// next fetch from overwriting tiles that other threads still read.
class DropFirstBarrier : public IRMutator {
 protected:
  using IRMutator::visit;
  Stmt visit(const Evaluate* op) override {
    if (!dropped_ && pass::is_sync_threads(Stmt(op))) {
      dropped_ = true;
      return make_nop();
    }
    return op;
  }
  bool dropped_ = false;
};

TEST(GpuGemm, OverwritingATileStillReadIsARace) {
  TiledGemm g;
  PrimFunc f = lower_gpu(g.s, {g.A, g.B, g.C}, "gemm");
  PrimFunc cut = f.with_body(DropFirstBarrier().mutate(f.body()));
  EXPECT_EQ(count(to_string(cut), "sync_threads"), 1);
  // Write after read: a thread fetching the next tile, another having read the element.
  expect_error([&] { g.simulate(cut); }, {"data race on shared buffer 'A.shared'", "writes it", "read it since the last barrier"});
}

TEST(GpuGemm, CudaSourceAndNvrtc) {
  TiledGemm g;
  for (const char* arch : {"cuda -arch=sm_80", "cuda -arch=sm_90"}) {
    Target t = Target::parse(arch);
    CudaModule m = build_cuda(g.s, {g.A, g.B, g.C}, t, "gemm", {}, false);
    EXPECT_NE(m.source.find("extern \"C\" __global__ void __launch_bounds__(64) gemm("), std::string::npos) << m.source;
    EXPECT_EQ(count(m.source, "__syncthreads();"), 2);
    EXPECT_EQ(count(m.source, "__shared__"), 2);
    EXPECT_NE(m.source.find("blockIdx.y"), std::string::npos);
    // The 16x16 accumulator tile of the block shrinks to the thread's 2x2 registers.
    EXPECT_NE(m.source.find("float C_local[4];"), std::string::npos) << m.source;
    std::string why;
    if (!codegen::nvrtc_available(&why)) {
      GTEST_SKIP() << "NVRTC cannot be loaded: " << why;
    }
    std::string cubin = codegen::nvrtc_compile(m.source, "gemm", t);
    EXPECT_GT(cubin.size(), 100u);
    EXPECT_EQ(cubin.compare(0, 4, "\x7f" "ELF"), 0);  // a cubin is an ELF image
  }
}

// The same GEMM as TVM schedules it: the accumulator computed at the thread
// loops of C, the shared tiles at the reduction's outer loop inside them,
// fetched by loops bound to the same thread indices.
struct TvmGemm {
  static constexpr int M = 64, N = 32, K = 24;
  Tensor A = te::placeholder({M, K}, DataType::Float(32), "A");
  Tensor B = te::placeholder({K, N}, DataType::Float(32), "B");
  Tensor C = ops::matmul(A, B);
  Schedule s = te::create_schedule({C});

  TvmGemm() {
    Tensor CL = s.cache_write(C, "local");
    Tensor AS = s.cache_read(A, "shared", {CL});
    Tensor BS = s.cache_read(B, "shared", {CL});
    auto& c = s[C];
    auto [by, yi] = c.split(c.axis("i"), 32);
    auto [bx, xi] = c.split(c.axis("j"), 32);
    auto [ty, yii] = c.split_nparts(yi, 8);
    auto [tx, xii] = c.split_nparts(xi, 8);
    c.reorder({by, bx, ty, tx, yii, xii});
    c.bind(by, "blockIdx.y"), c.bind(bx, "blockIdx.x"), c.bind(ty, "threadIdx.y"), c.bind(tx, "threadIdx.x");
    s[CL].compute_at(c, tx);
    auto& cl = s[CL];
    auto [ko, ki] = cl.split(cl.axis("k"), 8);
    cl.reorder({ko, ki, cl.axis("i"), cl.axis("j")});
    for (const Tensor& t : {AS, BS}) {
      auto& st = s[t];
      st.compute_at(cl, ko);
      const auto& leaves = st.leaf_iter_vars();
      IterVar f = st.fuse(leaves[0], leaves[1]);
      auto [fy, rest] = st.split_nparts(f, 8);
      auto [fx, fi] = st.split_nparts(rest, 8);
      st.bind(fy, "threadIdx.y"), st.bind(fx, "threadIdx.x");
    }
  }
};

TEST(GpuTvmGemm, SharedTilesCoverTheBlockAndSimulateCorrectly) {
  TvmGemm g;
  // Bound inference alone (the CPU lowering shares it): the shared tile is the block's 32x8, not one thread's 4x8.
  std::string raw = to_string(te::lower(g.s, {g.A, g.B, g.C}, "gemm"));
  EXPECT_NE(raw.find("allocate A.shared.shared[float32 * 256]"), std::string::npos) << raw;
  PrimFunc f = lower_gpu(g.s, {g.A, g.B, g.C}, "gemm");
  std::string ir = to_string(f);
  EXPECT_EQ(count(ir, "sync_threads"), 2) << ir;
  // Allocated once per block, outside every thread loop; the accumulator has a 16-element part per thread.
  post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& st) {
    const For* loop = st.as<For>();
    if (!loop || pass::thread_dim_index(loop->thread_tag) < 0) return;
    post_order_visit(loop->body, [](const Expr&) {}, [&](const Stmt& x) {
      const Allocate* a = x.as<Allocate>();
      EXPECT_FALSE(a && a->buffer.scope() == "shared") << a->buffer.name() << " inside " << loop->loop_var.name();
    });
  });
  EXPECT_NE(ir.find("allocate C.local.local[float32 * 1024]"), std::string::npos) << ir;
  std::vector<float> a = random_vector(TvmGemm::M * TvmGemm::K, 1), b = random_vector(TvmGemm::K * TvmGemm::N, 2), c(TvmGemm::M * TvmGemm::N, 1234.f);
  GpuSimulation stats = simulate_gpu(f, {a.data(), b.data(), c.data()});
  EXPECT_TRUE(all_close(c, testing::ref::matmul(a, b, TvmGemm::M, TvmGemm::N, TvmGemm::K)));
  EXPECT_EQ(stats.blocks, 2);
  EXPECT_EQ(stats.barriers, 2 * 3 * 2);  // 3 k steps of 2 barriers in each of 2 blocks
  CudaModule m = build_cuda(g.s, {g.A, g.B, g.C}, Target::parse("cuda -arch=sm_90"), "gemm", {}, false);
  EXPECT_NE(m.source.find("float C_local[16];"), std::string::npos) << m.source;
}

// Hand-built, as lowering leaves TVM-style nests: per thread tx of block bx,
// acc = sum over r of S[15 - tx], where S, the block's shared copy of
// A[bx*64 + r*16 ..][16], is fetched inside the thread loop by a loop bound
// to threadIdx.x again. `inner` wraps the shared stage (a condition, say).
PrimFunc shared_inside_threads(Stmt (*inner)(const Var& tx, Stmt shared), bool fetch_uses_tx = false) {
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {128}), B = Buffer::make("B", f32, {32});
  Buffer S = Buffer::make("S", f32, {16}, "shared"), acc = Buffer::make("acc", f32, {1}, "local");
  Var bx("bx"), tx("tx"), r("r"), t1("t1"), base("base");
  Expr from = fetch_uses_tx ? base + tx : base + t1;
  Stmt fetch = For::make(t1, 0, 16, ForKind::ThreadBinding, BufferStore::make(S, BufferLoad::make(A, {min(from, 127)}), {t1}), "threadIdx.x");
  Stmt add = BufferStore::make(acc, BufferLoad::make(acc, {0}) + BufferLoad::make(S, {15 - tx}), {0});
  Stmt shared = LetStmt::make(base, bx * 64 + r * 16, Allocate::make(S, Seq::make({fetch, add})));
  Stmt body = Allocate::make(acc, Seq::make({BufferStore::make(acc, 0.0f, {0}), For::make(r, 0, 4, ForKind::Serial, inner(tx, shared)),
                                             BufferStore::make(B, BufferLoad::make(acc, {0}), {bx * 16 + tx})}));
  Stmt nest = For::make(bx, 0, 2, ForKind::ThreadBinding, For::make(tx, 0, 16, ForKind::ThreadBinding, body, "threadIdx.x"), "blockIdx.x");
  return PrimFunc::make("shared_inside", {Param{A->data, A}, Param{B->data, B}}, nest);
}

TEST(GpuSplitThreadNests, ThreadLoopsArePushedPastTheSharedStage) {
  PrimFunc f = shared_inside_threads([](const Var&, Stmt s) { return s; });
  expect_error([&] { pass::verify_gpu_kernel(f); }, {"shared buffer 'S' is allocated inside a threadIdx-bound loop"});
  PrimFunc g = pass::insert_barriers(pass::split_thread_nests(f));
  pass::verify_gpu_kernel(g);
  std::string ir = to_string(g);
  // acc gets one element per thread; S stays one per block, between two barriers.
  EXPECT_NE(ir.find("allocate acc.local[float32 * 16]"), std::string::npos) << ir;
  EXPECT_EQ(count(ir, "sync_threads"), 2) << ir;
  std::vector<float> a = random_vector(128, 4), b(32, -1.f), want(32, 0.f);
  for (int bx = 0; bx < 2; ++bx)
    for (int tx = 0; tx < 16; ++tx)
      for (int r = 0; r < 4; ++r) want[bx * 16 + tx] += a[bx * 64 + r * 16 + 15 - tx];
  GpuSimulation run = simulate_gpu(g, {a.data(), b.data()});
  EXPECT_TRUE(all_close(b, want, 1e-5f));
  EXPECT_EQ(run.barriers, 2 * 4 * 2);
  // Nests without shared stages are left as they are.
  TiledGemm gemm;
  te::LowerOptions raw;
  raw.run_passes = false;
  PrimFunc tiled = pass::gpu_storage_scope(pass::storage_flatten(te::lower(gemm.s, {gemm.A, gemm.B, gemm.C}, "gemm", raw)));
  EXPECT_TRUE(pass::split_thread_nests(tiled).same_as(tiled));
}

TEST(GpuSplitThreadNests, BarriersWhereNotEveryThreadArrivesAreRefused) {
  PrimFunc f = shared_inside_threads([](const Var& tx, Stmt s) { return IfThenElse::make(tx < 8, s); });
  expect_error([&] { pass::split_thread_nests(f); },
               {"a shared stage is computed under the condition", "depends on the thread loops 'tx' (threadIdx.x)", "would not all reach its barriers"});
  PrimFunc g = shared_inside_threads([](const Var&, Stmt s) { return s; }, /*fetch_uses_tx=*/true);
  expect_error([&] { pass::split_thread_nests(g); }, {"loop 't1' is bound to threadIdx.x inside loop 'tx'", "depends on the outer loop's index"});
}

TEST(GpuElementwise, GuardWhenTheSplitDoesNotDivide) {
  const int n = 1000;
  Tensor A = te::placeholder({n}, DataType::Float(32), "A");
  Tensor B = te::compute({n}, [&](const std::vector<Var>& i) { return exp(A({i[0]})) * 2.0f; }, "B", {"i"});
  Schedule s = te::create_schedule({B});
  auto [bx, tx] = s[B].split(s[B].axis("i"), 128);
  s[B].bind(bx, "blockIdx.x"), s[B].bind(tx, "threadIdx.x");
  CudaModule m = build_cuda(s, {A, B}, Target::parse("cuda -arch=sm_90 -fast-math"), "scale_exp", {}, false);
  EXPECT_EQ(m.launch.grid[0], 8);
  EXPECT_EQ(m.launch.block[0], 128);
  EXPECT_NE(m.source.find("< 1000"), std::string::npos) << m.source;  // the guard
  EXPECT_NE(m.source.find("__expf("), std::string::npos) << m.source;  // fast math
  std::vector<float> a = random_vector(n, 3), b(n, 0.f), want(n);
  for (int i = 0; i < n; ++i) want[i] = std::exp(a[i]) * 2.0f;
  simulate_gpu(m.func, {a.data(), b.data()});
  EXPECT_TRUE(all_close(b, want, 1e-5f));
}

// A thread's local stage attached inside an unrolled loop with a tail (the
// schedule of issue 47 for the GPU): the cuda pipeline leaves unrolling to
// nvcc (#pragma unroll) and does not partition, so the array is declared once
// in the loop body, and the kernel computes the right values.
TEST(GpuElementwise, UnrolledCopiesOfALocalStage) {
  const int h = 64, w = 20;
  Tensor A = te::placeholder({h, w}, DataType::Float(32), "A");
  Tensor B = te::compute({h, w}, [&](const std::vector<Var>& i) { return A(i[0], i[1]) + 1.0f; }, "B");
  Tensor C = te::compute({h, w}, [&](const std::vector<Var>& i) { return B(i[0], i[1]) * 2.0f; }, "C");
  Schedule s = te::create_schedule({C});
  auto [bx, tx] = s[C].split(s[C].axis("i"), 16);
  auto [jo, ji] = s[C].split(s[C].axis("j"), 8);
  s[C].bind(bx, "blockIdx.x"), s[C].bind(tx, "threadIdx.x");
  s[B].compute_at(s[C], jo);
  s[C].unroll(jo);
  Target t = Target::parse("cuda -arch=sm_90");
  CudaModule m = build_cuda(s, {A, C}, t, "unrolled_local", {}, false);
  EXPECT_EQ(count(m.source, "float B["), 1) << m.source;
  EXPECT_EQ(count(m.source, "#pragma unroll"), 1) << m.source;
  std::vector<float> a = random_vector(h * w, 4), c(h * w, 0.f), want(h * w);
  for (int i = 0; i < h * w; ++i) want[i] = (a[i] + 1.f) * 2.f;
  simulate_gpu(m.func, {a.data(), c.data()});
  EXPECT_TRUE(all_close(c, want));
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC cannot be loaded: " << why;
  EXPECT_GT(codegen::nvrtc_compile(m.source, "unrolled_local", t).size(), 100u);
}

// Hand-built: per block, 4 rounds of "fetch 16 values into shared memory,
// then each thread reads another thread's value". Each round needs a barrier
// after its fetch (read after write) and one before the next fetch (write
// after read); the thread-0 region that zeroes the count before the loop
// needs none against the fetch (different buffers), and the last nest none.
TEST(GpuBarriers, ReadAfterWriteAndWriteAfterReadInALoop) {
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {128}), B = Buffer::make("B", f32, {128});
  Buffer S = Buffer::make("S", f32, {16}, "shared"), Z = Buffer::make("Z", f32, {1}, "shared");
  Var bx("bx"), r("r"), t1("t1"), t2("t2");
  Stmt fetch = For::make(t1, 0, 16, ForKind::ThreadBinding, BufferStore::make(S, BufferLoad::make(A, {bx * 64 + r * 16 + t1}), {t1}), "threadIdx.x");
  Stmt use = For::make(t2, 0, 16, ForKind::ThreadBinding,
                       BufferStore::make(B, BufferLoad::make(S, {15 - t2}) + BufferLoad::make(Z, {0}), {bx * 64 + r * 16 + t2}), "threadIdx.x");
  Stmt rounds = For::make(r, 0, 4, ForKind::Serial, Seq::make({fetch, use}));
  Stmt body = Allocate::make(Z, Allocate::make(S, Seq::make({BufferStore::make(Z, 0.0f, {0}), rounds})));
  PrimFunc f = PrimFunc::make("rounds", {Param{A->data, A}, Param{B->data, B}}, For::make(bx, 0, 2, ForKind::ThreadBinding, body, "blockIdx.x"));
  pass::verify_gpu_kernel(f);
  PrimFunc g = pass::insert_barriers(f);
  std::string ir = to_string(g);
  EXPECT_EQ(count(ir, "sync_threads"), 2) << ir;
  std::vector<float> a = random_vector(128, 5), b(128, 0.f), want(128);
  for (int blk = 0; blk < 2; ++blk)
    for (int round = 0; round < 4; ++round)
      for (int t = 0; t < 16; ++t) want[blk * 64 + round * 16 + t] = a[blk * 64 + round * 16 + 15 - t];
  GpuSimulation run = simulate_gpu(g, {a.data(), b.data()});
  EXPECT_EQ(run.barriers, 2 * 4 * 2);
  EXPECT_EQ(b, want);
  // Without them the simulator sees thread 0 read what thread 15 wrote.
  expect_error([&] { simulate_gpu(f, {a.data(), b.data()}); }, {"data race on shared buffer 'S' element 15", "thread (0,0,0) of block (0,0,0) reads it", "thread (15,0,0)"});
}

// Hand-built: per block, the sum of a 90-element row with 48 threads, each
// adding up to two elements (the serial loop ko) into the one element B[bx].
PrimFunc row_sum_across_threads(Stmt (*update)(const Buffer& A, const Buffer& B, const Var& bx, const Expr& col)) {
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {270}), B = Buffer::make("B", f32, {3});
  Var bx("bx"), ko("ko"), tx("tx");
  Expr col = ko * 48 + tx;
  Stmt guarded = IfThenElse::make(likely(col < 90), update(A, B, bx, col));
  Stmt reduce = For::make(ko, 0, 2, ForKind::Serial, For::make(tx, 0, 48, ForKind::ThreadBinding, guarded, "threadIdx.x"));
  Stmt body = Seq::make({BufferStore::make(B, 0.0f, {bx}), reduce});
  return PrimFunc::make("row_sum", {Param{A->data, A}, Param{B->data, B}}, For::make(bx, 0, 3, ForKind::ThreadBinding, body, "blockIdx.x"));
}

TEST(GpuAllreduce, UpdateAcrossThreadsBecomesPartialsAndOneCollective) {
  PrimFunc f = row_sum_across_threads([](const Buffer& A, const Buffer& B, const Var& bx, const Expr& col) {
    return BufferStore::make(B, BufferLoad::make(B, {bx}) + BufferLoad::make(A, {bx * 90 + col}), {bx});
  });
  PrimFunc g = pass::lower_thread_allreduce(f);
  std::string ir = to_string(g);
  // One collective, after the serial loop (it reduces the whole row), over 48 threads.
  EXPECT_EQ(count(ir, "thread_allreduce(\"sum\", 48"), 1) << ir;
  EXPECT_GT(ir.find("thread_allreduce"), ir.rfind("for (ko")) << ir;
  EXPECT_EQ(count(ir, "B.red[tx] = B.red[tx] + A["), 1) << ir;
  pass::LaunchConfig cfg = pass::launch_config(g);
  EXPECT_EQ(cfg.block[0], 64);       // whole warps
  EXPECT_EQ(cfg.shared_bytes, 16);  // the two warps' results
  std::vector<float> a = random_vector(270, 9), b(3, -1.f), want(3, 0.f);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 90; ++c) want[r] += a[r * 90 + c];
  GpuSimulation run = simulate_gpu(g, {a.data(), b.data()});
  EXPECT_EQ(run.barriers, 3);  // the collective's, once per block
  EXPECT_TRUE(all_close(b, want, 1e-5f));
  std::string src = codegen::codegen_cuda(g, Target::parse("cuda -arch=sm_90"), cfg);
  EXPECT_EQ(count(src, "__shfl_down_sync(0xffffffffu"), 5 + 1) << src;
  EXPECT_NE(src.find("float B_red[1];"), std::string::npos) << src;
  // Without the pass every thread adds into B[bx] at once.
  expect_error([&] { simulate_gpu(f, {a.data(), b.data()}); }, {"data race on global buffer 'B'"});
}

TEST(GpuAllreduce, CollectiveInsideAThreadNestIsRejected) {
  DataType f32 = DataType::Float(32);
  Buffer A = Buffer::make("A", f32, {64}), B = Buffer::make("B", f32, {64});
  Var bx("bx"), tx("tx"), each("t");
  Expr all = Call::make(f32, Intrinsic::ThreadAllreduce, {StringImm::make("sum"), IntImm::make(DataType::Int(32), 32), each, BufferLoad::make(A, {bx * 32 + each})});
  Stmt nest = For::make(tx, 0, 32, ForKind::ThreadBinding, BufferStore::make(B, all, {bx * 32 + tx}), "threadIdx.x");
  PrimFunc f = PrimFunc::make("bad", {Param{A->data, A}, Param{B->data, B}}, For::make(bx, 0, 2, ForKind::ThreadBinding, nest, "blockIdx.x"));
  expect_error([&] { pass::verify_gpu_kernel(f); }, {"thread_allreduce inside a threadIdx-bound loop", "stands at block level"});
}

TEST(GpuAllreduce, UpdateThatIsNoReducerIsRejected) {
  PrimFunc f = row_sum_across_threads([](const Buffer& A, const Buffer& B, const Var& bx, const Expr& col) {
    return BufferStore::make(B, BufferLoad::make(B, {bx}) - BufferLoad::make(A, {bx * 90 + col}), {bx});
  });
  expect_error([&] { pass::lower_thread_allreduce(f); },
               {"every thread of loop 'tx' (bound to threadIdx.x) updates the same element of 'B'", "no sum, product, maximum or minimum", "te.sum, te.prod, te.max, te.min"});
}

TEST(GpuAllreduce, StoreThatReadsNothingStaysARace) {
  PrimFunc f = row_sum_across_threads([](const Buffer& A, const Buffer& B, const Var& bx, const Expr& col) { return BufferStore::make(B, BufferLoad::make(A, {bx * 90 + col}), {bx}); });
  EXPECT_TRUE(pass::lower_thread_allreduce(f).same_as(f));
  std::vector<float> a(270, 1.f), b(3, 0.f);
  expect_error([&] { simulate_gpu(f, {a.data(), b.data()}); }, {"data race on global buffer 'B'"});
}

TEST(GpuErrors, UnboundLoopIsNamed) {
  Tensor A = te::placeholder({64, 32}, DataType::Float(32), "A");
  Tensor B = te::compute({64, 32}, [&](const std::vector<Var>& i) { return A({i[0], i[1]}) + 1.0f; }, "B", {"row", "col"});
  Schedule s = te::create_schedule({B});
  s[B].bind(s[B].axis("col"), "threadIdx.x");
  expect_error([&] { lower_gpu(s, {A, B}); }, {"loop 'row'", "not bound", "blockIdx.x"});
}

TEST(GpuErrors, ThreadLoopOutsideBlockAndTooManyThreads) {
  Tensor A = te::placeholder({4096}, DataType::Float(32), "A");
  Tensor B = te::compute({4096}, [&](const std::vector<Var>& i) { return A({i[0]}) * 3.0f; }, "B", {"i"});
  Schedule s = te::create_schedule({B});
  auto [o, in] = s[B].split(s[B].axis("i"), 2048);
  s[B].bind(o, "threadIdx.x"), s[B].bind(in, "blockIdx.x");
  expect_error([&] { lower_gpu(s, {A, B}); }, {"bound to threadIdx.x but lies outside every blockIdx-bound loop"});

  Schedule s2 = te::create_schedule({B});
  auto [o2, in2] = s2[B].split(s2[B].axis("i"), 2048);
  s2[B].bind(o2, "blockIdx.x"), s2[B].bind(in2, "threadIdx.x");
  PrimFunc f = lower_gpu(s2, {A, B});
  expect_error([&] { pass::launch_config(f); }, {"2048", "exceed", "1024"});
}

TEST(GpuErrors, CallWithoutDriverSaysSo) {
  std::string why = cuda::driver_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "this machine has a CUDA driver and a GPU";
  const int64_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  expect_error([&] { cuda::launch("", "k", grid, block, {}); }, {"no CUDA driver (libcuda.so.1) / no GPU on this machine"});
}

}  // namespace
}  // namespace kiln
