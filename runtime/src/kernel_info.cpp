// KernelInfo <-> JSON: the metadata an exported library embeds as
// kiln_module_metadata. Parsing checks every field by hand so that a corrupt
// library names the kernel and parameter that are wrong.
#include <nlohmann/json.hpp>

#include "kiln/runtime/module.h"
#include "kiln/support/error.h"
#include "shape_expr_json.h"

namespace kiln {

using nlohmann::json;

namespace {

const json& field(const json& obj, const char* key, const std::string& where);
std::string string_field(const json& obj, const char* key, const std::string& where);

}  // namespace

namespace detail {

json shape_expr_to_json(const ShapeExpr& e) {
  if (e.is_const()) return e.value;
  if (e.is_param()) return json{{"param", e.value}};
  return json{{"op", ShapeExpr::op_name(e.op)}, {"a", shape_expr_to_json(e.operands.at(0))},
              {"b", shape_expr_to_json(e.operands.at(1))}};
}

ShapeExpr shape_expr_from_json(const json& j, const std::string& where) {
  if (j.is_number_integer()) return ShapeExpr::constant(j.get<int64_t>());
  KILN_USER_CHECK(j.is_object()) << "corrupt kernel metadata: " << where << " has " << j.dump()
                                 << "; a dimension is an integer, {\"param\": i} or {\"op\": ..., \"a\": ..., \"b\": ...}";
  if (j.contains("param")) {
    const json& i = j["param"];
    KILN_USER_CHECK(i.is_number_integer()) << "corrupt kernel metadata: " << where << " has " << j.dump() << "; \"param\" is a parameter index";
    return ShapeExpr::param(i.get<int64_t>());
  }
  std::string name = string_field(j, "op", where);
  std::optional<ShapeExpr::Op> op = ShapeExpr::parse_op(name);
  KILN_USER_CHECK(op) << "corrupt kernel metadata: " << where << " has unknown op \"" << name << "\"";
  return ShapeExpr::binary(*op, shape_expr_from_json(field(j, "a", where), where), shape_expr_from_json(field(j, "b", where), where));
}

}  // namespace detail

namespace {

using detail::shape_expr_from_json;
using detail::shape_expr_to_json;

json exprs_to_json(const std::vector<ShapeExpr>& exprs) {
  json arr = json::array();
  for (const ShapeExpr& e : exprs) arr.push_back(shape_expr_to_json(e));
  return arr;
}

json param_to_json(const ParamInfo& p) {
  json j{{"name", p.name}, {"kind", p.is_buffer ? "buffer" : "scalar"}, {"dtype", p.dtype.str()}, {"shape", p.shape}};
  if (!p.dims.empty()) j["dims"] = exprs_to_json(p.dims);
  if (!p.strides.empty()) j["strides"] = exprs_to_json(p.strides);
  return j;
}

json kernel_to_json(const KernelInfo& k) {
  json params = json::array();
  for (const ParamInfo& p : k.params) params.push_back(param_to_json(p));
  return json{{"name", k.name}, {"params", std::move(params)}};
}

const json& field(const json& obj, const char* key, const std::string& where) {
  KILN_USER_CHECK(obj.is_object()) << "corrupt kernel metadata: " << where << " is not a JSON object";
  auto it = obj.find(key);
  KILN_USER_CHECK(it != obj.end()) << "corrupt kernel metadata: " << where << " has no \"" << key << "\" field";
  return *it;
}

std::string string_field(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  KILN_USER_CHECK(v.is_string()) << "corrupt kernel metadata: \"" << key << "\" of " << where << " is not a string";
  return v.get<std::string>();
}

// Optional "dims" / "strides": absent in metadata written before they existed.
std::vector<ShapeExpr> exprs_from_json(const json& j, const char* key, const std::string& where) {
  std::vector<ShapeExpr> out;
  auto it = j.find(key);
  if (it == j.end()) return out;
  KILN_USER_CHECK(it->is_array()) << "corrupt kernel metadata: \"" << key << "\" of " << where << " is not an array";
  for (const json& d : *it) out.push_back(shape_expr_from_json(d, std::string(key) + " of " + where));
  return out;
}

ParamInfo param_from_json(const json& j, const std::string& where) {
  ParamInfo p;
  p.name = string_field(j, "name", where);
  std::string kind = string_field(j, "kind", where);
  KILN_USER_CHECK(kind == "buffer" || kind == "scalar")
      << "corrupt kernel metadata: " << where << " has kind \"" << kind << "\"; expected \"buffer\" or \"scalar\"";
  p.is_buffer = kind == "buffer";
  std::string dtype = string_field(j, "dtype", where);
  try {
    p.dtype = DataType::parse(dtype);
  } catch (const Error& e) {
    KILN_USER_ERROR() << "corrupt kernel metadata: " << where << ": " << e.what();
  }
  const json& shape = field(j, "shape", where);
  KILN_USER_CHECK(shape.is_array()) << "corrupt kernel metadata: \"shape\" of " << where << " is not an array";
  for (const json& d : shape) {
    KILN_USER_CHECK(d.is_number_integer() && d.get<int64_t>() >= -1)
        << "corrupt kernel metadata: shape of " << where << " has " << d.dump() << "; dimensions are integers >= -1";
    p.shape.push_back(d.get<int64_t>());
  }
  p.dims = exprs_from_json(j, "dims", where);
  p.strides = exprs_from_json(j, "strides", where);
  return p;
}

KernelInfo kernel_from_json(const json& j, const std::string& where) {
  KernelInfo k;
  k.name = string_field(j, "name", where);
  const json& params = field(j, "params", "kernel '" + k.name + "'");
  KILN_USER_CHECK(params.is_array()) << "corrupt kernel metadata: \"params\" of kernel '" << k.name << "' is not an array";
  for (size_t i = 0; i < params.size(); ++i) {
    k.params.push_back(param_from_json(params[i], "kernel '" + k.name + "' parameter " + std::to_string(i)));
  }
  return k;
}

json parse(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    KILN_USER_ERROR() << "corrupt kernel metadata: not valid JSON (" << e.what() << ")";
  }
  return {};
}

}  // namespace

std::string KernelInfo::to_json() const { return kernel_to_json(*this).dump(); }

KernelInfo KernelInfo::from_json(const std::string& text) { return kernel_from_json(parse(text), "kernel"); }

std::string kernels_to_json(const std::vector<KernelInfo>& kernels) {
  json arr = json::array();
  for (const KernelInfo& k : kernels) arr.push_back(kernel_to_json(k));
  return arr.dump();
}

std::vector<KernelInfo> kernels_from_json(const std::string& text) {
  json arr = parse(text);
  KILN_USER_CHECK(arr.is_array()) << "corrupt kernel metadata: expected a JSON array of kernels";
  std::vector<KernelInfo> kernels;
  for (size_t i = 0; i < arr.size(); ++i) kernels.push_back(kernel_from_json(arr[i], "kernel " + std::to_string(i)));
  return kernels;
}

}  // namespace kiln
