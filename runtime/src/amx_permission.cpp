// kiln_amx_request (c_runtime_api.h): the per-process permission Linux
// wants before AMX tile instructions. Since Linux 5.16 the tile data state
// (8 KiB per thread) is off until the process asks for it; the first tile
// instruction without it raises SIGILL. The answer is cached: the request is
// process-wide and holds for every thread, present and future.
#include <mutex>
#include <string>

#include "kiln/runtime/amx.h"
#include "kiln/runtime/c_runtime_api.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

namespace {

// The request's outcome: empty when granted, else the message.
const std::string& amx_outcome() {
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__linux__) && defined(__x86_64__)
    constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
      why = std::string("this kernel uses AMX tiles, but Linux refused them to this process (arch_prctl ARCH_REQ_XCOMP_PERM: ") + std::strerror(errno) +
            "): the CPU or the kernel (Linux 5.16 or later) lacks AMX support; compile for a target without AMX, e.g. 'llvm -mattr=-amx-tile'";
#else
    why = "this kernel uses AMX tiles, which kiln runs only on Linux x86-64; compile for a target without AMX, e.g. 'llvm -mattr=-amx-tile'";
#endif
  });
  return why;
}

}  // namespace

extern "C" int32_t kiln_amx_request(void) {
  const std::string& why = amx_outcome();
  if (why.empty()) return 0;
  kiln_set_last_error(why.c_str());
  return -1;
}
