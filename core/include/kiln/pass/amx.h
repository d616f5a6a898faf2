/** \file
 * AMX tile blocks: the reader of a loop nest a schedule marked "amx"
 * (s.pragma(axis, "amx", 1) on the outermost of three loops, the AttrStmt
 * "pragma_amx" around it after lowering), which the LLVM backend emits as
 * AMX tile code for an x86 target with AMX (ops::amx_schedule makes such
 * schedules). Every other backend, and the interpreter, runs the nest as
 * the plain loops it is.
 *
 * The nest: loops of constant extent around one store C[c] = C[c] +
 * dot_i8x4(A[a], B[b]) (or dot_bf16x2), flat indices. The innermost three
 * (any order) make the tiles; their roles follow from the indices: k is the
 * loop C's index leaves out, n the one that steps it by 1, m the other. k up
 * to 16 or a multiple of 16 (words of four bytes or two bfloat16), m and n
 * at most 32. Loops outside them are more of the reduction (C's index leaves
 * them out: a convolution's taps and channel blocks), run with the
 * accumulators held in tiles, and outside those, blocks (C's index uses
 * them: more rows), each loading (or, where the nest zeroes them between the
 * loops over blocks and the reduction, zeroing) and storing its accumulators
 * under the one tile configuration. Every index affine in all of them
 * (B's and C's along n within each 16 columns, so that a panel of B may end
 * at 16 columns); A contiguous along k, B and C along n. The accumulator's
 * initialisation stays outside (k outermost).
 */
#ifndef KILN_PASS_AMX_H
#define KILN_PASS_AMX_H

#include <vector>

#include "kiln/ir/stmt.h"

namespace kiln::pass {

/** The key of the AttrStmt that marks an amx nest. */
inline constexpr const char* kAmxPragma = "pragma_amx";

/** A marked nest read: element (r, j) of C at c + r*ldc + (j/16)*c_col16 + j%16, A[r][q] at a + r*lda + q, B[q][j] at b + q*ldb + (j/16)*b_col16 + j%16. */
/** A loop of the reduction outside k: its extent and the element strides of A and B along it. */
struct AmxReduceLoop {
  int64_t extent = 1, a_stride = 0, b_stride = 0;
};

/** A loop over blocks: its extent and the element strides of C, A and B along it. */
struct AmxBlockLoop {
  int64_t extent = 1, c_stride = 0, a_stride = 0, b_stride = 0;
};

struct AmxBlock {
  /** The loops over blocks (outermost first), then the reduction loops outside k. */
  std::vector<AmxBlockLoop> blocks;
  std::vector<AmxReduceLoop> outer;
  /** Loads of the first elements of C, A and B (flat indices). */
  Expr c, a, b;
  int64_t ldc = 0, c_col16 = 16, lda = 0, ldb = 0, b_col16 = 16;
  int64_t m = 0, n = 0, k = 0;
  /** dot_bf16x2 (float32 C) rather than dot_i8x4 (int32 C). */
  bool bf16 = false;
  /** The nest zeroes each block's accumulators itself (between its loops over blocks and the reduction): the tiles start at zero, not loaded. */
  bool zero_init = false;
  /** For dot_i8x4: whether A's and B's bytes are signed (int32 words). */
  bool a_signed = false, b_signed = false;
};

/** Reads the nest under an AttrStmt "pragma_amx"; throws kiln::Error naming the loop and the problem when it is no such nest. */
AmxBlock read_amx_block(const AttrStmt* marked);

}  // namespace kiln::pass

#endif  // KILN_PASS_AMX_H
