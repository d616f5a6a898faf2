// The C API (kiln/runtime/c_api.h) over exported libraries: a small model
// exported by the graph Executor and a kernel library exported by
// Module::export_library, loaded and run through the C functions only, and
// compared bitwise with the in-process results; then every error path:
// status code and message. (Named graph_* so that it links kiln_graph.)
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "kiln/driver/build.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/graph.h"
#include "kiln/ir/op.h"
#include "kiln/runtime/c_api.h"
#include "kiln/runtime/model.h"
#include "file_damage_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace kiln::graph;
namespace fs = std::filesystem;

namespace {

using kiln::graph::testing::random_array;
using kiln::graph::testing::small_graph;
using kiln::graph::testing::TempDir;

const DataType f32 = DataType::Float(32);

// A mutable DLTensor over an NDArray's memory, as a C caller would have.
DLTensor dl(const NDArray& a) { return a.dltensor(); }


// Expects `status` to be `want` and the last error to contain every fragment.
void expect_status(int status, int want, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(status, want) << kiln_status_name(status) << " instead of " << kiln_status_name(want) << ": " << kiln_last_error();
  std::string msg = kiln_last_error();
  for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nmissing: " << f;
}

#define ASSERT_KILN_OK(call) ASSERT_EQ((call), KILN_OK) << kiln_last_error()

class CApiModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    exe_ = new Executor(compile(small_graph()));
    dir_ = new TempDir();
    so_ = *dir_ / "model.so";
    exe_->export_library(so_, "embed");
  }
  static void TearDownTestSuite() {
    delete exe_;
    delete dir_;
  }
  void SetUp() override { ASSERT_KILN_OK(kiln_model_load(so_.c_str(), &model_)); }
  void TearDown() override { kiln_model_free(model_); }

  static Executor* exe_;
  static TempDir* dir_;
  static std::string so_;
  KilnModel* model_ = nullptr;
  std::vector<NDArray> inputs_ = {random_array({1, 3, 8, 8}, 7), random_array({1, 4, 8, 8}, 8)};
};
Executor* CApiModel::exe_ = nullptr;
TempDir* CApiModel::dir_ = nullptr;
std::string CApiModel::so_;

}  // namespace

TEST_F(CApiModel, RunMatchesInProcessExecutor) {
  int n_in = 0, n_out = 0;
  ASSERT_KILN_OK(kiln_model_num_inputs(model_, &n_in));
  ASSERT_KILN_OK(kiln_model_num_outputs(model_, &n_out));
  ASSERT_EQ(n_in, 2);
  ASSERT_EQ(n_out, 2);
  const char* name = nullptr;
  int ndim = 0;
  const int64_t* shape = nullptr;
  DLDataType dtype{};
  ASSERT_KILN_OK(kiln_model_input_info(model_, 1, &name, &ndim, &shape, &dtype));
  EXPECT_STREQ(name, "x2");
  ASSERT_EQ(ndim, 4);
  EXPECT_EQ(std::vector<int64_t>(shape, shape + 4), (std::vector<int64_t>{1, 4, 8, 8}));
  EXPECT_EQ(dtype.code, kDLFloat);
  EXPECT_EQ(dtype.bits, 32);
  ASSERT_KILN_OK(kiln_model_output_info(model_, 0, &name, nullptr, nullptr, nullptr));
  EXPECT_STREQ(name, "y");
  int idx = -1;
  ASSERT_KILN_OK(kiln_model_input_index(model_, "x2", &idx));
  EXPECT_EQ(idx, 1);

  DLTensor x = dl(inputs_[0]), x2 = dl(inputs_[1]);
  ASSERT_KILN_OK(kiln_model_set_input(model_, 0, &x));
  ASSERT_KILN_OK(kiln_model_set_input_by_name(model_, "x2", &x2));
  ASSERT_KILN_OK(kiln_model_run(model_));
  std::vector<NDArray> want = exe_->run(inputs_);
  for (int i = 0; i < 2; ++i) {
    NDArray got = NDArray::empty(want[i].shape(), f32);
    DLTensor out = dl(got);
    ASSERT_KILN_OK(kiln_model_get_output(model_, i, &out));
    EXPECT_EQ(std::memcmp(got.data(), want[i].data(), got.nbytes()), 0) << "output " << i;
    const DLTensor* borrowed = nullptr;
    ASSERT_KILN_OK(kiln_model_output(model_, i, &borrowed));
    ASSERT_EQ(borrowed->ndim, 4);
    EXPECT_EQ(std::vector<int64_t>(borrowed->shape, borrowed->shape + 4), want[i].shape());
    EXPECT_EQ(std::memcmp(borrowed->data, want[i].data(), got.nbytes()), 0) << "output " << i;
  }
}

