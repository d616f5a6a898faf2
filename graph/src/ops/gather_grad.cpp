// kiln.GatherGrad(indices, dY) -> d data: Gather's data gradient, a
// scatter-add of dY's rows into the rows of data their indices name.
//
// Tensor expressions have no scatter (each output element is computed, and
// written, once), and the plain form -- each data row sums dY over the
// positions whose index equals it -- costs vocab x indices x width (an
// embedding of 30k rows read by 1k tokens of width 768: 2.4e10). Instead,
// sorting the positions by index groups each row's contributions, which a
// segmented prefix sum adds up in log2(indices) passes:
//
//   key[j]   the clamped index of position j (as Gather clamps)
//   rank[j]  j's place in the stable sort by key        indices^2 compares
//   perm[k]  the position whose rank is k                indices^2 compares
//   end[r]   how many keys are <= r                      vocab x indices compares
//   S        dY[.., perm[k], ..] summed over its run of equal keys by a
//            Hillis-Steele scan: pass s adds the element 2^s back when it
//            has the same key                            indices x width x log2(indices)
//   out[r]   S at the run's last element, end[r] - 1, when that key is r;
//            else 0                                      vocab x width
//
// Each scan pass is written as a sum over a 2-long axis (itself, and the
// element 2^s back): a reduction is stored, where the default schedule would
// inline a plain stage into the next and read pass 0 2^passes times.
#include <limits>

#include "kiln/ir/op.h"
#include "op_helpers.h"
#include "transform_common.h"

