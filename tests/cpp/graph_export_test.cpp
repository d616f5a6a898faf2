// Exported models (Executor::export_library, ModelRunner::load): a small
// Conv+Relu+Add graph exported with embedded and beside weights, loaded by
// kiln_runtime alone and compared bitwise with the in-process executor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "kiln/graph/executor.h"
#include "kiln/graph/graph.h"
#include "kiln/runtime/model.h"
#include "kiln/support/error.h"
#include "error_of.h"
#include "file_damage_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace kiln::graph;
namespace fs = std::filesystem;

namespace {

using kiln::graph::testing::random_array;
using kiln::graph::testing::small_graph;
using kiln::graph::testing::TempDir;


void expect_bitwise_equal(const std::vector<NDArray>& a, const std::vector<NDArray>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape());
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()), 0) << "output " << i;
  }
}

using kiln::testing::error_of;

class GraphExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { exe_ = new Executor(compile(small_graph())); }
  static void TearDownTestSuite() { delete exe_; }
  static Executor* exe_;
  std::vector<NDArray> inputs_ = {random_array({1, 3, 8, 8}, 7), random_array({1, 4, 8, 8}, 8)};
};
Executor* GraphExport::exe_ = nullptr;

}  // namespace

TEST_F(GraphExport, EmbeddedRoundTrip) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string();
  exe_->export_library(so, "embed");
  EXPECT_FALSE(fs::exists(so + ".weights"));
  ModelRunner m = ModelRunner::load(so);
  ASSERT_EQ(m.inputs().size(), 2u);
  EXPECT_EQ(m.inputs()[0].name, "x");
  EXPECT_EQ(m.inputs()[1].shape, (std::vector<int64_t>{1, 4, 8, 8}));
  ASSERT_EQ(m.outputs().size(), 2u);
  EXPECT_EQ(m.outputs()[0].name, "y");
  EXPECT_EQ(m.outputs()[1].name, "z");
  expect_bitwise_equal(m.run(inputs_), exe_->run(inputs_));
  // Nothing left behind but the library.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST_F(GraphExport, BesideRoundTrip) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string();
  exe_->export_library(so, "beside");
  ASSERT_TRUE(fs::exists(so + ".weights"));
  expect_bitwise_equal(ModelRunner::load(so).run(inputs_), exe_->run(inputs_));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 2);
}

TEST_F(GraphExport, MissingAndWrongWeightsFile) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string();
  exe_->export_library(so, "beside");
  fs::rename(so + ".weights", so + ".w2");
  std::string msg = error_of([&] { ModelRunner::load(so); });
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find(so + ".weights"), std::string::npos) << msg;
  // Cut short by one byte.
  fs::copy_file(so + ".w2", so + ".weights");
  fs::resize_file(so + ".weights", fs::file_size(so + ".w2") - 1);
  msg = error_of([&] { ModelRunner::load(so); });
  EXPECT_NE(msg.find("bytes"), std::string::npos) << msg;
  // Not a weights file.
  { std::ofstream(so + ".weights", std::ios::trunc) << "hello"; }
  msg = error_of([&] { ModelRunner::load(so); });
  EXPECT_NE(msg.find("not a kiln weights file"), std::string::npos) << msg;
}

// Files damaged or swapped after export: refused by their checksums and
// export ids before anything runs, never loaded with wrong weights.
TEST_F(GraphExport, RefusesDamagedEmbeddedWeights) {
  TempDir dir;
  std::string embed = (dir.path / "embed.so").string(), beside = (dir.path / "beside.so").string();
  exe_->export_library(embed, "embed");
  exe_->export_library(beside, "beside");
  // The data of the weights file (after its 64-byte header) is the blob the embedding library carries.
  std::string blob = kiln::testing::read_whole_file(beside + ".weights").substr(64);
  size_t at = kiln::testing::read_whole_file(embed).find(blob.substr(0, 256));
  ASSERT_NE(at, std::string::npos) << "the embedded weights are not in the library";
  kiln::testing::flip_bytes(embed, at + blob.size() / 2);
  std::string msg = error_of([&] { ModelRunner::load(embed); });
  EXPECT_NE(msg.find("checksum does not match"), std::string::npos) << msg;
  EXPECT_NE(msg.find(embed), std::string::npos) << msg;
}

TEST_F(GraphExport, RefusesDamagedWeightsFile) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string();
  exe_->export_library(so, "beside");
  kiln::testing::flip_bytes(so + ".weights", 64 + (fs::file_size(so + ".weights") - 64) / 2);
  std::string msg = error_of([&] { ModelRunner::load(so); });
  EXPECT_NE(msg.find("weights file '" + so + ".weights' is corrupt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
}

TEST_F(GraphExport, RefusesWeightsFileOfAnotherExport) {
  TempDir dir;
  std::string a = (dir.path / "a.so").string(), b = (dir.path / "b.so").string();
  exe_->export_library(a, "beside");
  exe_->export_library(b, "beside");
  ASSERT_EQ(fs::file_size(a + ".weights"), fs::file_size(b + ".weights"));
  fs::copy_file(b + ".weights", a + ".weights", fs::copy_options::overwrite_existing);
  std::string msg = error_of([&] { ModelRunner::load(a); });
  EXPECT_NE(msg.find("belongs to another export"), std::string::npos) << msg;
  // Both export ids are named: the file's (in its header) and the library's.
  std::string b_id = kiln::testing::read_whole_file(b + ".weights").substr(16, 32);
  EXPECT_NE(msg.find("export id " + b_id), std::string::npos) << msg;
}

TEST_F(GraphExport, RefusesDamagedCodeAndTruncatedLibrary) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string(), cut = (dir.path / "cut.so").string();
  exe_->export_library(so);
  fs::copy_file(so, cut);
  kiln::testing::flip_code(so);
  std::string msg = error_of([&] { ModelRunner::load(so); });
  EXPECT_NE(msg.find("checksum does not match"), std::string::npos) << msg;
  fs::resize_file(cut, fs::file_size(cut) - 1);
  msg = error_of([&] { ModelRunner::load(cut); });
  EXPECT_NE(msg.find("cannot load kernel library '" + cut + "'"), std::string::npos) << msg;
}

TEST_F(GraphExport, WrongInputsThroughLoadedModel) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string();
  exe_->export_library(so);
  ModelRunner m = ModelRunner::load(so);
  std::string msg = error_of([&] { m.run({random_array({1, 3, 9, 8}, 1), inputs_[1]}); });
  EXPECT_NE(msg.find("input 'x' has shape [1, 3, 9, 8]; the model was compiled for [1, 3, 8, 8]"), std::string::npos) << msg;
  msg = error_of([&] { m.run({inputs_[0]}); });
  EXPECT_NE(msg.find("the model takes 2 inputs, got 1"), std::string::npos) << msg;
  msg = error_of([&] { m.run({NDArray::empty({1, 3, 8, 8}, DataType::Int(32)), inputs_[1]}); });
  EXPECT_NE(msg.find("dtype int32"), std::string::npos) << msg;
}

TEST_F(GraphExport, BadModeAndCopyOfLoadedLibrary) {
  TempDir dir;
  std::string so = (dir.path / "model.so").string();
  std::string msg = error_of([&] { exe_->export_library(so, "inside"); });
  EXPECT_NE(msg.find("weights must be"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(so));
  // Module::load reads a model library as a kernel library; its export is a copy that still loads as a model.
  exe_->export_library(so);
  Module kernels = Module::load(so);
  std::string k = (dir.path / "kernels.so").string();
  kernels.export_library(k);
  EXPECT_NO_THROW(ModelRunner::load(k));
}
