// The seal of exported libraries (library_seal.h): the trailer written at
// export, checked before dlopen, and the XXH3-128 hash both use.
#include "kiln/runtime/library_seal.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

// Header-only xxHash, kept private to this file: kiln_runtime (also linked
// statically into exported libraries) gains no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kiln/support/error.h"

namespace kiln {

namespace {

constexpr char kSealMagic[8] = {'K', 'I', 'L', 'N', 'S', 'E', 'L', '1'};
constexpr size_t kIdChars = 32;
constexpr size_t kChunk = size_t(1) << 20;  // read size while hashing: big enough to run at the hash's speed

// A file descriptor closed with this object.
struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Reads exactly `n` bytes at `offset`; false on an error or end of file.
bool read_at(int fd, void* out, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t got = pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

// Feeds bytes [0, n) of the file to `hash`; false when they cannot be read.
bool hash_prefix(int fd, uint64_t n, ContentHash& hash) {
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(n, kChunk)));
  for (uint64_t at = 0; at < n;) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(n - at, kChunk));
    if (!read_at(fd, buf.data(), want, at)) return false;
    hash.update(buf.data(), want);
    at += want;
  }
  return true;
}

void put_u64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get_u64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

bool is_hex_id(const std::string& s) {
  if (s.size() != kIdChars) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

// ------------------------------------------------------------- hashing

struct ContentHash::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

ContentHash::ContentHash() : state_(std::make_unique<State>()) {
  KILN_CHECK(state_->xxh && XXH3_128bits_reset(state_->xxh) == XXH_OK) << "ContentHash: cannot set up the XXH3 state";
}

ContentHash::~ContentHash() = default;

void ContentHash::update(const void* data, size_t bytes) {
  if (bytes > 0) XXH3_128bits_update(state_->xxh, data, bytes);
}

std::string ContentHash::digest() const {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state_->xxh));
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof(c.digest));
}

std::string ContentHash::hex() const { return to_hex(digest()); }

std::string to_hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string new_export_id() {
  std::string bytes(16, '\0');
  if (getrandom(bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    std::random_device rd;  // getrandom missing (an old kernel): libstdc++'s own source
    for (char& b : bytes) b = static_cast<char>(rd());
  }
  return to_hex(bytes);
}

// --------------------------------------------------------------- seals

void seal_library(const std::string& path, const std::string& export_id) {
  KILN_CHECK(is_hex_id(export_id)) << "seal_library: the export id '" << export_id << "' is not 32 hex digits";
  Fd f(open(path.c_str(), O_RDWR | O_CLOEXEC));
  struct stat st {};
  KILN_USER_CHECK(f.fd >= 0 && fstat(f.fd, &st) == 0)
      << "export_library: cannot open '" << path << "' to seal it: " << std::strerror(errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  char trailer[kSealTrailerBytes] = {};
  std::memcpy(trailer, export_id.data(), kIdChars);
  put_u64(trailer + 32, size);
  ContentHash hash;
  KILN_USER_CHECK(hash_prefix(f.fd, size, hash)) << "export_library: cannot read '" << path << "' back to seal it";
  hash.update(trailer, 40);
  std::memcpy(trailer + 40, hash.digest().data(), 16);
  std::memcpy(trailer + 56, kSealMagic, sizeof(kSealMagic));
  KILN_USER_CHECK(lseek(f.fd, 0, SEEK_END) >= 0 && write_all(f.fd, trailer, sizeof(trailer)))
      << "export_library: cannot write the seal of '" << path << "': " << std::strerror(errno) << " (disk full?)";
}

LibrarySeal check_library_seal(const std::string& path) {
  LibrarySeal out;
  Fd f(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (f.fd < 0 || fstat(f.fd, &st) != 0) {
    out.problem = std::string("cannot open it: ") + std::strerror(errno);
    return out;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  char trailer[kSealTrailerBytes] = {};
  bool has_magic = size >= kSealTrailerBytes && read_at(f.fd, trailer, sizeof(trailer), size - kSealTrailerBytes) &&
                   std::memcmp(trailer + 56, kSealMagic, 7) == 0;
  if (!has_magic) {
    out.problem = "it has no kiln seal at its end (the trailer holding its checksum): it is not a library exported by "
                  "kiln, or one exported by an older kiln, or it was cut short or changed after export (an interrupted "
                  "copy, strip, patchelf); export it again with this kiln";
    return out;
  }
  if (trailer[63] != kSealMagic[7]) {
    out.problem = std::string("its seal has format ") + trailer[63] + ", which this kiln_runtime (format " + kSealMagic[7] +
                  ") cannot check; load it with the kiln that exported it, or export it again with this one";
    return out;
  }
  std::string id(trailer, kIdChars);
  uint64_t payload = get_u64(trailer + 32);
  if (!is_hex_id(id) || payload != size - kSealTrailerBytes) {
    out.problem = "its seal is damaged or the file was cut short or extended after export (the seal records " +
                  std::to_string(payload) + " bytes before it; there are " + std::to_string(size - kSealTrailerBytes) +
                  "); copy it again from the export, or export it again";
    return out;
  }
  ContentHash hash;
  if (!hash_prefix(f.fd, payload, hash)) {
    out.problem = std::string("reading it failed: ") + std::strerror(errno);
    return out;
  }
  hash.update(trailer, 40);
  std::string sealed(trailer + 40, 16);
  if (hash.digest() != sealed) {
    out.problem = "its checksum does not match its contents (XXH3-128 of the file " + hash.hex() + ", sealed at export " +
                  to_hex(sealed) + "): it was damaged or changed after export (a bad copy or disk, a tool that rewrote "
                  "it); copy it again from the export, or export it again";
    return out;
  }
  out.export_id = id;
  return out;
}

}  // namespace kiln