TEST_F(CApiModel, InputsAreCopiedAndKeptForLaterRuns) {
  NDArray x = random_array({1, 3, 8, 8}, 7);
  DLTensor tx = dl(x), tx2 = dl(inputs_[1]);
  ASSERT_KILN_OK(kiln_model_set_input(model_, 0, &tx));
  ASSERT_KILN_OK(kiln_model_set_input(model_, 1, &tx2));
  std::memset(x.data(), 0, x.nbytes());  // the model holds its own copy
  ASSERT_KILN_OK(kiln_model_run(model_));
  ASSERT_KILN_OK(kiln_model_run(model_));  // inputs stay set
  const DLTensor* y = nullptr;
  ASSERT_KILN_OK(kiln_model_output(model_, 0, &y));
  NDArray want = exe_->run(inputs_)[0];
  EXPECT_EQ(std::memcmp(y->data, want.data(), want.nbytes()), 0);
}

TEST_F(CApiModel, InputErrors) {
  NDArray wrong_shape = random_array({1, 3, 8, 9}, 1);
  DLTensor t = dl(wrong_shape);
  expect_status(kiln_model_set_input(model_, 0, &t), KILN_ERR_MISMATCH,
                {"kiln_model_set_input", "input 'x'", "[1, 3, 8, 9]", "[1, 3, 8, 8]"});
  NDArray wrong_dtype = random_array({1, 3, 8, 8}, 1, DataType::Float(64));
  t = dl(wrong_dtype);
  expect_status(kiln_model_set_input(model_, 0, &t), KILN_ERR_MISMATCH, {"input 'x'", "float64", "float32"});
  t = dl(inputs_[0]);
  expect_status(kiln_model_set_input(model_, 2, &t), KILN_ERR_BAD_ARGUMENT, {"input index 2 is out of range", "2 inputs"});
  expect_status(kiln_model_set_input(model_, -1, &t), KILN_ERR_BAD_ARGUMENT, {"out of range"});
  expect_status(kiln_model_set_input(model_, 0, nullptr), KILN_ERR_BAD_ARGUMENT, {"null"});
  expect_status(kiln_model_set_input(nullptr, 0, &t), KILN_ERR_BAD_ARGUMENT, {"null"});
  expect_status(kiln_model_set_input_by_name(model_, "nope", &t), KILN_ERR_NOT_FOUND, {"no input 'nope'", "x, x2"});
  DLTensor on_gpu = t;
  on_gpu.device = {kDLCUDA, 0};
  expect_status(kiln_model_set_input(model_, 0, &on_gpu), KILN_ERR_MISMATCH, {"cuda:0", "CPU"});
  int64_t strides[4] = {192, 64, 1, 8};  // a transposed view
  DLTensor strided = t;
  strided.strides = strides;
  expect_status(kiln_model_set_input(model_, 0, &strided), KILN_ERR_MISMATCH, {"not compact"});
  // A rank larger than the shape array: the check must not read the shape past its 4 entries,
  // which sit right before a page that faults on any read.
  long page = sysconf(_SC_PAGESIZE);
  auto* pages = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(mprotect(pages + page, page, PROT_NONE), 0);
  auto* guarded_shape = reinterpret_cast<int64_t*>(pages + page) - 4;
  std::copy(t.shape, t.shape + 4, guarded_shape);
  DLTensor huge_rank = t;
  huge_rank.shape = guarded_shape;
  huge_rank.ndim = 100000;
  expect_status(kiln_model_set_input(model_, 0, &huge_rank), KILN_ERR_MISMATCH, {"input 'x'", "100000 dimensions", "4"});
  huge_rank.ndim = 3;
  expect_status(kiln_model_set_input(model_, 0, &huge_rank), KILN_ERR_MISMATCH, {"3 dimensions", "[1, 3, 8, 8]"});
  munmap(pages, 2 * page);
  expect_status(kiln_model_input_info(model_, 5, nullptr, nullptr, nullptr, nullptr), KILN_ERR_BAD_ARGUMENT, {"input index 5"});
  expect_status(kiln_model_output_info(model_, 2, nullptr, nullptr, nullptr, nullptr), KILN_ERR_BAD_ARGUMENT,
                {"output index 2"});
}