namespace kiln::graph::ops_detail {
namespace {

// Row-major coordinates of flat position p in `shape` (empty for a scalar).
std::vector<Expr> unravel(Expr p, const std::vector<int64_t>& shape) {
  std::vector<Expr> at(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    at[k] = k == 0 ? p : floormod(p, ops::index_imm(shape[k]));
    if (k > 0) p = floordiv(p, ops::index_imm(shape[k]));
  }
  return at;
}

te::Tensor gather_grad_compute(const OpCall& call, const te::Tensor& I, const te::Tensor& dY) {
  const auto& shape = call.attrs.get_ints("data_shape");
  const std::vector<int64_t>& ishape = call.input_types[0].shape;
  size_t axis = static_cast<size_t>(call.attrs.get_int("axis"));
  int64_t V = shape[axis], J = 1;
  for (int64_t d : ishape) J *= d;
  DataType f = dY.dtype(), it = DataType::Int(32);
  if (J == 0 || V == 0)
    return te::compute(ops::shape_exprs(shape), [&](const std::vector<Var>&) { return make_zero(f); }, "gather_grad");
  if (J > std::numeric_limits<int32_t>::max() / 2 || V > std::numeric_limits<int32_t>::max() / 2)
    call.fail("data_shape " + shape_to_string(shape) + " with " + std::to_string(J) + " indices is too large for 32-bit positions");
  auto c = [&](int64_t v) { return make_const(it, static_cast<double>(v)); };
  auto one_if = [&](Expr cond) { return select(cond, c(1), c(0)); };
  auto axis_of = [&](int64_t n, const char* name) { return te::reduce_axis(Range(0, ops::index_imm(n)), name); };

  te::Tensor key = te::compute({ops::index_imm(J)}, [&](const std::vector<Var>& j) {
    Expr idx = I(unravel(j[0], ishape));
    idx = select(idx < make_zero(idx.dtype()), idx + make_const(idx.dtype(), static_cast<double>(V)), idx);
    return max(min(cast(it, idx), c(V - 1)), c(0));
  }, "gather_grad.key");
  te::Tensor rank = te::compute({ops::index_imm(J)}, [&](const std::vector<Var>& j) {
    IterVar o = axis_of(J, "o");
    Expr a = key({o.var()}), b = key({j[0]});
    return te::sum(one_if(a < b || (a == b && cast(it, o.var()) < cast(it, j[0]))), {o});
  }, "gather_grad.rank");
  te::Tensor perm = te::compute({ops::index_imm(J)}, [&](const std::vector<Var>& k) {
    IterVar j = axis_of(J, "j");
    return te::sum(select(rank({j.var()}) == cast(it, k[0]), cast(it, j.var()), c(0)), {j});
  }, "gather_grad.perm");
  te::Tensor end = te::compute({ops::index_imm(V)}, [&](const std::vector<Var>& r) {
    IterVar j = axis_of(J, "j");
    return te::sum(one_if(key({j.var()}) <= cast(it, r[0])), {j});
  }, "gather_grad.end");
  auto skey = [&](Expr k) { return key({perm({k})}); };  // the k-th key in sorted order

  // S over [data dims before axis, sorted position, data dims after axis].
  std::vector<int64_t> sshape = shape;
  sshape[axis] = J;
  te::Tensor S = te::compute(ops::shape_exprs(sshape), [&](const std::vector<Var>& i) {
    std::vector<Expr> at(i.begin(), i.begin() + axis);
    for (const Expr& e : unravel(perm({i[axis]}), ishape)) at.push_back(e);
    at.insert(at.end(), i.begin() + axis + 1, i.end());
    return dY(at);
  }, "gather_grad.sorted");
  for (int64_t step = 1, pass = 0; step < J; step *= 2, ++pass) {
    te::Tensor prev = S;
    S = te::compute(ops::shape_exprs(sshape), [&](const std::vector<Var>& i) {
      IterVar t = axis_of(2, "t");
      Expr k = cast(it, i[axis]), back = k - cast(it, t.var()) * c(step);
      Expr same = cast(it, t.var()) == c(0) || (k >= c(step) && skey(max(k - c(step), c(0))) == skey(k));
      std::vector<Expr> at(i.begin(), i.end());
      at[axis] = max(back, c(0));
      return te::sum(select(same, prev(at), make_zero(f)), {t});
    }, "gather_grad.scan" + std::to_string(pass));
  }
  return te::compute(ops::shape_exprs(shape), [&](const std::vector<Var>& i) {
    Expr last = max(end({i[axis]}) - c(1), c(0));
    Expr hit = end({i[axis]}) > c(0) && skey(last) == cast(it, i[axis]);
    std::vector<Expr> at(i.begin(), i.end());
    at[axis] = last;
    return select(hit, S(at), make_zero(f));
  }, "gather_grad");
}

const bool registered = [] {
  OpDef d;
  d.name = "kiln.GatherGrad";
  d.doc = "Gather's data gradient: for each row r along axis, the sum of dY over the positions whose (clamped) index is r";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = {{"axis", AttrKind::Int, std::nullopt}, {"data_shape", AttrKind::Ints, std::nullopt}};
  d.pattern = Pattern::Reduction;
  d.infer = [](const OpCall& call) {
    if (!call.input_types[0].dtype.is_integer()) call.fail("indices are " + call.input_types[0].str() + "; they must be int32 or int64");
    const auto& shape = call.attrs.get_ints("data_shape");
    int64_t axis = call.attrs.get_int("axis");
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
      call.fail("axis " + std::to_string(axis) + " is outside data_shape " + shape_to_string(shape));
    std::vector<int64_t> dy(shape.begin(), shape.begin() + axis);
    dy.insert(dy.end(), call.input_types[0].shape.begin(), call.input_types[0].shape.end());
    dy.insert(dy.end(), shape.begin() + axis + 1, shape.end());
    if (call.input_types[1].shape != dy)
      call.fail("dY is " + call.input_types[1].str() + " but Gather of data_shape " + shape_to_string(shape) + " by indices " +
                call.input_types[0].str() + " along axis " + std::to_string(axis) + " gives " + shape_to_string(dy));
    return std::vector<TensorType>{TensorType{shape, call.input_types[1].dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{gather_grad_compute(call, in[0], in[1])}; };
  d.sharding = replicated_rule();
  register_op(std::move(d));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
