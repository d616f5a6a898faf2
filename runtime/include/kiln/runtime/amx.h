/** \file
 * The AMX permission, part of the C ABI between generated code and
 * kiln_runtime (beside c_runtime_api.h).
 */
#ifndef KILN_RUNTIME_AMX_H
#define KILN_RUNTIME_AMX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Asks Linux, once per process (thread-safe), for the AMX tile data state
 * (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), which a process must
 * hold before its first tile instruction or it dies with SIGILL. Kernels
 * built for an AMX target call it before their tile code. Returns 0 when
 * granted; otherwise sets the last error (why, and the fix) and returns -1.
 */
int32_t kiln_amx_request(void);

#ifdef __cplusplus
}
#endif

#endif  // KILN_RUNTIME_AMX_H
