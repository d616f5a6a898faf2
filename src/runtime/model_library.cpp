// Model libraries (model.h): the plan <-> JSON, the weights file, and
// ModelRunner::load.
#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/runtime/model.h"
#include "kiln/support/error.h"

namespace kiln {

using json = nlohmann::json;

namespace {

constexpr char kWeightsMagic[8] = {'K', 'I', 'L', 'N', 'W', 'T', 'S', '1'};
constexpr int64_t kWeightsHeader = 64;  // magic, size, padding: the data stays 64-byte aligned
constexpr int64_t kAlign = 64;

const char* kind_name(ModelBuffer::Kind k) {
  switch (k) {
    case ModelBuffer::Kind::Input: return "input";
    case ModelBuffer::Kind::Constant: return "constant";
    case ModelBuffer::Kind::Arena: return "arena";
    case ModelBuffer::Kind::Output: return "output";
  }
  return "?";
}

json tensor_json(const std::string& name, const std::vector<int64_t>& shape, DataType dtype) {
  return json{{"name", name}, {"shape", shape}, {"dtype", dtype.str()}};
}

}  // namespace

std::string ModelPlan::to_json(const std::vector<int64_t>& constant_offsets, const std::string& weights_mode,
                               int64_t weights_bytes) const {
  KILN_CHECK(constant_offsets.size() == constants.size()) << "ModelPlan::to_json: one offset per constant";
  json j;
  j["format"] = 1;
  for (const ModelTensor& t : inputs) j["inputs"].push_back(tensor_json(t.name, t.shape, t.dtype));
  for (const ModelTensor& t : outputs) j["outputs"].push_back(tensor_json(t.name, t.shape, t.dtype));
  j["buffers"] = json::array();
  for (const ModelBuffer& b : buffers)
    j["buffers"].push_back({{"kind", kind_name(b.kind)}, {"index", b.index}, {"offset", b.offset}, {"shape", b.shape}, {"dtype", b.dtype.str()}});
  j["steps"] = json::array();
  for (const ModelStep& s : steps) j["steps"].push_back({{"name", s.name}, {"kernel", s.kernel}, {"args", s.args}, {"flop", s.flop}});
  j["kernel_names"] = kernel_names;
  j["constants"] = json::array();
  for (size_t i = 0; i < constants.size(); ++i)
    j["constants"].push_back({{"offset", constant_offsets[i]}, {"shape", constants[i].shape()}, {"dtype", constants[i].dtype().str()}});
  j["output_buffers"] = output_buffers;
  j["arena_bytes"] = arena_bytes;
  j["weights"] = {{"mode", weights_mode}, {"bytes", weights_bytes}};
  return j.dump();
}

WeightsLayout layout_weights(const std::vector<NDArray>& constants) {
  WeightsLayout l;
  for (const NDArray& c : constants) {
    l.offsets.push_back(l.bytes);
    l.bytes += (c.nbytes() + kAlign - 1) / kAlign * kAlign;
  }
  return l;
}

void write_weights(const std::string& path, const std::vector<NDArray>& constants, const WeightsLayout& layout, bool header) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_USER_CHECK(out) << "export_library: cannot write the weights file '" << path << "'";
  if (header) {
    char h[kWeightsHeader] = {};
    std::memcpy(h, kWeightsMagic, sizeof(kWeightsMagic));
    uint64_t n = static_cast<uint64_t>(layout.bytes);
    for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(h, sizeof(h));
  }
  static const char zeros[kAlign] = {};
  int64_t at = 0;
  for (size_t i = 0; i < constants.size(); ++i) {
    KILN_CHECK(constants[i].is_contiguous() && constants[i].device().device_type == kDLCPU)
        << "export_library: constant " << i << " is not a compact CPU array";
    out.write(zeros, layout.offsets[i] - at);
    out.write(static_cast<const char*>(constants[i].data()), constants[i].nbytes());
    at = layout.offsets[i] + constants[i].nbytes();
  }
  out.write(zeros, layout.bytes - at);
  out.flush();
  KILN_USER_CHECK(out) << "export_library: writing the weights file '" << path << "' failed (disk full?)";
}

// ------------------------------------------------------------------- load

namespace {

// Reads `path` (the beside weights file) into one aligned array, checking the header and size.
NDArray read_weights_file(const std::string& so_path, const std::string& path, int64_t bytes) {
  std::ifstream in(path, std::ios::binary);
  KILN_USER_CHECK(in) << "ModelRunner::load: '" << so_path << "' keeps its weights beside it, but the weights file '" << path
                      << "' is missing or unreadable; copy it next to the library (export with weights=\"embed\" for one file)";
  char h[kWeightsHeader] = {};
  in.read(h, sizeof(h));
  KILN_USER_CHECK(in.gcount() == kWeightsHeader && std::memcmp(h, kWeightsMagic, sizeof(kWeightsMagic)) == 0)
      << "ModelRunner::load: '" << path << "' is not a kiln weights file (no KILNWTS1 header)";
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(h[8 + i])) << (8 * i);
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  KILN_USER_CHECK(n == static_cast<uint64_t>(bytes) && !ec && size == n + kWeightsHeader)
      << "ModelRunner::load: the weights file '" << path << "' has " << size << " bytes (header says " << n
      << " of data); the library '" << so_path << "' expects " << bytes + kWeightsHeader
      << " bytes: it belongs to another export or was cut short; export the model again";
  NDArray data = NDArray::empty({std::max<int64_t>(bytes, 1)}, DataType::UInt(8));
  in.read(static_cast<char*>(data.data()), bytes);
  KILN_USER_CHECK(in.gcount() == bytes) << "ModelRunner::load: reading the weights file '" << path << "' failed";
  return data;
}

