/** \file
 * The register budget of a hand schedule's register tile, from the target.
 *
 * A register tile of R rows x V vectors keeps R*V accumulators live, plus
 * the V vectors of the current row of the packed operand (B of a GEMM, the
 * weights of a conv) and one broadcast of the other operand: R*V + V + 1
 * vector registers. Past the register file (16 on AVX2, 32 on AVX-512) the
 * allocator spills accumulators to the stack and reloads them at every step.
 */
#ifndef KILN_OPS_REGISTER_TILE_H
#define KILN_OPS_REGISTER_TILE_H

#include "kiln/codegen/target.h"

namespace kiln::ops {

struct RegisterBudget {
  int lanes = 8;       ///< fp32 lanes of one vector register
  int registers = 16;  ///< vector registers of the architecture
};

/** The fp32 budget of `target` (a CPU target; cuda has no vector registers and is refused). */
RegisterBudget register_budget(const Target& target);

/** Registers an R x V register tile needs: R*V accumulators, V operand vectors, one broadcast. */
inline int tile_registers(int rows, int vectors) { return rows * vectors + vectors + 1; }

/** The most rows of `vectors` accumulators each that fit in `registers` (at least 1). */
int max_tile_rows(int registers, int vectors);

/** The host as Target::host() sees it, parsed once (the default of the entry points). */
const Target& host_target();

}  // namespace kiln::ops

#endif  // KILN_OPS_REGISTER_TILE_H
