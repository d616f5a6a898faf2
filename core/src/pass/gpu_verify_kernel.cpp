// verify_gpu_kernel: checks the kernel shape of kiln/pass/gpu.h, and the
// small helpers the GPU passes, codegen and simulator share.
#include "kiln/ir/functor.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/gpu.h"
#include "kiln/support/error.h"

namespace kiln::pass {

static int tag_index(const std::string& tag, const std::string& prefix) {
  if (tag.size() != prefix.size() + 2 || tag.compare(0, prefix.size(), prefix) != 0 || tag[prefix.size()] != '.') return -1;
  char c = tag.back();
  return c >= 'x' && c <= 'z' ? c - 'x' : -1;
}

int block_dim_index(const std::string& tag) { return tag_index(tag, "blockIdx"); }
int thread_dim_index(const std::string& tag) { return tag_index(tag, "threadIdx"); }

bool has_thread_loop(const Stmt& s) {
  bool found = false;
  post_order_visit(s, [](const Expr&) {}, [&](const Stmt& st) {
    const For* f = st.as<For>();
    found = found || (f && f->kind == ForKind::ThreadBinding && thread_dim_index(f->thread_tag) >= 0);
  });
  return found;
}

Stmt make_sync_threads() { return Evaluate::make(Call::make(DataType::Int(32), Intrinsic::SyncThreads, {StringImm::make("shared")})); }

bool is_sync_threads(const Stmt& s) {
  const Evaluate* e = s.as<Evaluate>();
  const Call* c = e ? e->value.as<Call>() : nullptr;
  return c && c->op == Intrinsic::SyncThreads;
}

namespace {

// Walks the kernel keeping where it is: outside the block nest, at block
// level, or inside a thread nest; and which tags the current nest binds.
class KernelVerifier : public IRVisitor {
 public:
  explicit KernelVerifier(std::string name) : name_(std::move(name)) {}
  int block_nests = 0;

 protected:
  using IRVisitor::visit;

  void visit(const For* op) override {
    bool is_block = op->kind == ForKind::ThreadBinding && block_dim_index(op->thread_tag) >= 0;
    bool is_thread = op->kind == ForKind::ThreadBinding && thread_dim_index(op->thread_tag) >= 0;
    const std::string& loop = op->loop_var.name();
    KILN_USER_CHECK(op->kind != ForKind::ThreadBinding || is_block || is_thread)
        << "kernel '" << name_ << "': loop '" << loop << "' is bound to '" << op->thread_tag << "'; a cuda kernel binds blockIdx.x/y/z and threadIdx.x/y/z";
    if (!in_block_) {
      KILN_USER_CHECK(!is_thread) << "kernel '" << name_ << "': loop '" << loop << "' is bound to " << op->thread_tag << " but lies outside every blockIdx-bound loop; "
                                  << "bind an outer loop to blockIdx.x (s[T].bind(outer, \"blockIdx.x\")) so the thread loops sit inside a block";
      KILN_USER_CHECK(is_block) << "kernel '" << name_ << "': loop '" << loop << "' is not bound and lies outside every blockIdx-bound loop, so no GPU block would run it; "
                                << "bind it to a block index (s[T].bind(" << loop << ", \"blockIdx.x\")), or split it and bind the outer part, or move it inside a bound loop";
      ++block_nests;
      KILN_USER_CHECK(block_nests == 1) << "kernel '" << name_ << "' has " << block_nests << " separate blockIdx loop nests (the second at loop '" << loop << "'); "
                                        << "one function is one kernel: compute the other stages at a loop of the output's block nest (compute_at), or build them as separate kernels";
    }
    if (is_block) {
      KILN_USER_CHECK(!in_thread_) << "kernel '" << name_ << "': loop '" << loop << "' is bound to " << op->thread_tag << " inside a threadIdx-bound loop; block loops must enclose the thread loops (reorder them)";
    }
    if (is_block || is_thread) {
      int bit = (is_block ? 0 : 3) + (is_block ? block_dim_index(op->thread_tag) : thread_dim_index(op->thread_tag));
      KILN_USER_CHECK(!(bound_ & (1 << bit))) << "kernel '" << name_ << "': loop '" << loop << "' is bound to " << op->thread_tag
                                              << " inside another loop bound to the same index; bind it to another dimension (" << (is_block ? "blockIdx" : "threadIdx") << ".y) or fuse the two loops first";
      int saved = bound_;
      bool saved_block = in_block_, saved_thread = in_thread_;
      bound_ |= 1 << bit;
      in_block_ = true;
      in_thread_ = in_thread_ || is_thread;
      IRVisitor::visit(op);
      bound_ = saved, in_block_ = saved_block, in_thread_ = saved_thread;
      // Leaving a thread nest: its tags are free for the next sibling nest.
      return;
    }
    IRVisitor::visit(op);
  }

  void visit(const Allocate* op) override {
    KILN_USER_CHECK(!(in_thread_ && op->buffer.scope() == "shared"))
        << "kernel '" << name_ << "': shared buffer '" << op->buffer.name() << "' is allocated inside a threadIdx-bound loop, so each thread would see its own copy; "
        << "compute it at a loop outside the thread loops (a block-level loop such as the reduction's outer loop)";
    KILN_USER_CHECK(in_block_ || op->buffer.scope() == "global")
        << "kernel '" << name_ << "': " << op->buffer.scope() << " buffer '" << op->buffer.name() << "' is allocated outside the blockIdx loops; compute it at a loop inside the block nest";
    IRVisitor::visit(op);
  }

  void visit(const BufferStore* op) override {
    KILN_USER_CHECK(in_block_) << "kernel '" << name_ << "': a store to '" << op->buffer.name() << "' lies outside every blockIdx-bound loop; bind the loops of its stage to blockIdx/threadIdx";
    IRVisitor::visit(op);
  }

  void visit(const Call* op) override {
    KILN_USER_CHECK(!(in_thread_ && op->op == Intrinsic::ThreadAllreduce))
        << "kernel '" << name_ << "': a thread_allreduce inside a threadIdx-bound loop; the collective stands at block level, where every thread of the block reaches it "
        << "(lower_thread_allreduce places it so)";
    IRVisitor::visit(op);
  }

  void visit(const Evaluate* op) override {
    KILN_USER_CHECK(!(in_thread_ && is_sync_threads(Stmt(op))))
        << "kernel '" << name_ << "': a barrier (sync_threads) inside a threadIdx-bound loop; barriers stand at block level, where every thread reaches them";
    IRVisitor::visit(op);
  }

 private:
  std::string name_;
  bool in_block_ = false, in_thread_ = false;
  int bound_ = 0;
};

}  // namespace

void verify_gpu_kernel(const PrimFunc& f) {
  KernelVerifier v(f.name());
  v.visit_stmt(f.body());
  KILN_USER_CHECK(v.block_nests == 1) << "kernel '" << f.name() << "' has no loop bound to blockIdx; a GPU kernel needs one: bind the outer loop of the output (s[T].bind(outer, \"blockIdx.x\"))";
}

}  // namespace kiln::pass
