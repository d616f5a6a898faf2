// AMX tiles (kiln/ops/cpu_amx.h, kiln/pass/amx.h, codegen_amx.cpp): the
// schedule of an int8 quad / bfloat16 pair matmul on an AMX target, its
// nest equal to a naive loop in the interpreter (where it is plain loops),
// tdpbusd / tdpbf16ps in the assembly for sapphirerapids and none for
// targets without AMX, and run (exact for int8) where the host has AMX.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>

#include <cstring>
#include <fstream>
#include <random>

#include "kiln/codegen/llvm.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/cpu_amx.h"
#include "kiln/ops/graph_nn.h"
#include "kiln/ops/layout.h"
#include "kiln/ops/task.h"
#include "kiln/runtime/amx.h"
#include "kiln/runtime/c_runtime_api.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "test_util.h"

namespace kiln {
namespace {

const char* const kAmx = "llvm -mcpu=sapphirerapids -num-cores=2";

// Whether this machine's CPU lists AMX (Linux's flags), independent of kiln's target.
bool cpu_lists_amx() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) return line.find(" amx_tile") != std::string::npos && line.find(" amx_int8") != std::string::npos;
  return false;
}

TEST(Amx, TargetsHaveAmxFromTheirCpuOrAttributesNeverFromTheHost) {
  EXPECT_TRUE(ops::target_has_amx(Target::parse(kAmx), "i8"));
  EXPECT_TRUE(ops::target_has_amx(Target::parse(kAmx), "bf16"));
  EXPECT_TRUE(ops::target_has_amx(Target::parse("llvm -mcpu=skylake-avx512 -mattr=+amx-tile,+amx-int8"), "i8"));
  EXPECT_FALSE(ops::target_has_amx(Target::parse("llvm -mcpu=skylake-avx512 -mattr=+amx-tile,+amx-int8"), "bf16"));
  for (const char* t : {"llvm -mcpu=skylake-avx512", "llvm -mcpu=znver4", "llvm -mcpu=znver3", "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"})
    EXPECT_FALSE(ops::target_has_amx(Target::parse(t), "i8")) << t;
  EXPECT_EQ(Target::host().has_feature("amx-tile"), cpu_lists_amx());
}

// C[M, N] (int32) = A4[M, Q] x B4[Q, N] over byte quads, A unsigned, B signed; with an epilogue (C * 3 - 1) when asked.
struct Case {
  te::Tensor A, B, C;
  int64_t M, Q, N;
};

Case int8_case(int64_t M, int64_t Q, int64_t N, bool epilogue) {
  Case c{{}, {}, {}, M, Q, N};
  c.A = te::placeholder(ops::shape_exprs({M, Q}), DataType::UInt(32), "A4");
  c.B = te::placeholder(ops::shape_exprs({Q, N}), DataType::Int(32), "B4");
  te::Tensor dot = ops::matmul_nd(c.A, c.B, "matmul_i8x4", dot_i8x4);
  c.C = !epilogue ? dot : te::compute(dot.shape(), [&](const std::vector<Var>& i) {
    return dot(std::vector<Expr>(i.begin(), i.end())) * make_const(DataType::Int(32), 3) - make_const(DataType::Int(32), 1);
  }, "epilogue");
  return c;
}

std::vector<int32_t> naive_int8(const Case& c, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, bool epilogue) {
  std::vector<int32_t> out(c.M * c.N, 0);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      int32_t s = 0;
      for (int64_t q = 0; q < c.Q; ++q)
        for (int byte = 0; byte < 4; ++byte)
          s += static_cast<int32_t>((a[i * c.Q + q] >> (8 * byte)) & 0xff) * static_cast<int8_t>((b[q * c.N + j] >> (8 * byte)) & 0xff);
      out[i * c.N + j] = epilogue ? s * 3 - 1 : s;
    }
  return out;
}

PrimFunc lower_amx(const Case& c, const Target& t) {
  std::string why;
  auto sch = ops::amx_schedule(ops::make_task({c.A, c.B, c.C}, t, "amx_case"), &why);
  if (!sch) throw Error("no amx schedule: " + why);
  return te::lower(*sch, {c.A, c.B, c.C}, "amx_case");
}