TEST_F(CApiModel, RunAndOutputOrderErrors) {
  const DLTensor* y = nullptr;
  expect_status(kiln_model_output(model_, 0, &y), KILN_ERR_STATE, {"has not run"});
  DLTensor x = dl(inputs_[0]);
  ASSERT_KILN_OK(kiln_model_set_input(model_, 0, &x));
  expect_status(kiln_model_run(model_), KILN_ERR_STATE, {"input 1 ('x2') is not set"});
  DLTensor x2 = dl(inputs_[1]);
  ASSERT_KILN_OK(kiln_model_set_input(model_, 1, &x2));
  ASSERT_KILN_OK(kiln_model_run(model_));
  NDArray small = NDArray::empty({1, 4, 8}, f32);
  DLTensor out = dl(small);
  expect_status(kiln_model_get_output(model_, 0, &out), KILN_ERR_MISMATCH, {"output 'y'", "has 3 dimensions", "[1, 4, 8, 8]"});
  expect_status(kiln_model_get_output(model_, 9, &out), KILN_ERR_BAD_ARGUMENT, {"output index 9"});
  expect_status(kiln_model_output(model_, 0, nullptr), KILN_ERR_BAD_ARGUMENT, {"null"});
}

TEST_F(CApiModel, LastErrorIsPerThreadAndKeptAcrossSuccesses) {
  expect_status(kiln_model_run(nullptr), KILN_ERR_BAD_ARGUMENT, {"kiln_model_run", "null"});
  int n = 0;
  ASSERT_KILN_OK(kiln_model_num_inputs(model_, &n));
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_model_run"), std::string::npos);  // not cleared by success
  std::string other;
  std::thread([&] { other = kiln_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(kiln_status_name(KILN_ERR_STATE), "KILN_ERR_STATE");
  EXPECT_STREQ(kiln_status_name(1234), "unknown status");
  EXPECT_EQ(kiln_model_free(nullptr), KILN_OK);
  EXPECT_EQ(kiln_library_free(nullptr), KILN_OK);
}

TEST_F(CApiModel, LoadErrors) {
  TempDir dir;
  KilnModel* m = nullptr;
  std::string missing = dir / "missing.so";
  expect_status(kiln_model_load(missing.c_str(), &m), KILN_ERR_NOT_FOUND, {missing, "No such file"});
  EXPECT_EQ(m, nullptr);
  expect_status(kiln_model_load(nullptr, &m), KILN_ERR_BAD_ARGUMENT, {"null"});
  expect_status(kiln_model_load(so_.c_str(), nullptr), KILN_ERR_BAD_ARGUMENT, {"null"});
  std::string text = dir / "text.so";
  std::ofstream(text) << "not a library\n";
  expect_status(kiln_model_load(text.c_str(), &m), KILN_ERR_INCOMPATIBLE, {"not a shared library"});
  KilnLibrary* lib = nullptr;
  expect_status(kiln_library_load(text.c_str(), &lib), KILN_ERR_INCOMPATIBLE, {"kiln_library_load", "not a shared library"});
  expect_status(kiln_library_load(missing.c_str(), &lib), KILN_ERR_NOT_FOUND, {missing});
  EXPECT_EQ(lib, nullptr);
  // Weights beside the library, then taken away.
  std::string beside = dir / "beside.so";
  exe_->export_library(beside, "beside");
  fs::rename(beside + ".weights", beside + ".w2");
  expect_status(kiln_model_load(beside.c_str(), &m), KILN_ERR_NOT_FOUND, {beside + ".weights", "missing"});
  fs::rename(beside + ".w2", beside + ".weights");
  ASSERT_KILN_OK(kiln_model_load(beside.c_str(), &m));
  kiln_model_free(m);
}

TEST_F(CApiModel, DamagedOrSwappedFilesAreIncompatible) {
  using kiln::testing::flip_bytes;
  TempDir dir;
  KilnModel* m = nullptr;
  KilnLibrary* lib = nullptr;
  std::string a = dir / "a.so", b = dir / "b.so", embed = dir / "embed.so";
  exe_->export_library(a, "beside");
  exe_->export_library(b, "beside");
  exe_->export_library(embed, "embed");
  std::string weights = kiln::testing::read_whole_file(a + ".weights");
  // The weights file of another export of the same model (same size).
  fs::copy_file(b + ".weights", a + ".weights", fs::copy_options::overwrite_existing);
  expect_status(kiln_model_load(a.c_str(), &m), KILN_ERR_INCOMPATIBLE, {"belongs to another export"});
  // A's own weights file, 64 bytes inverted.
  std::ofstream(a + ".weights", std::ios::binary | std::ios::trunc) << weights;
  ASSERT_KILN_OK(kiln_model_load(a.c_str(), &m));
  kiln_model_free(m);
  m = nullptr;
  flip_bytes(a + ".weights", 64 + (weights.size() - 64) / 2);
  expect_status(kiln_model_load(a.c_str(), &m), KILN_ERR_INCOMPATIBLE, {"is corrupt", "checksum"});
  // The same bytes inside the library that embeds them.
  size_t at = kiln::testing::read_whole_file(embed).find(weights.substr(64, 256));
  ASSERT_NE(at, std::string::npos);
  flip_bytes(embed, at + (weights.size() - 64) / 2);
  expect_status(kiln_model_load(embed.c_str(), &m), KILN_ERR_INCOMPATIBLE, {"checksum does not match"});
  // Code.
  kiln::testing::flip_code(b);
  expect_status(kiln_model_load(b.c_str(), &m), KILN_ERR_INCOMPATIBLE, {"checksum does not match"});
  expect_status(kiln_library_load(b.c_str(), &lib), KILN_ERR_INCOMPATIBLE, {"kiln_library_load", "checksum does not match"});
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(lib, nullptr);
}

// ------------------------------------------------------------ kernel libraries

namespace {
// C = exp(A) * 0.5 + B over a symbolic n.
Module build_exp_add() {
  Var n{"n"};
  te::Tensor A = te::placeholder({n}, f32, "A"), B = te::placeholder({n}, f32, "B");
  te::Tensor C = te::compute({n}, [&](const std::vector<Var>& i) { return exp(A(i[0])) * 0.5f + B(i[0]); }, "C");
  te::Schedule s = te::create_schedule({C});
  return kiln::build(s, {A, B, C}, "llvm", "exp_add");
}
}  // namespace

TEST(CApiLibrary, CallMatchesInProcessModuleAndChecksArguments) {
  TempDir dir;
  Module mod = build_exp_add();
  std::string so = dir / "kernels.so";
  mod.export_library(so);
  KilnLibrary* lib = nullptr;
  ASSERT_KILN_OK(kiln_library_load(so.c_str(), &lib));
  int n = 0;
  ASSERT_KILN_OK(kiln_library_num_kernels(lib, &n));
  ASSERT_EQ(n, 1);
  const char* name = nullptr;
  ASSERT_KILN_OK(kiln_library_kernel_name(lib, 0, &name));
  EXPECT_STREQ(name, "exp_add");
  expect_status(kiln_library_kernel_name(lib, 1, &name), KILN_ERR_BAD_ARGUMENT, {"kernel index 1"});
  KilnKernel fn = nullptr;
  ASSERT_KILN_OK(kiln_library_get_kernel(lib, "exp_add", &fn));
  EXPECT_NE(fn, nullptr);
  expect_status(kiln_library_get_kernel(lib, "nope", &fn), KILN_ERR_NOT_FOUND, {"no kernel 'nope'", "exp_add"});

  NDArray a = random_array({37}, 1), b = random_array({37}, 2), c = NDArray::empty({37}, f32), want = NDArray::empty({37}, f32);
  mod.call("exp_add", {a, b, want});
  DLTensor ta = dl(a), tb = dl(b), tc = dl(c);
  DLTensor* args[] = {&ta, &tb, &tc};
  ASSERT_KILN_OK(kiln_kernel_call(lib, "exp_add", args, 3));
  EXPECT_EQ(std::memcmp(c.data(), want.data(), c.nbytes()), 0);
  // The shape scalar passed explicitly as a 0-d tensor.
  std::memset(c.data(), 0, c.nbytes());
  int32_t n_value = 37;
  DLTensor tn{&n_value, {kDLCPU, 0}, 0, {kDLInt, 32, 1}, nullptr, nullptr, 0};
  DLTensor* args4[] = {&ta, &tb, &tc, &tn};
  ASSERT_KILN_OK(kiln_kernel_call(lib, "exp_add", args4, 4));
  EXPECT_EQ(std::memcmp(c.data(), want.data(), c.nbytes()), 0);

  NDArray short_b = random_array({36}, 3);
  DLTensor tsb = dl(short_b);
  DLTensor* bad_shape[] = {&ta, &tsb, &tc};
  expect_status(kiln_kernel_call(lib, "exp_add", bad_shape, 3), KILN_ERR_MISMATCH, {"kiln_kernel_call('exp_add')", "B", "36", "37"});
  n_value = 40;
  expect_status(kiln_kernel_call(lib, "exp_add", args4, 4), KILN_ERR_MISMATCH, {"40", "37"});
  NDArray d64 = random_array({37}, 4, DataType::Float(64));
  DLTensor td = dl(d64);
  DLTensor* bad_dtype[] = {&ta, &td, &tc};
  expect_status(kiln_kernel_call(lib, "exp_add", bad_dtype, 3), KILN_ERR_MISMATCH, {"B", "float64", "float32"});
  expect_status(kiln_kernel_call(lib, "exp_add", args, 1), KILN_ERR_MISMATCH, {"exp_add"});
  expect_status(kiln_kernel_call(lib, "nope", args, 3), KILN_ERR_NOT_FOUND, {"no kernel 'nope'", "exp_add"});
  expect_status(kiln_kernel_call(lib, "exp_add", nullptr, 3), KILN_ERR_BAD_ARGUMENT, {"null"});
  DLTensor* null_arg[] = {&ta, nullptr, &tc};
  expect_status(kiln_kernel_call(lib, "exp_add", null_arg, 3), KILN_ERR_BAD_ARGUMENT, {"argument 1 is null"});

  // A kernel library is not a model.
  KilnModel* m = nullptr;
  expect_status(kiln_model_load(so.c_str(), &m), KILN_ERR_INCOMPATIBLE, {"kiln_model_load", so});
  kiln_library_free(lib);
}
