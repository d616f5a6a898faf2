// simplify: the statement simplifier of arith, applied to a function body.
#include "kiln/arith/simplify_stmt.h"
#include "kiln/pass/passes.h"

namespace kiln::pass {

PrimFunc simplify(const PrimFunc& f) { return f.with_body(arith::simplify(f.body())); }

}  // namespace kiln::pass
