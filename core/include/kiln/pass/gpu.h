/** \file
 * The loop passes that make a lowered function a GPU kernel (each in its own
 * file core/src/pass/gpu_<name>.cpp). The driver runs them after the common
 * passes for a cuda target (kiln/driver/build_cuda.h).
 *
 * The shape of a GPU kernel, as these passes check and keep it:
 *
 *   for bx in blockIdx.x        <- the block nest: blockIdx loops, outermost
 *     allocate A.shared         <- block level: uniform code, run alike by
 *     for ko in 0..K/8             every thread of the block (serial loops,
 *       sync_threads("shared")     lets, conditions on block variables,
 *       for tx in threadIdx.x      shared and local allocations, barriers)
 *         A.shared[tx] = ...    <- thread nests: a threadIdx loop and all
 *       sync_threads("shared")     inside it, run by each thread on its own
 *       for tx in threadIdx.x
 *         ... A.shared[...] ...
 *
 * Thread nests are the leaves of block-level code. A block-level statement
 * that holds no thread nest but stores something (a serial reduction, say)
 * is run by thread 0 alone (codegen guards it with threadIdx == 0). A thread
 * nest that binds fewer threads than the launch (tx < 16 of 32, or no
 * threadIdx.y while the block has a y extent) runs on the threads it binds,
 * the others skip it. Barriers stand only at block level, so every thread
 * reaches each of them.
 */
#ifndef KILN_PASS_GPU_H
#define KILN_PASS_GPU_H

#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/ir/function.h"

namespace kiln::pass {

/** "blockIdx.x/y/z" -> 0/1/2; -1 for anything else. */
int block_dim_index(const std::string& thread_tag);
/** "threadIdx.x/y/z" -> 0/1/2; -1 for anything else. */
int thread_dim_index(const std::string& thread_tag);
/** True when s has a loop bound to threadIdx.x/y/z anywhere inside. */
bool has_thread_loop(const Stmt& s);

/** Evaluate(sync_threads("shared")): the barrier of a block's threads. */
Stmt make_sync_threads();
bool is_sync_threads(const Stmt& s);

/** Per-block limits of the device a kernel is launched on. */
struct GpuLimits {
  int64_t max_threads_per_block = 1024;
  int64_t max_block[3] = {1024, 1024, 64};
  int64_t max_grid[3] = {2147483647, 65535, 65535};
  /** Static shared memory (__shared__ arrays) per block without opting in to more. */
  int64_t max_shared_bytes = 48 * 1024;
};

/** The grid and block of a kernel, from its thread-bound loops. */
struct LaunchConfig {
  int64_t grid[3] = {1, 1, 1};
  int64_t block[3] = {1, 1, 1};
  /** Bytes of all shared allocations (static __shared__ arrays). */
  int64_t shared_bytes = 0;

