// LibraryInfo <-> JSON: the kiln_library_info record of exported libraries.
#include <nlohmann/json.hpp>

#include "kiln/runtime/library_info.h"
#include "kiln/support/error.h"

namespace kiln {

// Kept in step with project(kiln VERSION ...) in CMakeLists.txt.
// KILN_VERSION comes from CMake's project(VERSION), so libraries record the version that built them.
#ifndef KILN_VERSION
#error "KILN_VERSION must be defined by the build (CMakeLists.txt passes project(VERSION))"
#endif
const char* kiln_version() { return KILN_VERSION; }

std::string LibraryInfo::to_json() const {
  nlohmann::json j{{"abi_version", abi_version}, {"kiln_version", kiln_version}, {"triple", triple},
                   {"cpu", cpu}, {"features", features}};
  return j.dump();
}

LibraryInfo LibraryInfo::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KILN_USER_ERROR() << "corrupt library info: not valid JSON (" << e.what() << ")";
  }
  KILN_USER_CHECK(j.is_object()) << "corrupt library info: expected a JSON object";
  auto it = j.find("abi_version");
  KILN_USER_CHECK(it != j.end() && it->is_number_integer()) << "corrupt library info: no integer \"abi_version\"";
  LibraryInfo info;
  info.abi_version = it->get<int>();
  auto text_field = [&](const char* key) {
    auto f = j.find(key);
    if (f == j.end()) return std::string();  // optional: only the ABI version must be there
    KILN_USER_CHECK(f->is_string()) << "corrupt library info: \"" << key << "\" is not a string";
    return f->get<std::string>();
  };
  info.kiln_version = text_field("kiln_version");
  info.triple = text_field("triple");
  info.cpu = text_field("cpu");
  if (auto f = j.find("features"); f != j.end()) {
    KILN_USER_CHECK(f->is_array()) << "corrupt library info: \"features\" is not an array";
    for (const auto& s : *f) {
      KILN_USER_CHECK(s.is_string()) << "corrupt library info: \"features\" has " << s.dump() << "; expected names";
      info.features.push_back(s.get<std::string>());
    }
  }
  return info;
}

}  // namespace kiln
