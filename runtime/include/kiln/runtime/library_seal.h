/** \file
 * The seal of exported files: every library kiln exports ends in a 64-byte
 * trailer holding a checksum of the whole file and a random export id, and a
 * model's weights file carries the same export id and a checksum of its data
 * in its header. Loaders check them before they map or run anything, so a
 * damaged, cut-short or mismatched file is refused with a message instead of
 * crashing or computing wrong answers.
 *
 * The checksum is XXH3-128 (xxHash, header-only: kiln_runtime gains no link
 * dependency). It catches corruption and mix-ups, not tampering: it is no
 * signature, and whoever may rewrite the file may re-seal it.
 *
 * Library trailer (the last 64 bytes; ELF loaders ignore bytes past the
 * sections, so the sealed file still loads with dlopen):
 *   [0, 32)   export id, 32 lowercase hex digits (ASCII)
 *   [32, 40)  uint64 little-endian: the file's size without the trailer
 *   [40, 56)  XXH3-128, canonical (big-endian) bytes, of the file's bytes [0, size - 24):
 *             everything before this field, the id and size included
 *   [56, 64)  "KILNSEL1"
 */
#ifndef KILN_RUNTIME_LIBRARY_SEAL_H
#define KILN_RUNTIME_LIBRARY_SEAL_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kiln {

inline constexpr int64_t kSealTrailerBytes = 64;

/** A fresh export id: 128 bits from the system's random source, as 32 hex digits. */
std::string new_export_id();

/** XXH3-128 over bytes fed in pieces; hex() is the canonical form as 32 hex digits. */
class ContentHash {
 public:
  ContentHash();
  ~ContentHash();
  ContentHash(const ContentHash&) = delete;
  ContentHash& operator=(const ContentHash&) = delete;
  void update(const void* data, size_t bytes);
  /** The 16 canonical (big-endian) bytes of the hash so far. */
  std::string digest() const;
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/** 32 lowercase hex digits of `bytes`. */
std::string to_hex(const std::string& bytes);

/**
 * Appends the trailer to the library at `path` (a file this export just
 * linked, not yet renamed into place). `export_id` is 32 hex digits.
 * Throws kiln::Error when the file cannot be read or written.
 */
void seal_library(const std::string& path, const std::string& export_id);

/** What check_library_seal found: `problem` empty when the file is whole. */
struct LibrarySeal {
  std::string problem;    ///< why the file is refused, as a clause ("its checksum does not match ...")
  std::string export_id;  ///< the trailer's id, when there is a trailer
};

/**
 * Reads the whole file at `path` and checks its trailer and checksum. Never
 * throws for a bad file: says what is wrong in `problem`.
 */
LibrarySeal check_library_seal(const std::string& path);

}  // namespace kiln

#endif  // KILN_RUNTIME_LIBRARY_SEAL_H