  int64_t threads_per_block() const { return block[0] * block[1] * block[2]; }
  int64_t num_blocks() const { return grid[0] * grid[1] * grid[2]; }
  /** "grid=(4,1,1) block=(64,1,1) shared=2048B". */
  std::string str() const;
};

/**
 * Gives allocations inside the kernel the scope their place implies, where
 * the schedule left the default "global" (a stage computed at a loop of the
 * kernel): inside a thread nest it becomes "local" (per thread), at block
 * level "shared" (one per block, what the block's threads exchange through).
 * Loads and stores follow their buffer. Explicit "shared"/"local" stay.
 */
PrimFunc gpu_storage_scope(const PrimFunc& f);

/**
 * Makes a kernel whose thread loops enclose shared stages (as TVM's GPU
 * schedules do: the shared tiles computed at the reduction's outer loop,
 * inside the output's threadIdx loops) fit the shape of the file comment.
 * Bound inference gives such a stage the region of the whole block (relaxed
 * over the thread indices), so its allocation and fetch are block-level
 * code: the thread loops are pushed inward through serial loops and
 * conditions that do not depend on them, and distributed over sequences (a
 * copy around each piece without block-level code; a piece that uses no
 * thread index runs once, at block level). Local buffers the pushed loops
 * enclose get one part per thread, indexed by the thread loops. A loop bound
 * to a tag that an enclosing thread loop binds is the same index: a new
 * thread nest (the cooperative fetch). Loops bound to "vthread" become
 * unrolled loops inside the thread loops. Throws kiln::Error, naming the
 * loop and the fix, when a shared stage sits under a condition, an assertion or in a loop
 * whose bounds depend on a thread index, or when a loop bound again to an
 * enclosing tag uses the enclosing thread index.
 */
PrimFunc split_thread_nests(const PrimFunc& f);

/**
 * Checks that f has the kernel shape of the file comment; throws kiln::Error
 * naming the offending loop or buffer and the fix: a loop outside every
 * blockIdx-bound loop, a threadIdx loop outside the block nest, a blockIdx
 * loop inside a thread nest, a tag bound twice in one nest, several block
 * nests, a shared allocation, a barrier or a thread_allreduce inside a
 * thread nest, a store outside the block nest.
 */
void verify_gpu_kernel(const PrimFunc& f);

/**
 * The launch configuration of a verified kernel: each grid/block dimension
 * is the largest extent bound to its tag (nests that bind less are guarded
 * in codegen); a kernel with a thread_allreduce gets whole warps in x (a
 * multiple of 32) and counts the collective's shared array. Throws
 * kiln::Error when a bound extent or a shared size is not
 * a constant, or the block, grid or shared memory exceeds `limits`.
 */
LaunchConfig launch_config(const PrimFunc& f, const GpuLimits& limits = {});

/**
 * Inserts sync_threads() where the threads of a block need it and nowhere
 * else: before a thread nest (or thread-0 region) that reads a shared buffer
 * written since the last barrier, or writes one read or written since then.
 * Block-level serial loops are followed around their back edge, so the fetch
 * of the next iteration waits until the compute of this one has read the
 * tile. Shared buffers are tracked whole (by their data variable): a barrier
 * between two nests that touch disjoint parts of one buffer is kept, which is
 * safe, except that writes which different iterations of a block-level loop
 * provably make to different elements (a fetch loop filling a buffer piece
 * by piece) need no barrier between them. Two thread-0 regions need none
 * either (one thread sees its own writes). Global buffers are not tracked:
 * threads of a block that pass data through global memory get no barrier,
 * and the GPU simulator reports the race. A race within one thread nest
 * cannot be fixed by a barrier; the simulator reports it too.
 */
PrimFunc insert_barriers(const PrimFunc& f);

/**
 * Reductions across the threads of a block. A schedule asks for one by
 * binding a reduce loop to threadIdx.x (as TVM does): `s[B].bind(ki,
 * "threadIdx.x")` after splitting the reduce axis, or binding the rfactor
 * axis of the final stage with the rfactor stage computed at it. Lowered as
 * is, every thread of the nest updates the one element B[idx]
 * (B[idx] = B[idx] + v(tx), a race); this pass turns that update into
 *
 *   allocate B.red local[n]                 <- each thread's partial (one
 *   for tx in threadIdx.x: B.red[tx] = id      register after codegen's
 *   <the reduce loops, the update now          local compaction)
 *    B.red[tx] = B.red[tx] + v(tx)>
 *   B[idx] = thread_allreduce("sum", n, t, B.red[t]) + B[idx]
 *
 * where the last store is block-level code (thread 0 does it) and
 * thread_allreduce is the collective every thread of the block takes part
 * in. It is computed in one fixed tree order, the same in the CUDA code and
 * in the GPU simulator (so both give the same bits): threads t >= n hold the
 * identity; within each warp of 32, offsets o = P/2, P/4, .., 1 (P the
 * power of two >= min(n, 32)) combine lane l with lane l + o
 * (__shfl_down_sync); with more than one warp, lane 0 of each warp w <
 * ceil(n/32) writes its value to a shared array of ceil(n/32) elements, one
 * barrier, and the first warp reduces that array the same way (identity
 * past its end). Thread 0 holds the result. A block that holds such a
 * reduction is launched with a multiple of 32 threads in x (launch_config
 * rounds up; nests binding fewer are guarded as usual), and the simulator
 * counts the collective's barrier. When a multi-warp collective lies inside
 * a block-level serial loop the pass puts a barrier before it, so a warp
 * cannot overwrite the shared array of the previous iteration while the
 * first warp still reads it.
 *
 * The region rewritten is the thread nest holding the update together with
 * the block-level serial loops around it that leave idx unchanged (the
 * outer reduce loops), so the collective runs once per output element.
 * Guards around the update that do not depend on those loops (the output's
 * bounds) also guard the final store.
 *
 * Reducers: sum, prod, max, min (te's, all commutative; the result differs
 * from a serial loop only by float reassociation). Types: float16,
 * bfloat16, float32, float64, int32, int64, uint32, uint64. Throws
 * kiln::Error, naming the buffer, the loop and the fix, for an update
 * across threads that cannot be lowered: over threadIdx.y or z, in a block
 * with more than one thread in y or z, an update that is no sum, prod, max
 * or min of the element (B[idx] = B[idx] - v, or one whose value reads the
 * element elsewhere), two such updates in one nest, the element read
 * elsewhere in the nest, or an unsupported type. An update of an element
 * all threads share that does not read it (B[idx] = v) is left alone: the
 * simulator reports it as a race.
 */
PrimFunc lower_thread_allreduce(const PrimFunc& f);

/**
 * Tensor cores. A schedule marks the three innermost loops of a float32
 * accumulation of float16 or bfloat16 products, 16 iterations each (two
 * spatial, one reduce; any order), with `s[CL].tensor_core(axis)` (the
 * pragma "tensor_core" on the outermost of them). Each such nest becomes one
 * warp matrix multiply-accumulate, mma_sync (see Intrinsic::MmaSync), and
 * every other use of the accumulator CL must be a 16x16 nest that fills it
 * with a constant (its initialisation: mma_fill) or copies it to a float32
 * buffer (its write-back: mma_store). The warp is the unit: these run in a
 * thread nest bound to threadIdx.y (and z), one warp of 32 lanes for each,
 * that does not bind threadIdx.x (or at block level in a block of exactly
 * one warp), and the block has exactly 32 threads in x. The fragments are
 * the warp's share of CL: an index of CL is its warp's offset (terms of the
 * thread variables, the same in every use) plus tiles 16-aligned in a row
 * of ld elements, numbered row of tiles by row of tiles.
 *
 * Throws kiln::Error naming the buffer, the loop and the fix for a marked
 * nest that is no such multiply-accumulate (extents other than 16, a bounds
 * guard, operands not float16/bfloat16, an index not affine in the tile
 * loops), another use of CL (an epilogue in the write-back), tiles that are
 * not 16-aligned or operands not 32-byte aligned (the warp loads need it),
 * and a placement other than the warp nests above.
 */
PrimFunc lower_tensor_core(const PrimFunc& f);

/** The parts of a call to mma_fill, mma_sync or mma_store (Intrinsic::MmaFill etc.). */
struct MmaCall {
  Intrinsic op = Intrinsic::MmaFill;
  /** The accumulator tile: element (r, c) at acc's index + r*ld + c; fragment `frag` of `frags`. */
  const BufferLoad* acc = nullptr;
  int64_t ld = 0, frags = 0;
  Expr frag;
  /** mma_fill: the value. */
  Expr value;
  /** mma_sync: a[r][k] at a's index + r*a_row + k*a_k, b[k][c] at b's index + k*b_k + c*b_col. */
  const BufferLoad *a = nullptr, *b = nullptr;
  int64_t a_row = 0, a_k = 0, b_k = 0, b_col = 0;
  /** mma_store: d[r][c] at d's index + r*d_row + c*d_col. */
  const BufferLoad* d = nullptr;
  int64_t d_row = 0, d_col = 0;
};
/** Reads a warp matrix call; false (and *out untouched) for any other expression. */
bool as_mma(const Expr& e, MmaCall* out);
/** The warp matrix call a statement evaluates; false for any other. */
bool as_mma(const Stmt& s, MmaCall* out);
/** True when s holds a warp matrix call anywhere inside. */
bool has_mma(const Stmt& s);

/** The terms of a sum: e = sum of sign * term over *out (appended). */
void sum_terms(const Expr& e, int sign, std::vector<std::pair<int, Expr>>* out);
/** index = *thread_part + *rest with *rest free of the variables in thread_vars; false when a term mixes both. */
bool split_thread_part(const Expr& index, const std::unordered_set<const Variable*>& thread_vars, Expr* thread_part, Expr* rest);

}  // namespace kiln::pass

#endif  // KILN_PASS_GPU_H
