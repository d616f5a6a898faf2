/** \file
 * PrimFunc: the unit that lowering produces and codegen consumes. Its
 * parameters are buffers (tensor arguments) or scalar variables, in the
 * order the caller passes them.
 */
#ifndef KILN_IR_FUNCTION_H
#define KILN_IR_FUNCTION_H

#include <string>
#include <vector>

#include "kiln/ir/stmt.h"

namespace kiln {

/** One parameter: a tensor (buffer defined) or a scalar (buffer undefined, var of its dtype). */
struct Param {
  Var var;
  Buffer buffer;
  bool is_buffer() const { return buffer.defined(); }
};

struct PrimFuncNode : public Object {
  PrimFuncNode(std::string n, std::vector<Param> p, Stmt b) : name(std::move(n)), params(std::move(p)), body(std::move(b)) {}
  const std::string name;
  const std::vector<Param> params;
  const Stmt body;
};

class PrimFunc : public Ref<PrimFuncNode> {
 public:
  PrimFunc() = default;
  PrimFunc(const PrimFuncNode* n) : Ref<PrimFuncNode>(n) {}
  static PrimFunc make(std::string name, std::vector<Param> params, Stmt body);
  const std::string& name() const { return get()->name; }
  const std::vector<Param>& params() const { return get()->params; }
  const Stmt& body() const { return get()->body; }
  /** The same function with another body. */
  PrimFunc with_body(Stmt body) const;
};

}  // namespace kiln

#endif  // KILN_IR_FUNCTION_H
