#include "kiln/ir/stmt.h"

#include "kiln/ir/function.h"
#include "kiln/support/error.h"

namespace kiln {

const char* for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::Serial: return "serial";
    case ForKind::Parallel: return "parallel";
    case ForKind::Vectorized: return "vectorized";
    case ForKind::Unrolled: return "unrolled";
    case ForKind::ThreadBinding: return "thread_binding";
  }
  return "?";
}

Stmt For::make(Var loop_var, Expr min, Expr extent, ForKind kind, Stmt body, std::string thread_tag) {
  KILN_CHECK(loop_var.defined() && min.defined() && extent.defined() && body.defined()) << "For with an undefined part";
  KILN_CHECK(min.dtype().is_scalar() && min.dtype().is_integer() && min.dtype() == extent.dtype()) << "For bounds must be scalar integers of one type";
  KILN_CHECK(kind != ForKind::ThreadBinding || !thread_tag.empty()) << "thread-bound loop without a thread tag";
  return new For(std::move(loop_var), std::move(min), std::move(extent), kind, std::move(body), std::move(thread_tag));
}

Stmt BufferStore::make(Buffer buffer, Expr value, std::vector<Expr> indices, Expr predicate) {
  KILN_CHECK(buffer.defined() && value.defined()) << "store with an undefined buffer or value";
  KILN_CHECK(static_cast<int>(indices.size()) == buffer.ndim()) << "store to " << buffer.name() << " with " << indices.size() << " indices, buffer has " << buffer.ndim() << " dimensions";
  KILN_CHECK(value.dtype().element_of() == buffer.dtype()) << "store of " << value.dtype().str() << " into " << buffer.name() << " of " << buffer.dtype().str();
  for (const Expr& i : indices) KILN_CHECK(i.defined() && i.dtype().is_integer()) << "store to " << buffer.name() << " with a non-integer index";
  KILN_CHECK(!predicate.defined() || (predicate.dtype().is_bool() && predicate.dtype().lanes() == value.dtype().lanes() && value.dtype().lanes() > 1))
      << "store to " << buffer.name() << ": its predicate must be a bool vector of the value's lanes";
  return new BufferStore(std::move(buffer), std::move(value), std::move(indices), std::move(predicate));
}

Stmt Allocate::make(Buffer buffer, Stmt body) {
  KILN_CHECK(buffer.defined() && body.defined()) << "Allocate with an undefined part";
  return new Allocate(std::move(buffer), std::move(body));
}

Stmt Seq::make(std::vector<Stmt> seq) {
  std::vector<Stmt> flat;
  for (Stmt& s : seq) {
    if (!s.defined()) continue;
    if (const Seq* inner = s.as<Seq>()) flat.insert(flat.end(), inner->seq.begin(), inner->seq.end());
    else flat.push_back(std::move(s));
  }
  if (flat.empty()) return make_nop();
  if (flat.size() == 1) return flat[0];
  return new Seq(std::move(flat));
}

Stmt IfThenElse::make(Expr condition, Stmt then_case, Stmt else_case) {
  KILN_CHECK(condition.defined() && condition.dtype() == DataType::Bool() && then_case.defined()) << "IfThenElse needs a scalar bool condition and a then branch";
  return new IfThenElse(std::move(condition), std::move(then_case), std::move(else_case));
}

Stmt LetStmt::make(Var var, Expr value, Stmt body) {
  KILN_CHECK(value.defined() && body.defined() && var.dtype() == value.dtype()) << "LetStmt of mismatched types";
  return new LetStmt(std::move(var), std::move(value), std::move(body));
}

Stmt Evaluate::make(Expr value) {
  KILN_CHECK(value.defined()) << "Evaluate of undefined";
  return new Evaluate(std::move(value));
}

Stmt AttrStmt::make(std::string key, Expr value, Stmt body) {
  KILN_CHECK(value.defined() && body.defined()) << "AttrStmt with an undefined part";
  return new AttrStmt(std::move(key), std::move(value), std::move(body));
}

Stmt AssertStmt::make(Expr condition, std::string message, Stmt body) {
  KILN_CHECK(condition.defined() && condition.dtype().is_bool() && body.defined()) << "AssertStmt needs a bool condition and a body";
  return new AssertStmt(std::move(condition), std::move(message), std::move(body));
}

Stmt make_nop() { return Evaluate::make(0); }

bool is_nop(const Stmt& s) {
  if (!s.defined()) return true;
  const Evaluate* e = s.as<Evaluate>();
  return e && as_const_int(e->value);
}

Buffer Buffer::make(std::string name, DataType dtype, std::vector<Expr> shape, std::string scope, std::vector<Expr> strides) {
  KILN_CHECK(dtype.is_scalar()) << "buffer " << name << " of vector type " << dtype.str();
  KILN_CHECK(strides.empty() || strides.size() == shape.size()) << "buffer " << name << " has " << strides.size() << " strides for " << shape.size() << " dimensions";
  Var data(name, DataType::Handle());
  return new BufferNode(std::move(name), dtype, std::move(shape), std::move(strides), std::move(data), std::move(scope));
}

Expr Buffer::num_elements() const {
  Expr n = IntImm::make(DataType::Int(32), 1);
  for (const Expr& e : shape()) n = is_one(n) ? e : Mul::make(n, e);
  return n;
}

std::vector<Expr> Buffer::effective_strides() const {
  if (!get()->strides.empty()) return get()->strides;
  std::vector<Expr> strides(shape().size());
  Expr acc = IntImm::make(DataType::Int(32), 1);
  for (int i = ndim() - 1; i >= 0; --i) {
    strides[i] = acc;
    acc = is_one(acc) ? shape()[i] : Mul::make(acc, shape()[i]);
  }
  return strides;
}

PrimFunc PrimFunc::make(std::string name, std::vector<Param> params, Stmt body) {
  KILN_CHECK(body.defined()) << "function " << name << " without a body";
  return new PrimFuncNode(std::move(name), std::move(params), std::move(body));
}

PrimFunc PrimFunc::with_body(Stmt body) const {
  if (body.same_as(this->body())) return *this;
  return make(name(), params(), std::move(body));
}

}  // namespace kiln
