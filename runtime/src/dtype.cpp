#include "kiln/ir/dtype.h"

#include "kiln/support/error.h"

namespace kiln {

std::string DataType::str() const {
  if (is_void()) return "void";
  std::string base;
  switch (code_) {
    case Code::Int: base = "int" + std::to_string(bits_); break;
    case Code::UInt: base = "uint" + std::to_string(bits_); break;
    case Code::Float: base = "float" + std::to_string(bits_); break;
    case Code::BFloat: base = "bfloat" + std::to_string(bits_); break;
    case Code::Bool: base = "bool"; break;
    case Code::Handle: base = "handle"; break;
  }
  if (lanes_ > 1) base += "x" + std::to_string(lanes_);
  return base;
}

DataType DataType::parse(const std::string& text) {
  std::string s = text;
  int lanes = 1;
  if (auto x = s.find('x'); x != std::string::npos) {
    try {
      lanes = std::stoi(s.substr(x + 1));
    } catch (...) {
      KILN_USER_ERROR() << "cannot parse dtype '" << text << "': lanes after 'x' must be a number, e.g. float32x8";
    }
    s = s.substr(0, x);
  }
  KILN_USER_CHECK(lanes >= 1 && lanes <= 65535) << "dtype '" << text << "' has " << lanes << " lanes; use 1 to 65535";
  if (s == "bool") return Bool(lanes);
  if (s == "handle") return Handle();
  if (s == "void") return Void();
  struct Prefix {
    const char* name;
    Code code;
  };
  for (Prefix p : {Prefix{"bfloat", Code::BFloat}, Prefix{"float", Code::Float}, Prefix{"uint", Code::UInt}, Prefix{"int", Code::Int}}) {
    std::string name = p.name;
    if (s.rfind(name, 0) != 0) continue;
    std::string rest = s.substr(name.size());
    int bits = 0;
    if (rest.empty()) bits = 32;
    else {
      for (char c : rest) KILN_USER_CHECK(c >= '0' && c <= '9') << "cannot parse dtype '" << text << "'";
      bits = std::stoi(rest);
    }
    bool ok = false;
    switch (p.code) {
      case Code::Int:
      case Code::UInt: ok = bits == 8 || bits == 16 || bits == 32 || bits == 64; break;
      case Code::Float: ok = bits == 16 || bits == 32 || bits == 64; break;
      case Code::BFloat: ok = bits == 16; break;
      default: break;
    }
    KILN_USER_CHECK(ok) << "dtype '" << text << "' has an unsupported bit width; use int8..int64, uint8..uint64, float16/32/64 or bfloat16";
    return DataType(p.code, bits, lanes);
  }
  KILN_USER_ERROR() << "unknown dtype '" << text << "'; expected one of bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64 (optionally with lanes, e.g. float32x8)";
  return {};
}

}  // namespace kiln
