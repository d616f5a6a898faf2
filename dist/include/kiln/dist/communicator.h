/** \file
 * Communicators: the collectives the per-rank runner issues, over one group
 * of ranks, behind one interface with an engine per kind of device.
 *
 *   MPI   CPU ranks, one or many hosts (ranks started by mpirun). Every call
 *         is a non-blocking MPI call polled against a deadline: when a peer
 *         died or hangs, the rank prints what it waited for and aborts the
 *         whole job (MPI_Abort) instead of waiting forever.
 *   NCCL  GPUs; libnccl.so.2 and libcudart are loaded with dlopen, so kiln
 *         builds and runs without them; make_nccl throws a clear kiln::Error
 *         when they or a GPU are missing. Buffers are host arrays staged
 *         through device memory (the runner's arrays live on the host).
 *   self  one rank without MPI (not under mpirun): collectives are copies.
 *
 * Buffers are `count` elements of `dtype`; sums are elementwise.
 */
#ifndef KILN_DIST_COMMUNICATOR_H
#define KILN_DIST_COMMUNICATOR_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"

namespace kiln::dist {

/** A collective in flight (Communicator::start_all_reduce). */
class Request {
 public:
  virtual ~Request() = default;
  /** Pushes it on (MPI moves non-blocking collectives only inside MPI calls); true once complete. */
  virtual bool test() = 0;
  /** Until complete, against the collective deadline (set_timeout). */
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /** "mpi", "nccl" or "self". */
  virtual std::string backend() const = 0;

  /** In place: buf becomes the sum over the ranks. */
  virtual void all_reduce(void* buf, int64_t count, DataType dtype) = 0;
  /** all_reduce started without waiting: buf must stay alive and untouched until the request completes.
   *  Engines without non-blocking collectives complete it at once. */
  virtual std::unique_ptr<Request> start_all_reduce(void* buf, int64_t count, DataType dtype);
  /** start_all_reduce of float32 values sent as bfloat16 (half the bytes): each rank's values and each partial
   *  sum are rounded to bfloat16; buf holds the sum (as float32) once the request completes. */
  virtual std::unique_ptr<Request> start_all_reduce_bf16(float* buf, int64_t count);
  /** recv (size * count) gets every rank's `count` elements, in rank order. */
  virtual void all_gather(const void* send, void* recv, int64_t count, DataType dtype) = 0;
  /** send holds size blocks of `count`; recv gets the sum over ranks of block rank(). */
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DataType dtype) = 0;
  /** Block p of send (count elements) goes to rank p; block p of recv comes from rank p. */
  virtual void all_to_all(const void* send, void* recv, int64_t count, DataType dtype) = 0;
  virtual void broadcast(void* buf, int64_t count, DataType dtype, int root) = 0;
  virtual void send(const void* buf, int64_t count, DataType dtype, int peer, int tag) = 0;
  virtual void recv(void* buf, int64_t count, DataType dtype, int peer, int tag) = 0;
  struct SendOp {
    const void* buf;
    int64_t count;
    DataType dtype;
    int peer, tag;
  };
  struct RecvOp {
    void* buf;
    int64_t count;
    DataType dtype;
    int peer, tag;
  };
  /**
   * Posts every receive, then every send, and waits for all: two ranks that
   * send to each other at once (a pipeline's forward going up while a
   * gradient comes down) cannot block each other as blocking sends would.
   * The default runs the sends and then the receives in turn.
   */
  virtual void exchange(const std::vector<SendOp>& sends, const std::vector<RecvOp>& recvs);
  virtual void barrier() = 0;
  /** The sub-communicator of the ranks passing the same color, ordered by key (collective over this one). */
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
};

/** How the MPI engine all-reduces large buffers: kiln's segmented ring (point-to-point messages, one
 *  segment summed while the next ones travel) from min_bytes on; below, or with min_bytes 0,
 *  MPI_Iallreduce. Every rank must use the same options. */
struct RingOptions {
  int64_t min_bytes = 256 << 10;
  int64_t segment_bytes = 512 << 10;  ///< the most bytes of a segment
  int window = 2;                     ///< segments in flight at once
  bool pair_exchange = true;          ///< two ranks: each sends every segment whole and both sum (one round, not two)
};
RingOptions& ring_options();

/** Whether kiln was built with MPI. */
bool mpi_built();
/** The communicator over every process: MPI when started by mpirun (initialised on first use), else a one-rank "self" one. */
std::shared_ptr<Communicator> world();
/** Seconds a collective waits for its peers before the job is aborted (default: $KILN_DIST_TIMEOUT or 300). */
void set_timeout(double seconds);
double timeout();
/** Finalizes MPI if world() started it (at exit; later world() calls throw). */
void finalize();

/** Whether Request::test may run on another thread while the calling one makes no communicator call
 *  (MPI initialised with MPI_THREAD_SERIALIZED or more, or no MPI). */
bool requests_testable_from_any_thread();

/** An NCCL communicator over the ranks of `bootstrap` (which carries the unique id), on GPU `device`; throws kiln::Error naming what is missing. */
std::shared_ptr<Communicator> make_nccl(const std::shared_ptr<Communicator>& bootstrap, int device);

/** Element size helper shared by the engines. */
inline int64_t bytes_of(int64_t count, DataType dtype) { return count * dtype.bytes(); }

}  // namespace kiln::dist

#endif  // KILN_DIST_COMMUNICATOR_H