TEST(Amx, Int8BlocksMatchANaiveLoopAndUseTdpbusd) {
  Target t = Target::parse(kAmx);
  bool run = Target::host().has_feature("amx-tile") && Target::host().has_feature("amx-int8");
  // Whole 32 x 32 blocks, 16-row / 24-column blocks (a partial column tile), K of one and several steps.
  // 256 x 64: two row blocks of 32 per tile configuration (the loop over blocks in the nest).
  for (auto [M, Q, N, epi] :
       {std::tuple<int64_t, int64_t, int64_t, bool>{64, 32, 64, false}, {48, 16, 48, true}, {16, 64, 24, true}, {256, 32, 64, true}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " Q=" + std::to_string(Q) + " N=" + std::to_string(N));
    Case c = int8_case(M, Q, N, epi);
    PrimFunc f = lower_amx(c, t);
    std::mt19937 rng(static_cast<uint32_t>(M * Q + N));
    std::vector<uint32_t> a(M * Q), b(Q * N);
    for (auto& v : a) v = rng();
    for (auto& v : b) v = rng();
    std::vector<int32_t> want = naive_int8(c, a, b, epi), got(want.size(), -7);
    interpret(f, {a.data(), b.data(), got.data()});
    EXPECT_EQ(got, want) << "interpreter (the marked nest as plain loops)";
    std::string assembly = codegen::emit_assembly({f}, t);
    EXPECT_NE(assembly.find("tdpbusd"), std::string::npos);
    EXPECT_NE(assembly.find("ldtilecfg"), std::string::npos);
    EXPECT_NE(assembly.find("tilerelease"), std::string::npos);
    if (!run) continue;
    codegen::JitModule jit = codegen::jit_compile({f}, t);
    std::vector<int32_t> compiled(want.size(), -7);
    std::vector<void*> args = {a.data(), b.data(), compiled.data()};
    ASSERT_EQ(jit.get_function("amx_case")(args.data()), 0) << kiln_get_last_error();
    EXPECT_EQ(compiled, want) << "compiled";
  }
  if (!run) GTEST_SKIP() << "this host has no AMX (amx_tile, amx_int8): compiled and checked the assembly, did not run";
}

// A process whose kernel refuses the tile state: arch_prctl(ARCH_REQ_XCOMP_PERM)
// fails with EPERM (a seccomp filter, kept across exec, so that the request
// runs fresh in the exec'd child; the loader's other arch_prctl calls pass).
void refuse_arch_prctl() {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_arch_prctl, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x1023, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) _exit(3);
}

// Run in the refused child only (KILN_AMX_REFUSED set): an AMX kernel returns the runtime's error, never SIGILL.
TEST(Amx, RefusedChildGetsAnErrorNotSigill) {
  if (!getenv("KILN_AMX_REFUSED")) GTEST_SKIP() << "runs in the child of RefusedPermissionIsAKernelError";
  Case c = int8_case(64, 32, 64, false);
  PrimFunc f = lower_amx(c, Target::parse(kAmx));
  codegen::JitModule jit = codegen::jit_compile({f}, Target::parse(kAmx));
  std::vector<uint32_t> a(64 * 32, 1), b(32 * 64, 1);
  std::vector<int32_t> out(64 * 64, 0);
  std::vector<void*> args = {a.data(), b.data(), out.data()};
  EXPECT_NE(jit.get_function("amx_case")(args.data()), 0);
  EXPECT_NE(std::string(kiln_get_last_error()).find("Linux refused them"), std::string::npos) << kiln_get_last_error();
  EXPECT_EQ(kiln_amx_request(), -1);
}

TEST(Amx, RefusedPermissionIsAKernelError) {
  if (!(Target::host().has_feature("amx-tile") && Target::host().has_feature("amx-int8")))
    GTEST_SKIP() << "this host has no AMX: nothing to refuse";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    refuse_arch_prctl();
    setenv("KILN_AMX_REFUSED", "1", 1);
    execl("/proc/self/exe", "llvm_amx_test", "--gtest_filter=Amx.RefusedChildGetsAnErrorNotSigill", static_cast<char*>(nullptr));
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's test failed (3: no seccomp filter, 4: no exec)";
}

TEST(Amx, TargetsWithoutAmxGetNoAmxScheduleNorTileCode) {
  Case c = int8_case(64, 32, 64, true);
  for (const char* name : {"llvm -mcpu=skylake-avx512", "llvm -mcpu=znver4"}) {
    Target t = Target::parse(name);
    std::string why;
    EXPECT_FALSE(ops::amx_schedule(ops::make_task({c.A, c.B, c.C}, t, "amx_case"), &why)) << name;
    EXPECT_NE(why.find("no AMX"), std::string::npos) << why;
    // A nest marked amx by hand still builds nothing of AMX there: a clear error.
    auto sch = ops::amx_schedule(ops::make_task({c.A, c.B, c.C}, Target::parse(kAmx), "amx_case"));
    ASSERT_TRUE(sch);
    PrimFunc f = te::lower(*sch, {c.A, c.B, c.C}, "amx_case");
    EXPECT_TRUE(testing::throws_with([&] { codegen::emit_assembly({f}, t); }, "has no amx-int8")) << name;
  }
}

