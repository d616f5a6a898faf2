// Model libraries (model.h): the plan <-> JSON, the weights file, and
// ModelRunner::load.
#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/runtime/library_seal.h"
#include "kiln/runtime/model.h"
#include "kiln/support/error.h"
#include "shape_expr_json.h"

namespace kiln {

using json = nlohmann::json;

namespace {

constexpr char kWeightsMagic[8] = {'K', 'I', 'L', 'N', 'W', 'T', 'S', '2'};
constexpr char kOldWeightsMagic[8] = {'K', 'I', 'L', 'N', 'W', 'T', 'S', '1'};  // before export ids and hashes
// Magic, data bytes, export id, data hash (model.h): the data stays 64-byte aligned.
constexpr int64_t kWeightsHeader = 64;
constexpr size_t kIdAt = 16, kIdChars = 32, kHashAt = 48, kHashBytes = 16;
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

json exprs_json(const std::vector<ShapeExpr>& exprs) {
  json arr = json::array();
  for (const ShapeExpr& e : exprs) arr.push_back(detail::shape_expr_to_json(e));
  return arr;
}

json model_tensor_json(const ModelTensor& t) {
  json j = tensor_json(t.name, t.shape, t.dtype);
  if (!t.dims.empty()) j["dims"] = exprs_json(t.dims);
  return j;
}

json buffer_json(const ModelBuffer& b, bool dynamic) {
  json j{{"kind", kind_name(b.kind)}, {"index", b.index}, {"offset", b.offset}, {"shape", b.shape}, {"dtype", b.dtype.str()}};
  if (!b.dims.empty()) j["dims"] = exprs_json(b.dims);
  if (dynamic && b.kind == ModelBuffer::Kind::Arena) {
    j["first_step"] = b.first_step;
    j["last_step"] = b.last_step;
    j["inplace_of"] = b.inplace_of;
    j["view_of"] = b.view_of;
  }
  return j;
}

const char* constraint_kind_name(ShapeConstraint::Kind k) { return k == ShapeConstraint::Kind::Equal ? "equal" : "divisible"; }

// A dynamic plan's shape variables, ranges and constraints (model.h: ModelPlan::to_json).
void shape_vars_json(const ModelPlan& p, json* j) {
  json vars = json::array();
  for (size_t v = 0; v < p.shape_vars.size(); ++v) {
    json var{{"name", p.shape_vars[v]}};
    if (v < p.shape_ranges.size() && p.shape_ranges[v]) var["range"] = {p.shape_ranges[v]->lo, p.shape_ranges[v]->hi};
    vars.push_back(std::move(var));
  }
  (*j)["shape_vars"] = std::move(vars);
  json cs = json::array();
  for (const ShapeConstraint& c : p.constraints) {
    json cj{{"kind", constraint_kind_name(c.kind)}, {"lhs", detail::shape_expr_to_json(c.lhs)}, {"text", c.text}};
    if (c.kind == ShapeConstraint::Kind::Equal)
      cj["rhs"] = detail::shape_expr_to_json(c.rhs);
    else
      cj["divisor"] = c.divisor;
    cs.push_back(std::move(cj));
  }
  (*j)["constraints"] = std::move(cs);
}

// A step; its kernel variants only where it has some (a static plan's steps are as format 1 always wrote them).
json step_json(const ModelStep& s) {
  json j{{"name", s.name}, {"kernel", s.kernel}, {"args", s.args}, {"flop", s.flop}};
  for (const StepVariant& v : s.variants) {
    json when = json::array();
    for (const StepVariant::Condition& c : v.when) when.push_back({detail::shape_expr_to_json(c.expr), c.lo, c.hi});
    j["variants"].push_back({{"kernel", v.kernel}, {"when", std::move(when)}});
  }
  return j;
}

}  // namespace

std::string ModelPlan::to_json(const std::vector<int64_t>& constant_offsets, const WeightsRecord& weights) const {
  KILN_CHECK(constant_offsets.size() == constants.size()) << "ModelPlan::to_json: one offset per constant";
  json j;
  // A static plan writes what it always did (format 1); a runtime that predates shape variables refuses format 2 by its number.
  j["format"] = is_dynamic() ? 2 : 1;
  for (const ModelTensor& t : inputs) j["inputs"].push_back(model_tensor_json(t));
  for (const ModelTensor& t : outputs) j["outputs"].push_back(model_tensor_json(t));
  j["buffers"] = json::array();
  for (const ModelBuffer& b : buffers) j["buffers"].push_back(buffer_json(b, is_dynamic()));
  if (is_dynamic()) shape_vars_json(*this, &j);
  j["steps"] = json::array();
  for (const ModelStep& s : steps) j["steps"].push_back(step_json(s));
  j["kernel_names"] = kernel_names;
  j["constants"] = json::array();
  for (size_t i = 0; i < constants.size(); ++i)
    j["constants"].push_back({{"offset", constant_offsets[i]}, {"shape", constants[i].shape()}, {"dtype", constants[i].dtype().str()}});
  j["output_buffers"] = output_buffers;
  j["arena_bytes"] = arena_bytes;
  j["weights"] = {{"mode", weights.mode}, {"bytes", weights.bytes}, {"export_id", weights.export_id}};
  if (!weights.hash.empty()) j["weights"]["hash"] = weights.hash;
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

namespace {

// Calls f(data, bytes) for the weights' bytes in order: each constant, then zeros up to the next offset.
template <typename F>
void for_each_weights_piece(const std::vector<NDArray>& constants, const WeightsLayout& layout, F&& f) {
  static const char zeros[kAlign] = {};
  int64_t at = 0;
  for (size_t i = 0; i < constants.size(); ++i) {
    KILN_CHECK(constants[i].is_contiguous() && constants[i].device().device_type == kDLCPU)
        << "export_library: constant " << i << " is not a compact CPU array";
    f(zeros, layout.offsets[i] - at);
    f(static_cast<const char*>(constants[i].data()), constants[i].nbytes());
    at = layout.offsets[i] + constants[i].nbytes();
  }
  f(zeros, layout.bytes - at);
}

}  // namespace

std::string write_weights(const std::string& path, const std::vector<NDArray>& constants, const WeightsLayout& layout,
                          const std::string& export_id) {
  ContentHash hash;  // first, for the header that comes before the data
  for_each_weights_piece(constants, layout, [&](const char* p, int64_t n) { hash.update(p, static_cast<size_t>(n)); });
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_USER_CHECK(out) << "export_library: cannot write the weights file '" << path << "'";
  if (!export_id.empty()) {
    KILN_CHECK(export_id.size() == kIdChars) << "write_weights: export id '" << export_id << "' is not 32 hex digits";
    char h[kWeightsHeader] = {};
    std::memcpy(h, kWeightsMagic, sizeof(kWeightsMagic));
    uint64_t n = static_cast<uint64_t>(layout.bytes);
    for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
    std::memcpy(h + kIdAt, export_id.data(), kIdChars);
    std::memcpy(h + kHashAt, hash.digest().data(), kHashBytes);
    out.write(h, sizeof(h));
  }
  for_each_weights_piece(constants, layout, [&](const char* p, int64_t n) { out.write(p, n); });
  out.flush();
  KILN_USER_CHECK(out) << "export_library: writing the weights file '" << path << "' failed (disk full?)";
  return hash.hex();
}

// ------------------------------------------------------------------- load

namespace {

// `text` with anything but printable ASCII shown as '?' (a damaged header's id, quoted in a message).
std::string printable(std::string text) {
  for (char& c : text)
    if (c < 0x20 || c > 0x7e) c = '?';
  return text;
}

// Reads `path` (the beside weights file) into one aligned array, checking
// that it belongs to this export (`record`: the plan's id and data hash) and is whole.
NDArray read_weights_file(const std::string& so_path, const std::string& path, const WeightsRecord& record) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw MissingWeightsError("ModelRunner::load: '" + so_path + "' keeps its weights beside it, but the weights file '" + path +
                              "' is missing or unreadable; copy it next to the library (export with weights=\"embed\" for one file)");
  char h[kWeightsHeader] = {};
  in.read(h, sizeof(h));
  bool whole_header = in.gcount() == kWeightsHeader;
  KILN_USER_CHECK(!whole_header || std::memcmp(h, kOldWeightsMagic, sizeof(kOldWeightsMagic)) != 0)
      << "ModelRunner::load: the weights file '" << path << "' was written by an older kiln (format KILNWTS1, without "
      << "export id or checksum); copy the weights file written together with '" << so_path << "', or export the model again";
  KILN_USER_CHECK(whole_header && std::memcmp(h, kWeightsMagic, sizeof(kWeightsMagic)) == 0)
      << "ModelRunner::load: '" << path << "' is not a kiln weights file (no KILNWTS2 header)";
  std::string id(h + kIdAt, kIdChars);
  KILN_USER_CHECK(id == record.export_id)
      << "ModelRunner::load: the weights file '" << path << "' belongs to another export (export id " << printable(id)
      << ") than the library '" << so_path << "' (export id " << record.export_id << "); copy the weights file written "
      << "together with this library, or export the model again";
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(h[8 + i])) << (8 * i);
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  int64_t bytes = record.bytes;
  KILN_USER_CHECK(n == static_cast<uint64_t>(bytes) && !ec && size == n + kWeightsHeader)
      << "ModelRunner::load: the weights file '" << path << "' has " << size << " bytes (header says " << n
      << " of data); the library '" << so_path << "' expects " << bytes + kWeightsHeader
      << " bytes: it was cut short or extended; copy it again, or export the model again";
  NDArray data = NDArray::empty({std::max<int64_t>(bytes, 1)}, DataType::UInt(8));
  in.read(static_cast<char*>(data.data()), bytes);
  KILN_USER_CHECK(in.gcount() == bytes) << "ModelRunner::load: reading the weights file '" << path << "' failed";
  ContentHash hash;
  hash.update(data.data(), static_cast<size_t>(bytes));
  KILN_USER_CHECK(hash.hex() == record.hash)
      << "ModelRunner::load: the weights file '" << path << "' is corrupt: the checksum of its data (XXH3-128 "
      << hash.hex() << ") is not the one '" << so_path << "' was exported with (" << record.hash
      << "); copy it again from the export, or export the model again";
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

std::vector<ShapeExpr> dims_of(const json& j, const std::string& where) {
  std::vector<ShapeExpr> out;
  auto it = j.find("dims");
  if (it == j.end()) return out;
  for (const json& d : it->get_ref<const json::array_t&>()) out.push_back(detail::shape_expr_from_json(d, "dims of " + where));
  return out;
}

ModelTensor tensor_of(const json& t) {
  ModelTensor m;
  m.name = t.at("name").get<std::string>();
  m.shape = t.at("shape").get<std::vector<int64_t>>();
  m.dtype = DataType::parse(t.at("dtype").get<std::string>());
  m.dims = dims_of(t, "tensor '" + m.name + "'");
  return m;
}

void shape_vars_of(const json& j, ModelPlan* p) {
  for (const json& v : j.at("shape_vars")) {
    p->shape_vars.push_back(v.at("name").get<std::string>());
    std::optional<ShapeRange> range;
    if (v.contains("range")) range = ShapeRange{v.at("range").at(0).get<int64_t>(), v.at("range").at(1).get<int64_t>()};
    p->shape_ranges.push_back(range);
  }
  for (const json& c : j.at("constraints")) {
    ShapeConstraint sc;
    std::string kind = c.at("kind").get<std::string>();
    KILN_USER_CHECK(kind == "equal" || kind == "divisible") << "unknown shape constraint kind '" << kind << "'";
    sc.kind = kind == "equal" ? ShapeConstraint::Kind::Equal : ShapeConstraint::Kind::Divisible;
    sc.text = c.at("text").get<std::string>();
    sc.lhs = detail::shape_expr_from_json(c.at("lhs"), "constraint '" + sc.text + "'");
    if (sc.kind == ShapeConstraint::Kind::Equal)
      sc.rhs = detail::shape_expr_from_json(c.at("rhs"), "constraint '" + sc.text + "'");
    else
      sc.divisor = c.at("divisor").get<int64_t>();
    p->constraints.push_back(std::move(sc));
  }
}

ModelStep step_of(const json& s, int format) {
  ModelStep step{s.at("name").get<std::string>(), s.at("kernel").get<int>(), s.at("args").get<std::vector<int>>(), s.at("flop").get<double>()};
  if (!s.contains("variants")) return step;
  KILN_USER_CHECK(format == 2) << "step '" << step.name << "' has kernel variants in a format " << format << " plan, which has no shape variables";
  for (const json& v : s.at("variants")) {
    StepVariant sv;
    sv.kernel = v.at("kernel").get<int>();
    for (const json& c : v.at("when")) {
      KILN_USER_CHECK(c.is_array() && c.size() == 3) << "a variant of step '" << step.name << "' has the condition " << c.dump()
                                                     << ", not [size expression, lo, hi]";
      sv.when.push_back({detail::shape_expr_from_json(c.at(0), "a variant of step '" + step.name + "'"), c.at(1).get<int64_t>(), c.at(2).get<int64_t>()});
    }
    step.variants.push_back(std::move(sv));
  }
  return step;
}

// The plan without its constants; sets mode, weights bytes and constant specs.
ModelPlan plan_from_json(const json& j, WeightsRecord* weights, std::vector<ModelTensor>* consts, std::vector<int64_t>* offsets) {
  int format = j.at("format").get<int>();
  KILN_USER_CHECK(format == 1 || format == 2) << "plan format " << j.at("format").dump()
                                              << " is not 1 or 2 (2: shape variables); load it with the kiln that exported it";
  ModelPlan p;
  if (format == 2) shape_vars_of(j, &p);
  for (const json& t : j.at("inputs")) p.inputs.push_back(tensor_of(t));
  for (const json& t : j.at("outputs")) p.outputs.push_back(tensor_of(t));
  for (const json& b : j.at("buffers")) {
    ModelBuffer mb;
    mb.kind = kind_of(b.at("kind").get<std::string>());
    mb.index = b.at("index").get<int>();
    mb.offset = b.at("offset").get<int64_t>();
    mb.shape = b.at("shape").get<std::vector<int64_t>>();
    mb.dtype = DataType::parse(b.at("dtype").get<std::string>());
    mb.dims = dims_of(b, "buffer " + std::to_string(p.buffers.size()));
    if (format == 2 && mb.kind == ModelBuffer::Kind::Arena) {
      mb.first_step = b.at("first_step").get<int>();
      mb.last_step = b.at("last_step").get<int>();
      mb.inplace_of = b.at("inplace_of").get<int>();
      mb.view_of = b.at("view_of").get<int>();
    }
    p.buffers.push_back(std::move(mb));
  }
  for (const json& s : j.at("steps")) p.steps.push_back(step_of(s, format));
  p.kernel_names = j.at("kernel_names").get<std::vector<std::string>>();
  for (const json& c : j.at("constants")) {
    offsets->push_back(c.at("offset").get<int64_t>());
    consts->push_back({"", c.at("shape").get<std::vector<int64_t>>(), DataType::parse(c.at("dtype").get<std::string>()), {}});
  }
  p.output_buffers = j.at("output_buffers").get<std::vector<int>>();
  p.arena_bytes = j.at("arena_bytes").get<int64_t>();
  const json& w = j.at("weights");
  weights->mode = w.at("mode").get<std::string>();
  weights->bytes = w.at("bytes").get<int64_t>();
  weights->export_id = w.at("export_id").get<std::string>();
  if (weights->mode == "beside") weights->hash = w.at("hash").get<std::string>();
  return p;
}

}  // namespace

ModelPlan ModelPlan::from_json(const std::string& text, WeightsRecord* weights, std::vector<ModelTensor>* constant_specs,
                               std::vector<int64_t>* constant_offsets) {
  try {
    return plan_from_json(json::parse(text), weights, constant_specs, constant_offsets);
  } catch (const json::exception& e) {  // not parsed, or a field missing or of the wrong type
    KILN_USER_ERROR() << "corrupt model plan: " << e.what();
  } catch (const Error& e) {  // a value out of range (a dtype, a buffer kind); a kiln bug passes
    KILN_USER_ERROR() << "corrupt model plan: " << e.what();
  }
  return {};
}

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
  WeightsRecord weights;
  std::vector<ModelTensor> consts;
  std::vector<int64_t> offsets;
  ModelPlan plan;
  try {
    plan = ModelPlan::from_json(*plan_text, &weights, &consts, &offsets);
  } catch (const Error& e) {
    KILN_USER_ERROR() << "ModelRunner::load: '" << path << "': " << e.what();
  }
  // The weights: a view of the library's embedded blob (alive with the Module), or the file beside it.
  NDArray blob;
  char* base = nullptr;
  // Embedded weights are covered by the library's seal, which Module::load checked.
  if (weights.mode == "embed") {
    auto* start = static_cast<char*>(dlsym(handle, "kiln_model_weights"));
    auto* size = static_cast<const uint64_t*>(dlsym(handle, "kiln_model_weights_size"));
    KILN_USER_CHECK(start && size && *size == static_cast<uint64_t>(weights.bytes))
        << "ModelRunner::load: '" << path << "' lacks its embedded weights or they have the wrong size; export the model again";
    base = start;
  } else {
    KILN_USER_CHECK(weights.mode == "beside") << "ModelRunner::load: '" << path << "': unknown weights mode '" << weights.mode << "'";
    blob = read_weights_file(path, path + ".weights", weights);
    base = static_cast<char*>(blob.data());
  }
  for (size_t i = 0; i < consts.size(); ++i) {
    KILN_USER_CHECK(offsets[i] >= 0 && offsets[i] + consts[i].bytes() <= weights.bytes)
        << "ModelRunner::load: '" << path << "': constant " << i << " lies outside the weights";
    plan.constants.push_back(NDArray::wrap(base + offsets[i], consts[i].shape, consts[i].dtype));
  }
  ModelRunner runner(std::move(plan), std::move(module));
  runner.weights_ = std::move(blob);
  return runner;
}

}  // namespace kiln
