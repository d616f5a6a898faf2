// A segmented ring all-reduce over MPI point-to-point messages (MpiCommunicator's all-reduce of
// large buffers). MPI_Iallreduce (libnbc) sent a 64 MB buffer whole and summed it only once it had
// all arrived: across two hosts it took 1.42x MPI_Allreduce. Here the buffer is cut into one block
// per rank and each block into segments; every segment index is a ring of its own (reduce-scatter
// then all-gather, 2(n-1) steps), and a few of them are in flight at once, so that one segment is
// summed while the next ones are on the wire.
#ifndef KILN_SRC_DIST_RING_ALL_REDUCE_H
#define KILN_SRC_DIST_RING_ALL_REDUCE_H

#include <cstdint>
#include <vector>

#include "kiln/dist/communicator.h"

#ifdef KILN_WITH_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

namespace kiln::dist {


/** b[i] += a[i] for n elements. */
using ReduceFn = void (*)(const void* a, void* b, int64_t n);

/** One all-reduce in progress; test() moves it on (posts, completes and sums what it can). */
class RingAllReduce {
 public:
  RingAllReduce(MPI_Comm comm, void* buf, int64_t count, int elem_bytes, MPI_Datatype type, ReduceFn reduce, int tag_base);
  ~RingAllReduce();
  bool test();

 private:
  struct Flow {  // segment index j of every block: a ring of its own
    int step = 0;
    int slot = 0;  // its scratch while in flight
    bool posted = false;
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  };
  std::pair<int64_t, int64_t> segment(int block, int j) const;  // (offset, count) in elements
  void post(int j);
  bool advance(int j);  // true when flow j moved on

  MPI_Comm comm_;
  char* buf_;
  int64_t count_;
  int elem_bytes_, rank_, size_, tag_base_, segments_, started_ = 0, finished_ = 0;
  bool pair_ = false;  // two ranks: one exchange of whole segments (RingOptions::pair_exchange)
  int steps_ = 0;      // of each segment: 2(n-1), or 1 for a pair
  MPI_Datatype type_;
  ReduceFn reduce_;
  std::vector<int64_t> block_off_, block_len_;
  std::vector<Flow> flows_;
  std::vector<char> scratch_;  // a slot per flow in flight: its received segment before it is summed
  std::vector<int> slots_;     // free slots
  int64_t scratch_stride_ = 0;
};

/** The sum for MPI types kiln all-reduces (float32/64, int32/64, bfloat16 words); nullptr if none. */
ReduceFn sum_for(MPI_Datatype type);

}  // namespace kiln::dist

#endif  // KILN_WITH_MPI
#endif  // KILN_SRC_DIST_RING_ALL_REDUCE_H
