// Module::export_library and the load-time checks of Module::load: a module
// built by kiln::build written as a .so, loaded back and compared with the
// in-process module; and the libraries Module::load must refuse with a clear
// message (wrong CPU features, truncated, not kiln's, no compiler).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/driver/build.h"
#include "kiln/ir/op.h"
#include "kiln/runtime/library_info.h"
#include "kiln/runtime/library_seal.h"
#include "kiln/support/error.h"
#include "file_damage_util.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using te::Tensor;
const DataType f32 = DataType::Float(32);

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected kiln::Error containing '" << *fragments.begin() << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& s : fragments) EXPECT_NE(msg.find(s), std::string::npos) << "message: " << msg << "\nmissing: " << s;
  }
}

// A temporary directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kiln_export_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) setenv(name.c_str(), value, 1);
    else unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

// C = exp(A) * 0.5 + B over a symbolic n, its outer loop parallel: the
// library needs libm and kiln_parallel_launch from libkiln_runtime.
struct ExpAdd {
  Var n{"n"};
  Tensor A = te::placeholder({n}, f32, "A"), B = te::placeholder({n}, f32, "B");
  Tensor C = te::compute({n}, [&](const std::vector<Var>& i) { return exp(A(i[0])) * 0.5f + B(i[0]); }, "C");

  Module build(const std::string& target, const std::string& name = "exp_add") const {
    te::Schedule s = te::create_schedule({C});
    auto& st = s[C];
    auto [outer, inner] = st.split(st.axis("i"), 64);
    st.parallel(outer);
    st.vectorize(inner);
    return kiln::build(s, {A, B, C}, target, name);
  }
};

#ifdef KILN_WITH_LLVM
bool host_has(const std::string& feature) {
  std::vector<std::string> host = host_cpu_features();
  return std::find(host.begin(), host.end(), feature) != host.end();
}

TEST(Export, RoundTripMatchesInProcessModule) {
  TempDir dir;
  Module mod = ExpAdd().build("llvm");
  std::string so = dir / "libexp_add.so";
  mod.export_library(so);
  Module loaded = Module::load(so);
  EXPECT_EQ(loaded.kernels(), mod.kernels());

  for (int64_t n : {1, 63, 1000}) {
    std::vector<float> a = testing::random_vector(n, 1, -3.f, 3.f), b = testing::random_vector(n, 2);
    NDArray A = NDArray::empty({n}, f32), B = NDArray::empty({n}, f32);
    NDArray c1 = NDArray::empty({n}, f32), c2 = NDArray::empty({n}, f32);
    std::copy(a.begin(), a.end(), A.data_as<float>());
    std::copy(b.begin(), b.end(), B.data_as<float>());
    mod.call("exp_add", {A, B, c1});
    loaded.call("exp_add", {A, B, c2});
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(c1.data_as<float>()[i], c2.data_as<float>()[i]) << "n=" << n << " i=" << i;
      EXPECT_NEAR(c2.data_as<float>()[i], std::exp(a[i]) * 0.5f + b[i], 1e-4f * (1 + std::abs(c2.data_as<float>()[i])));
    }
  }
  // Shape checks come with the metadata.
  NDArray short_b = NDArray::empty({3}, f32), x = NDArray::empty({4}, f32);
  expect_error([&] { loaded.call("exp_add", {x, short_b, x}); }, {"exp_add", "B"});
  // A loaded module exports as a copy of its file.
  std::string copy = dir / "copy.so";
  loaded.export_library(copy);
  EXPECT_EQ(Module::load(copy).names(), std::vector<std::string>{"exp_add"});
  // No temporary files are left beside the library.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
}

TEST(Export, OverwritesAnExistingLibrary) {
  TempDir dir;
  std::string so = dir / "lib.so";
  ExpAdd().build("llvm", "first").export_library(so);
  ExpAdd().build("llvm", "second").export_library(so);
  EXPECT_EQ(Module::load(so).names(), std::vector<std::string>{"second"});
}

// AVX-512 code on a host without AVX-512 must be refused, never SIGILL.
TEST(Export, RefusesCpuFeaturesTheHostLacks) {
  TempDir dir;
  std::string so = dir / "libavx512.so";
  ExpAdd().build("llvm -mcpu=skylake-avx512").export_library(so);
  if (!host_has("avx512f")) {
    expect_error([&] { Module::load(so); }, {"features this machine lacks", "avx512f", "skylake-avx512", so});
  }
  // On any host: hide the features (the loader's test-only hook).
  {
    ScopedEnv hide("KILN_TEST_HIDE_CPU_FEATURES", "avx512f,avx512bw");
    expect_error([&] { Module::load(so); }, {"features this machine lacks: ", "avx512bw", "avx512f"});
  }
  // A library for this host loads, and hiding a feature it needs refuses it.
  std::string host_so = dir / "libhost.so";
  ExpAdd().build("llvm -mcpu=x86-64 -mattr=+avx2,+fma").export_library(host_so);
  if (host_has("avx2") && host_has("fma")) {
    EXPECT_NO_THROW(Module::load(host_so));
  }
  ScopedEnv hide("KILN_TEST_HIDE_CPU_FEATURES", "fma");
  expect_error([&] { Module::load(host_so); }, {"lacks: fma"});
}

