/** \file
 * Device meshes and sharding specs: the vocabulary of the distribution pass
 * (kiln_dist). Pure data, no communicators: it sits in the graph library so
 * that an operator's registry entry can declare its sharding rule
 * (sharding_rule.h); kiln::dist names the same types.
 *
 *   Mesh          ranks laid out on named axes, row-major: Mesh({{"data", 2}, {"model", 2}})
 *                 puts rank 3 at (data=1, model=1).
 *   ShardingSpec  per tensor dimension, the mesh axes it is split over (outer
 *                 axis first; none: replicated on that dimension), plus the
 *                 mesh axes over which the value is a pending partial sum
 *                 (each rank holds an addend; an all-reduce over the axis
 *                 gives the value). Axes on which a value is neither split
 *                 nor partial hold copies.
 *
 * Printed as one token per dimension, then the partial axes:
 * "S(data) R", "R S(model)", "R R partial(model)", "S(data,model) R".
 */
#ifndef KILN_GRAPH_SHARDING_H
#define KILN_GRAPH_SHARDING_H

#include <string>
#include <utility>
#include <vector>

namespace kiln::graph {

class Mesh {
 public:
  Mesh() = default;
  /** Throws kiln::Error on an empty mesh, a repeated or empty name or a size < 1. */
  explicit Mesh(std::vector<std::pair<std::string, int>> axes);

  int ndim() const { return static_cast<int>(names_.size()); }
  /** The number of ranks (the product of the axis sizes). */
  int size() const;
  const std::string& axis_name(int a) const { return names_.at(a); }
  int axis_size(int a) const { return sizes_.at(a); }
  /** The index of a named axis; throws kiln::Error listing the axes when there is none. */
  int axis(const std::string& name) const;
  /** The coordinates of a rank, one per axis. */
  std::vector<int> coords(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  /** "Mesh(data=2, model=2)". */
  std::string str() const;
  bool operator==(const Mesh& o) const { return names_ == o.names_ && sizes_ == o.sizes_; }

 private:
  std::vector<std::string> names_;
  std::vector<int> sizes_;
};

struct ShardingSpec {
  /** Per tensor dimension: the mesh axes it is split over, outer first. */
  std::vector<std::vector<int>> dims;
  /** Mesh axes with a pending sum, sorted. */
  std::vector<int> partial;

  static ShardingSpec replicated(int ndim) { return {std::vector<std::vector<int>>(ndim), {}}; }
  int ndim() const { return static_cast<int>(dims.size()); }
  bool is_replicated() const;
  /** The tensor dimension split over mesh axis `a`, or -1. */
  int dim_of_axis(int a) const;
  bool is_partial(int a) const;
  /** How many pieces dimension d is cut into. */
  int64_t split_factor(int d, const Mesh& mesh) const;
  /** This spec without its partial sums. */
  ShardingSpec without_partial() const { return {dims, {}}; }
  std::string str(const Mesh& mesh) const;
  bool operator==(const ShardingSpec& o) const { return dims == o.dims && partial == o.partial; }
  bool operator!=(const ShardingSpec& o) const { return !(*this == o); }
};

/** The spec as written by ShardingSpec::str ("S(data) R partial(model)"); throws kiln::Error on a bad token, an unknown axis or a wrong rank. */
ShardingSpec parse_spec(const std::string& text, const Mesh& mesh, int ndim, const std::string& what);

/** The local shape of a value of `shape` under `spec`; throws kiln::Error naming `what` when a split does not divide its dimension. */
std::vector<int64_t> local_shape(const std::vector<int64_t>& shape, const ShardingSpec& spec, const Mesh& mesh, const std::string& what);

/** Per dimension, the block a rank holds: (offset, length) in the global shape. */
std::vector<std::pair<int64_t, int64_t>> local_block(const std::vector<int64_t>& shape, const ShardingSpec& spec, const Mesh& mesh, int rank);

/** Whether every split of spec divides its dimension. */
bool divides(const std::vector<int64_t>& shape, const ShardingSpec& spec, const Mesh& mesh);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_SHARDING_H
