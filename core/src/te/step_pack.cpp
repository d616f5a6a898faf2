// The pack step: a stage copies a tensor into panels (one dimension split
// into an outermost panel index and an innermost lane index) for chosen
// readers, which index the copy. The primitive, its fields, its replay and
// its Python.
#include <algorithm>

#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "step_internal.h"

namespace kiln::te {

using namespace detail;  // NOLINT: the step helpers

Tensor Schedule::pack(const Tensor& tensor, const std::vector<Tensor>& readers, int dim, int factor) {
  Stage& src = (*this)[tensor];
  Tensor t = src.op().output();
  KILN_USER_CHECK(dim >= 0 && dim < t.ndim()) << "pack of '" << src.name() << "': dimension " << dim << " is out of range for a " << t.ndim() << "-D tensor";
  const int64_t* extent = as_const_int(t.shape()[dim]);
  KILN_USER_CHECK(factor > 0 && extent && *extent % factor == 0)
      << "pack of '" << src.name() << "': dimension " << dim << " (extent " << (extent ? std::to_string(*extent) : "symbolic") << ") must be a constant multiple of the factor " << factor;
  KILN_USER_CHECK(!readers.empty()) << "pack of '" << src.name() << "' needs at least one reader";
  Pack step{stage_ref(*state_, src), dim, factor, {}};
  std::vector<Stage*> reader_stages;
  for (const Tensor& r : readers) {
    Stage& rs = (*this)[r];
    KILN_USER_CHECK(reads(rs.op(), src.op())) << "pack of '" << src.name() << "': stage '" << rs.name() << "' does not read it; readers must be stages that read the tensor";
    KILN_USER_CHECK(std::find(reader_stages.begin(), reader_stages.end(), &rs) == reader_stages.end()) << "pack of '" << src.name() << "': reader '" << rs.name() << "' is listed twice";
    reader_stages.push_back(&rs);
    step.readers.push_back(state_->index_of(&rs));
  }
  // packed[o, rest..., l] = t[rest with dimension dim = o*factor + l]
  std::vector<Expr> shape = {Expr(static_cast<int>(*extent / factor))};
  for (int d = 0; d < t.ndim(); ++d)
    if (d != dim) shape.push_back(t.shape()[d]);
  shape.push_back(factor);
  std::vector<IterVar> axes = fresh_axes(shape, {});
  std::vector<Expr> src_idx;
  for (int d = 0, r = 1; d < t.ndim(); ++d) src_idx.push_back(d == dim ? axes[0].var() * factor + axes.back().var() : Expr(axes[r++].var()));
  Operation packed(new ComputeOpNode(t.name() + ".packed", t.dtype(), shape, axes, {}, t(src_idx)));
  state_->stages.insert(state_->stages.begin() + state_->index_of(&src) + 1, std::make_unique<Stage>(state_.get(), packed, false));
  std::unordered_map<const OperationNode*, Operation> changed;
  for (Stage* rs : reader_stages) {
    const ComputeOpNode* c = as_compute(rs->op());
    Expr body = replace_tensor_reads(c->body, [&](const TensorNode* tn, const std::vector<Expr>& idx) -> Expr {
      if (tn->op.get() != src.op().get()) return Expr();
      std::vector<Expr> p = {floordiv(idx[dim], factor)};
      for (int d = 0; d < t.ndim(); ++d)
        if (d != dim) p.push_back(idx[d]);
      p.push_back(floormod(idx[dim], factor));
      return packed.output()(p);
    });
    Operation op = with_body(c, body);
    changed[c] = op;
    rs->op_ = op;
  }
  state_->replace_dataflow(changed);
  state_->record(std::move(step));
  return packed.output();
}

void Pack::fields(FieldVisitor& v) { v.integer(dim), v.integer(factor), v.stages(readers); }
void Pack::apply(Schedule& sch) const { sch.pack(replay_stage(sch, stage.index).op().output(), replay_tensors(sch, readers), dim, factor); }
void Pack::python(PythonWriter& w) const {
  std::string src = w.tensor(stage), rs;
  for (size_t i = 0; i < readers.size(); ++i) rs += (i ? ", " : "") + w.tensor(readers[i]);
  std::string var = w.insert_stage(stage.index + 1, stage.name + ".packed");
  w.line(var + " = s.pack(" + src + ", [" + rs + "], dim=" + std::to_string(dim) + ", factor=" + std::to_string(factor) + ")");
}

}  // namespace kiln::te