TEST(Export, RefusesTruncatedLibrary) {
  TempDir dir;
  std::string so = dir / "lib.so", cut = dir / "cut.so";
  ExpAdd().build("llvm").export_library(so);
  for (uintmax_t keep : {uintmax_t(10), uintmax_t(100), fs::file_size(so) / 2, fs::file_size(so) - 1}) {
    fs::copy_file(so, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, keep);
    expect_error([&] { Module::load(cut); }, {"cannot load kernel library", cut});
  }
  fs::resize_file(cut, 50);
  expect_error([&] { Module::load(cut); }, {"truncated"});
}

TEST(Export, RefusesLibraryWithDamagedCode) {
  TempDir dir;
  std::string so = dir / "lib.so";
  ExpAdd().build("llvm").export_library(so);
  testing::flip_code(so);
  expect_error([&] { Module::load(so); }, {"cannot load kernel library", so, "checksum does not match"});
}

TEST(Export, RefusesLibraryThatIsNotKilns) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&std::cos)), &info), 0);
  expect_error([&] { Module::load(info.dli_fname); }, {"not a library exported by kiln"});
  TempDir dir;
  std::ofstream(dir / "text.so") << "not an ELF file at all";
  expect_error([&] { Module::load(dir / "text.so"); }, {"no ELF header"});
}

TEST(Export, MissingCompilerIsAClearError) {
  TempDir dir;
  Module mod = ExpAdd().build("llvm");
  std::string so = dir / "lib.so";
  {
    ScopedEnv cc("CC", "/nonexistent/bin/kiln-no-such-cc");
    expect_error([&] { mod.export_library(so); }, {"no C compiler", "$CC is '/nonexistent/bin/kiln-no-such-cc'", "set the environment variable CC"});
  }
  EXPECT_FALSE(fs::exists(so));
  EXPECT_TRUE(fs::is_empty(dir.path)) << "a failed export left files behind";
  {
    ScopedEnv cc("CC", "false");  // a "compiler" that fails: its exit status is reported
    expect_error([&] { mod.export_library(so); }, {"linking with false failed"});
  }
  EXPECT_TRUE(fs::is_empty(dir.path));
  expect_error([&] { mod.export_library(dir / "no/such/dir/lib.so"); }, {"does not exist"});
}

TEST(Export, RefusesOtherRuntimeAbi) {
  // A hand-made library claiming a future ABI version.
  TempDir dir;
  std::string src = dir / "k.c", so = dir / "k.so";
  std::ofstream(src) << "const char* kiln_library_info = \"{\\\"abi_version\\\": 99, \\\"kiln_version\\\": \\\"9.0.0\\\"}\";\n"
                        "const char* kiln_module_metadata = \"[]\";\n";
  if (std::system(("cc -shared -fPIC -o " + so + " " + src + " 2>/dev/null").c_str()) != 0) GTEST_SKIP() << "no C compiler (cc)";
  seal_library(so, new_export_id());
  expect_error([&] { Module::load(so); }, {"runtime ABI version 99", "kiln 9.0.0", std::to_string(kRuntimeAbiVersion)});
}
#endif

TEST(LibraryInfo, JsonRoundTripAndErrors) {
  LibraryInfo info;
  info.kiln_version = "0.1.0";
  info.triple = "x86_64-pc-linux-gnu";
  info.cpu = "znver3";
  info.features = {"avx2", "fma"};
  LibraryInfo back = LibraryInfo::from_json(info.to_json());
  EXPECT_EQ(back.abi_version, kRuntimeAbiVersion);
  EXPECT_EQ(back.features, info.features);
  EXPECT_EQ(back.cpu, "znver3");
  expect_error([] { LibraryInfo::from_json("{"); }, {"not valid JSON"});
  expect_error([] { LibraryInfo::from_json("{}"); }, {"abi_version"});
  expect_error([] { LibraryInfo::from_json(R"({"abi_version": 1, "features": [1]})"); }, {"features"});
  // Names the runtime cannot detect are not checked.
  EXPECT_TRUE(missing_cpu_features({"fast-gather", "64bit"}).empty());
}

}  // namespace
}  // namespace kiln
