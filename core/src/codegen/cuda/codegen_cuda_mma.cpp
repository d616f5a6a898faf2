// Tensor cores in CUDA C: the warp matrix calls of pass::lower_tensor_core
// become nvcuda::wmma fragment operations (16x16x16, float32 accumulation),
// and each accumulator becomes an array of its warp's fragments.
#include <cstdlib>

#include "codegen_cuda.h"
#include "kiln/ir/functor.h"
#include "kiln/support/error.h"

namespace kiln::codegen::cuda_detail {

namespace {

const char* const kWmma = "nvcuda::wmma::";

// The compute capability of "sm_90" (90); 0 when the target names none.
int compute_capability(const std::string& arch) { return arch.rfind("sm_", 0) == 0 ? std::atoi(arch.c_str() + 3) : 0; }

}  // namespace

void CodeGenCUDA::scan_mma(const PrimFunc& f) {
  post_order_visit(f.body(), [&](const Expr& e) {
    pass::MmaCall m;
    if (!pass::as_mma(e, &m)) return;
    uses_mma_ = true;
    post_order_visit(m.frag, [&](const Expr& x) {
      if (const Variable* v = x.as<Variable>()) fragment_loop_vars_.insert(v);
    });
    int64_t& frags = fragments_[m.acc->buffer->data.get()];
    frags = std::max(frags, m.frags);
    for (const BufferLoad* l : {m.a, m.b, m.d})
      if (l) mma_operands_.insert(l->buffer->data.get());
    if (m.a) {
      int cc = compute_capability(target_.arch);
      bool bf16 = m.a->buffer->dtype.is_bfloat();
      KILN_USER_CHECK(cc >= (bf16 ? 80 : 70)) << "cuda codegen of '" << name_ << "': tensor cores multiply " << (bf16 ? "bfloat16" : "float16") << " from sm_" << (bf16 ? 80 : 70)
                                              << " on; the target is " << target_.str() << " (use -arch=sm_80 or newer)";
    }
  }, [](const Stmt&) {});
}

bool CodeGenCUDA::emit_fragment_allocation(const Allocate* op) {
  auto it = fragments_.find(op->buffer->data.get());
  if (it == fragments_.end()) return false;
  KILN_USER_CHECK(op->buffer.scope() == "local") << "cuda codegen of '" << name_ << "': tensor-core accumulator '" << op->buffer.name() << "' has scope '" << op->buffer.scope()
                                                 << "'; a warp's fragments live in its registers (compute the accumulator inside the kernel, in local scope)";
  std::string name = ident(op->buffer.name(), op->buffer->data.get());
  scope_[op->buffer->data.get()] = "local";
  line(std::string(kWmma) + "fragment<" + kWmma + "accumulator, 16, 16, 16, float> " + name + "[" + std::to_string(it->second) + "];");
  stmt(op->body);
  return true;
}

void CodeGenCUDA::emit_mma(const pass::MmaCall& m) {
  std::string acc = var_name(m.acc->buffer->data.get()) + "[" + expr(m.frag) + "]";
  std::string ns = kWmma;
  auto address = [&](const BufferLoad* l) { return "&" + access(l->buffer.get(), l->indices[0]); };
  if (m.op == Intrinsic::MmaFill) return line(ns + "fill_fragment(" + acc + ", " + expr(m.value) + ");");
  if (m.op == Intrinsic::MmaStore) {
    bool row = m.d_col == 1;
    return line(ns + "store_matrix_sync(" + address(m.d) + ", " + acc + ", " + std::to_string(row ? m.d_row : m.d_col) + ", " + ns + (row ? "mem_row_major" : "mem_col_major") + ");");
  }
  // The operand tiles are loaded into fragments of their own, in a scope of their own.
  std::string t = ctype(m.a->buffer->dtype);
  bool a_row = m.a_k == 1, b_row = m.b_col == 1;
  line("{");
  ++indent_;
  line(ns + "fragment<" + ns + "matrix_a, 16, 16, 16, " + t + ", " + ns + (a_row ? "row_major" : "col_major") + "> kiln_a;");
  line(ns + "fragment<" + ns + "matrix_b, 16, 16, 16, " + t + ", " + ns + (b_row ? "row_major" : "col_major") + "> kiln_b;");
  line(ns + "load_matrix_sync(kiln_a, " + address(m.a) + ", " + std::to_string(a_row ? m.a_row : m.a_k) + ");");
  line(ns + "load_matrix_sync(kiln_b, " + address(m.b) + ", " + std::to_string(b_row ? m.b_k : m.b_col) + ");");
  line(ns + "mma_sync(" + acc + ", kiln_a, kiln_b, " + acc + ");");
  --indent_;
  line("}");
}

}  // namespace kiln::codegen::cuda_detail
