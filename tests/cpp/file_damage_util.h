// Helpers of the tests that damage exported files on purpose: where an ELF
// section lies, inverting bytes, reading a file whole.
#ifndef KILN_TESTS_FILE_DAMAGE_UTIL_H
#define KILN_TESTS_FILE_DAMAGE_UTIL_H

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

namespace kiln::testing {

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/** (file offset, size) of section `name` of the ELF64 file at `path`. */
inline std::pair<size_t, size_t> elf_section(const std::string& path, const std::string& name) {
  std::string data = read_whole_file(path);
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof(eh));
  auto header = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, data.data() + eh.e_shoff + i * eh.e_shentsize, sizeof(sh));
    return sh;
  };
  size_t names = header(eh.e_shstrndx).sh_offset;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = header(i);
    if (name == data.c_str() + names + sh.sh_name) return {sh.sh_offset, sh.sh_size};
  }
  throw std::runtime_error(path + " has no section " + name);
}

/** Inverts `count` bytes of the file at `path` from `offset`: a corruption no byte survives. */
inline void flip_bytes(const std::string& path, size_t offset, size_t count = 64) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string chunk(count, '\0');
  f.seekg(offset);
  f.read(chunk.data(), count);
  for (char& c : chunk) c = static_cast<char>(~c);
  f.seekp(offset);
  f.write(chunk.data(), count);
  if (!f) throw std::runtime_error("flip_bytes: cannot rewrite " + path);
}

/** Inverts 64 bytes in the middle of the code (.text) of the library at `path`. */
inline void flip_code(const std::string& path) {
  auto [offset, size] = elf_section(path, ".text");
  flip_bytes(path, offset + size / 2);
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_FILE_DAMAGE_UTIL_H