ModelBuffer::Kind kind_of(const std::string& s) {
  if (s == "input") return ModelBuffer::Kind::Input;
  if (s == "constant") return ModelBuffer::Kind::Constant;
  if (s == "arena") return ModelBuffer::Kind::Arena;
  if (s == "output") return ModelBuffer::Kind::Output;
  KILN_USER_ERROR() << "unknown buffer kind '" << s << "'";
  return ModelBuffer::Kind::Arena;
}

ModelTensor tensor_of(const json& t) {
  return ModelTensor{t.at("name").get<std::string>(), t.at("shape").get<std::vector<int64_t>>(),
                     DataType::parse(t.at("dtype").get<std::string>())};
}

// The plan without its constants; sets mode, weights bytes and constant specs.
ModelPlan plan_from_json(const json& j, std::string* mode, int64_t* weights_bytes, std::vector<ModelTensor>* consts,
                         std::vector<int64_t>* offsets) {
  KILN_USER_CHECK(j.at("format").get<int>() == 1) << "plan format " << j.at("format").dump() << " is not 1";
  ModelPlan p;
  for (const json& t : j.at("inputs")) p.inputs.push_back(tensor_of(t));
  for (const json& t : j.at("outputs")) p.outputs.push_back(tensor_of(t));
  for (const json& b : j.at("buffers")) {
    ModelBuffer mb;
    mb.kind = kind_of(b.at("kind").get<std::string>());
    mb.index = b.at("index").get<int>();
    mb.offset = b.at("offset").get<int64_t>();
    mb.shape = b.at("shape").get<std::vector<int64_t>>();
    mb.dtype = DataType::parse(b.at("dtype").get<std::string>());
    p.buffers.push_back(std::move(mb));
  }
  for (const json& s : j.at("steps"))
    p.steps.push_back({s.at("name").get<std::string>(), s.at("kernel").get<int>(), s.at("args").get<std::vector<int>>(), s.at("flop").get<double>()});
  p.kernel_names = j.at("kernel_names").get<std::vector<std::string>>();
  for (const json& c : j.at("constants")) {
    offsets->push_back(c.at("offset").get<int64_t>());
    consts->push_back({"", c.at("shape").get<std::vector<int64_t>>(), DataType::parse(c.at("dtype").get<std::string>())});
  }
  p.output_buffers = j.at("output_buffers").get<std::vector<int>>();
  p.arena_bytes = j.at("arena_bytes").get<int64_t>();
  *mode = j.at("weights").at("mode").get<std::string>();
  *weights_bytes = j.at("weights").at("bytes").get<int64_t>();
  return p;
}

}  // namespace

ModelRunner ModelRunner::load(const std::string& path) {
  Module module = Module::load(path);
  // Module::load keeps the library open; a second dlopen of the same file shares that handle.
  std::string dl_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(dl_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  KILN_USER_CHECK(handle) << "ModelRunner::load: cannot open '" << path << "' again: " << dlerror();
  struct Closer {
    void* h;
    ~Closer() { dlclose(h); }
  } closer{handle};
  auto* plan_text = static_cast<const char* const*>(dlsym(handle, "kiln_model_plan"));
  KILN_USER_CHECK(plan_text && *plan_text) << "ModelRunner::load: '" << path
                                           << "' has no kiln_model_plan symbol: it is a kernel library, not a model "
                                           << "(load it with Module::load / kiln.runtime.load)";
  std::string mode;
  int64_t weights_bytes = 0;
  std::vector<ModelTensor> consts;
  std::vector<int64_t> offsets;
  ModelPlan plan;
  try {
    plan = plan_from_json(json::parse(*plan_text), &mode, &weights_bytes, &consts, &offsets);
  } catch (const std::exception& e) {
    KILN_USER_ERROR() << "ModelRunner::load: '" << path << "': corrupt model plan: " << e.what();
  }
  // The weights: a view of the library's embedded blob (alive with the Module), or the file beside it.
  NDArray blob;
  char* base = nullptr;
  if (mode == "embed") {
    auto* start = static_cast<char*>(dlsym(handle, "kiln_model_weights"));
    auto* size = static_cast<const uint64_t*>(dlsym(handle, "kiln_model_weights_size"));
    KILN_USER_CHECK(start && size && *size == static_cast<uint64_t>(weights_bytes))
        << "ModelRunner::load: '" << path << "' lacks its embedded weights or they have the wrong size; export the model again";
    base = start;
  } else {
    KILN_USER_CHECK(mode == "beside") << "ModelRunner::load: '" << path << "': unknown weights mode '" << mode << "'";
    blob = read_weights_file(path, path + ".weights", weights_bytes);
    base = static_cast<char*>(blob.data());
  }
  for (size_t i = 0; i < consts.size(); ++i) {
    KILN_USER_CHECK(offsets[i] >= 0 && offsets[i] + consts[i].bytes() <= weights_bytes)
        << "ModelRunner::load: '" << path << "': constant " << i << " lies outside the weights";
    plan.constants.push_back(NDArray::wrap(base + offsets[i], consts[i].shape, consts[i].dtype));
  }
  ModelRunner runner(std::move(plan), std::move(module));
  runner.weights_ = std::move(blob);
  return runner;
}

}  // namespace kiln