TEST(Amx, ShapesTilesCannotTakeFallBackWithAReason) {
  std::string why;
  Case odd_k = int8_case(64, 20, 64, false);
  EXPECT_FALSE(ops::amx_schedule(ops::make_task({odd_k.A, odd_k.B, odd_k.C}, Target::parse(kAmx), "amx_case"), &why));
  EXPECT_NE(why.find("multiple of 16 words"), std::string::npos) << why;
  Case prime = int8_case(67, 16, 64, false);
  EXPECT_FALSE(ops::amx_schedule(ops::make_task({prime.A, prime.B, prime.C}, Target::parse(kAmx), "amx_case"), &why));
  EXPECT_NE(why.find("no divisor"), std::string::npos) << why;
  // B read transposed (B[n, q]): its tile rows would not be contiguous; the lowered nest is checked and refused.
  te::Tensor A = te::placeholder(ops::shape_exprs({64, 32}), DataType::UInt(32), "A4");
  te::Tensor Bt = te::placeholder(ops::shape_exprs({64, 32}), DataType::Int(32), "B4t");
  IterVar q = te::reduce_axis(Range(0, ops::index_imm(32)), "q");
  te::Tensor C = te::compute(ops::shape_exprs({64, 64}), [&](const std::vector<Var>& i) {
    return te::sum(dot_i8x4(A(std::vector<Expr>{i[0], q.var()}), Bt(std::vector<Expr>{i[1], q.var()})), {q});
  }, "matmul_bt");
  EXPECT_FALSE(ops::amx_schedule(ops::make_task({A, Bt, C}, Target::parse(kAmx), "amx_bt"), &why));
  EXPECT_NE(why.find("stride other than 1"), std::string::npos) << why;
}

// bfloat16 bits of a float (round to nearest even).
uint16_t bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float widen(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(Amx, Bf16PanelsMatchADoubleLoopAndUseTdpbf16ps) {
  const int64_t M = 64, Q = 32, N = 64, nb = 32;
  Target t = Target::parse(kAmx);
  te::Tensor A = te::placeholder(ops::shape_exprs({M, Q}), DataType::UInt(32), "A2");
  te::Tensor P = te::placeholder(ops::shape_exprs({N / nb, Q, nb}), DataType::UInt(32), "panels");
  te::Tensor C = ops::matmul_packed_b(A, P, "matmul_bf16", dot_bf16x2);
  std::string why;
  auto sch = ops::amx_schedule(ops::make_task({A, P, C}, t, "amx_bf16"), &why);
  ASSERT_TRUE(sch) << why;
  PrimFunc f = te::lower(*sch, {A, P, C}, "amx_bf16");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> a(M * 2 * Q), b(2 * Q * N);
  for (auto& v : a) v = bf16(normal(rng));
  for (auto& v : b) v = bf16(normal(rng));
  std::vector<uint32_t> ap(M * Q), pp(N / nb * Q * nb);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t q = 0; q < Q; ++q) ap[i * Q + q] = a[i * 2 * Q + 2 * q] | (uint32_t(a[i * 2 * Q + 2 * q + 1]) << 16);
  for (int64_t q = 0; q < Q; ++q)
    for (int64_t j = 0; j < N; ++j) pp[((j / nb) * Q + q) * nb + j % nb] = b[2 * q * N + j] | (uint32_t(b[(2 * q + 1) * N + j]) << 16);
  std::vector<double> want(M * N, 0.0), scale(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < 2 * Q; ++k) {
        double p = double(widen(a[i * 2 * Q + k])) * widen(b[k * N + j]);
        want[i * N + j] += p;
        scale[i * N + j] += std::abs(p);
      }
  auto check = [&](const std::vector<float>& got, const char* what) {
    for (size_t e = 0; e < got.size(); ++e) ASSERT_NEAR(got[e], want[e], 1e-5 * scale[e] + 1e-6) << what << " at " << e;
  };
  std::vector<float> got(M * N, -1.f);
  interpret(f, {ap.data(), pp.data(), got.data()});
  check(got, "interpreter");
  EXPECT_NE(codegen::emit_assembly({f}, t).find("tdpbf16ps"), std::string::npos);
  if (!Target::host().has_feature("amx-bf16")) GTEST_SKIP() << "this host has no AMX-BF16: compiled and checked the assembly, did not run";
  codegen::JitModule jit = codegen::jit_compile({f}, t);
  std::vector<float> compiled(M * N, -1.f);
  std::vector<void*> args = {ap.data(), pp.data(), compiled.data()};
  ASSERT_EQ(jit.get_function("amx_bf16")(args.data()), 0) << kiln_get_last_error();
  check(compiled, "compiled");
}

}  // namespace
}  // namespace kiln
