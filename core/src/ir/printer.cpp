#include "kiln/ir/printer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ostream>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "kiln/support/error.h"

namespace kiln {

namespace {

// Binding strength of infix operators. A child is parenthesised when it binds
// more loosely than its position requires, so `(i*64) + j` prints `i*64 + j`
// while `i*(64 + j)` keeps its parentheses.
enum Prec : int { kOr = 1, kAnd = 2, kCmp = 3, kAdd = 4, kMul = 5, kUnary = 6, kAtom = 7 };

// Shortest text that reads back to the same value ("1.5", "1e-07", "3").
template <typename T>
std::string shortest(T v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  KILN_CHECK(ec == std::errc()) << "cannot format a float immediate";
  return std::string(buf, end);
}

std::string format_float(DataType t, double v) {
  if (std::isnan(v) || std::isinf(v)) {
    std::string s = std::isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
    return t.bits() == 64 ? s : "(" + t.str() + ")" + s;
  }
  if (t.code() == DataType::Code::Float && t.bits() == 32) return shortest(static_cast<float>(v)) + "f";
  std::string s = shortest(v);
  // A float64 that happens to be integral must not read as an int32 immediate.
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  if (t.code() == DataType::Code::Float && t.bits() == 64) return s;
  return "(" + t.str() + ")" + s;
}

std::string format_int(DataType t, int64_t v) {
  if (t.is_bool()) return v ? "true" : "false";
  std::string digits = t.is_uint() ? std::to_string(static_cast<uint64_t>(v)) : std::to_string(v);
  if (t == DataType::Int(32)) return digits;
  return "(" + t.str() + ")" + digits;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

class IRPrinter {
 public:
  explicit IRPrinter(std::ostream& os) : os_(os) {}

  void print(const Expr& e, int min_prec = 0);
  void print(const Stmt& s);
  void print(const PrimFunc& f);

 private:
  void infix(const char* op, int prec, const Expr& a, const Expr& b, int min_prec, bool assoc);
  void call(const char* name, const std::vector<Expr>& args);
  void indices(const std::vector<Expr>& idx, char open, char close);
  void predicate(const Expr& p);
  void print_buffer_type(const Buffer& b);
  void print_reduce(const Reduce* op);

  void line_start() { os_ << std::string(indent_ * 2, ' '); }
  // Prints `head {`, the body one level deeper, and the closing brace.
  void block(const Stmt& body);
  void print_for(const For* op);
  void print_if(const IfThenElse* op);

  // Two different variables with one name in scope at once (a consumer's
  // loop `i` around a producer's loop `i`) would read as one: the inner one
  // prints as `i_1`. Siblings keep their plain names.
  const std::string& name_of(const Variable* v);
  void bind(const Variable* v);
  void unbind(const Variable* v);
  /** An expression evaluated before a binding (loop bounds, let values), printed with the current names. */
  std::string print_outside(const Expr& e) {
    std::ostringstream os;
    IRPrinter sub(os);
    sub.names_ = names_;
    sub.in_scope_ = in_scope_;
    sub.print(e);
    return os.str();
  }

  std::ostream& os_;
  int indent_ = 0;
  std::unordered_map<const Variable*, std::string> names_;
  std::unordered_map<std::string, std::vector<const Variable*>> in_scope_;
};

const std::string& IRPrinter::name_of(const Variable* v) {
  auto it = names_.find(v);
  return it != names_.end() ? it->second : v->name;
}

void IRPrinter::bind(const Variable* v) {
  std::vector<const Variable*>& stack = in_scope_[v->name];
  int shadowed = 0;
  for (const Variable* o : stack) shadowed += o != v;
  names_[v] = shadowed ? v->name + "_" + std::to_string(shadowed) : v->name;
  stack.push_back(v);
}

void IRPrinter::unbind(const Variable* v) {
  std::vector<const Variable*>& stack = in_scope_[v->name];
  if (!stack.empty()) stack.pop_back();
  bool still_bound = std::find(stack.begin(), stack.end(), v) != stack.end();
  if (!still_bound) names_.erase(v);
}

void IRPrinter::infix(const char* op, int prec, const Expr& a, const Expr& b, int min_prec, bool assoc) {
  bool paren = prec < min_prec;
  if (paren) os_ << "(";
  // Left-associative operators accept an equal-precedence left child without
  // parentheses; comparisons are not associative, so both sides need them.
  // `&&` inside `||` is parenthesised although precedence makes it
  // unambiguous: readers (and -Wparentheses) expect it spelled out.
  auto child_prec = [&](const Expr& c, int p) { return prec == kOr && c.as<And>() ? kAtom : p; };
  print(a, child_prec(a, assoc ? prec : prec + 1));
  os_ << op;
  print(b, child_prec(b, prec + 1));
  if (paren) os_ << ")";
}

void IRPrinter::call(const char* name, const std::vector<Expr>& args) {
  os_ << name;
  indices(args, '(', ')');
}

void IRPrinter::indices(const std::vector<Expr>& idx, char open, char close) {
  os_ << open;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (i) os_ << ", ";
    print(idx[i]);
  }
  os_ << close;
}

// A predicated (masked) access: A[ramp(i, 1, 8)] if (ramp(0, 1, 8) < broadcast(n, 8)).
void IRPrinter::predicate(const Expr& p) {
  os_ << " if (";
  print(p);
  os_ << ")";
}

void IRPrinter::print_reduce(const Reduce* op) {
  os_ << reduce_kind_name(op->reduce_kind) << "(";
  print(op->source);
  os_ << ", axis=[";
  for (size_t i = 0; i < op->axis.size(); ++i) os_ << (i ? ", " : "") << op->axis[i].name();
  os_ << "]";
  if (!is_const_int(op->condition, 1)) {
    os_ << ", where=";
    print(op->condition);
  }
  os_ << ")";
}

void IRPrinter::print(const Expr& e, int min_prec) {
  if (!e.defined()) {
    os_ << "<undefined>";
    return;
  }
  switch (e->kind) {
    case IRNodeKind::IntImm: {
      const IntImm* op = e.as<IntImm>();
      os_ << format_int(op->dtype, op->value);
      return;
    }
    case IRNodeKind::FloatImm: {
      const FloatImm* op = e.as<FloatImm>();
      os_ << format_float(op->dtype, op->value);
      return;
    }
    case IRNodeKind::StringImm: os_ << quote(e.as<StringImm>()->value); return;
    case IRNodeKind::Variable: os_ << name_of(e.as<Variable>()); return;
    case IRNodeKind::Add: return infix(" + ", kAdd, e.as<Add>()->a, e.as<Add>()->b, min_prec, true);
    case IRNodeKind::Sub: return infix(" - ", kAdd, e.as<Sub>()->a, e.as<Sub>()->b, min_prec, true);
    // Products stay tight (`i*64 + j`) so the additive structure of index math stands out.
    case IRNodeKind::Mul: return infix("*", kMul, e.as<Mul>()->a, e.as<Mul>()->b, min_prec, true);
    case IRNodeKind::Div: return infix(" / ", kMul, e.as<Div>()->a, e.as<Div>()->b, min_prec, true);
    case IRNodeKind::Mod: return infix(" % ", kMul, e.as<Mod>()->a, e.as<Mod>()->b, min_prec, true);
    case IRNodeKind::FloorDiv: return call("floordiv", {e.as<FloorDiv>()->a, e.as<FloorDiv>()->b});
    case IRNodeKind::FloorMod: return call("floormod", {e.as<FloorMod>()->a, e.as<FloorMod>()->b});
    case IRNodeKind::Min: return call("min", {e.as<Min>()->a, e.as<Min>()->b});
    case IRNodeKind::Max: return call("max", {e.as<Max>()->a, e.as<Max>()->b});
    case IRNodeKind::EQ: return infix(" == ", kCmp, e.as<EQ>()->a, e.as<EQ>()->b, min_prec, false);
    case IRNodeKind::NE: return infix(" != ", kCmp, e.as<NE>()->a, e.as<NE>()->b, min_prec, false);
    case IRNodeKind::LT: return infix(" < ", kCmp, e.as<LT>()->a, e.as<LT>()->b, min_prec, false);
    case IRNodeKind::LE: return infix(" <= ", kCmp, e.as<LE>()->a, e.as<LE>()->b, min_prec, false);
    case IRNodeKind::GT: return infix(" > ", kCmp, e.as<GT>()->a, e.as<GT>()->b, min_prec, false);
    case IRNodeKind::GE: return infix(" >= ", kCmp, e.as<GE>()->a, e.as<GE>()->b, min_prec, false);
    case IRNodeKind::And: return infix(" && ", kAnd, e.as<And>()->a, e.as<And>()->b, min_prec, true);
    case IRNodeKind::Or: return infix(" || ", kOr, e.as<Or>()->a, e.as<Or>()->b, min_prec, true);
    case IRNodeKind::Not: {
      bool paren = kUnary < min_prec;
      os_ << (paren ? "(!" : "!");
      print(e.as<Not>()->a, kUnary);
      if (paren) os_ << ")";
      return;
    }
    case IRNodeKind::Select: {
      const Select* op = e.as<Select>();
      return call("select", {op->condition, op->true_value, op->false_value});
    }
    case IRNodeKind::Cast: return call(e.dtype().str().c_str(), {e.as<Cast>()->value});
    case IRNodeKind::Call: return call(intrinsic_name(e.as<Call>()->op), e.as<Call>()->args);
    case IRNodeKind::BufferLoad: {
      const BufferLoad* op = e.as<BufferLoad>();
      os_ << op->buffer->name;
      indices(op->indices, '[', ']');
      if (op->predicate.defined()) predicate(op->predicate);
      return;
    }
    case IRNodeKind::TensorLoad: {
      const TensorLoad* op = e.as<TensorLoad>();
      os_ << op->producer->producer_name();
      return indices(op->indices, '(', ')');
    }
    case IRNodeKind::Ramp: {
      const Ramp* op = e.as<Ramp>();
      os_ << "ramp(";
      print(op->base);
      os_ << ", ";
      print(op->stride);
      os_ << ", " << op->lanes << ")";
      return;
    }
    case IRNodeKind::Broadcast: {
      const Broadcast* op = e.as<Broadcast>();
      os_ << "x" << op->lanes << "(";
      print(op->value);
      os_ << ")";
      return;
    }
    case IRNodeKind::Let: {
      const Let* op = e.as<Let>();
      std::string value = print_outside(op->value);
      bind(op->var.get());
      os_ << "(let " << name_of(op->var.get()) << " = " << value << " in ";
      print(op->body);
      os_ << ")";
      unbind(op->var.get());
      return;
    }
    case IRNodeKind::Reduce: return print_reduce(e.as<Reduce>());
    case IRNodeKind::For:
    case IRNodeKind::BufferStore:
    case IRNodeKind::Allocate:
    case IRNodeKind::Seq:
    case IRNodeKind::IfThenElse:
    case IRNodeKind::LetStmt:
    case IRNodeKind::Evaluate:
    case IRNodeKind::AttrStmt:
    case IRNodeKind::AssertStmt: break;
  }
  KILN_UNREACHABLE() << "statement node " << ir_node_kind_name(e->kind) << " printed as an expression";
}

void IRPrinter::block(const Stmt& body) {
  os_ << " {\n";
  ++indent_;
  print(body);
  --indent_;
  line_start();
  os_ << "}\n";
}

void IRPrinter::print_for(const For* op) {
  line_start();
  switch (op->kind) {
    case ForKind::Serial: os_ << "for"; break;
    case ForKind::ThreadBinding: os_ << "thread_binding[" << op->thread_tag << "]"; break;
    case ForKind::Parallel:
    case ForKind::Vectorized:
    case ForKind::Unrolled: os_ << for_kind_name(op->kind); break;
  }
  os_ << " (";
  // The bounds are evaluated outside the loop: print them before binding its variable.
  std::string bounds = print_outside(op->min) + ", " + print_outside(op->extent);
  bind(op->loop_var.get());
  os_ << name_of(op->loop_var.get()) << ", " << bounds << ")";
  block(op->body);
  unbind(op->loop_var.get());
}

void IRPrinter::print_if(const IfThenElse* op) {
  os_ << "if (";
  print(op->condition);
  os_ << ") {\n";
  ++indent_;
  print(op->then_case);
  --indent_;
  line_start();
  if (!op->else_case.defined()) {
    os_ << "}\n";
    return;
  }
  // Chains of else-if read flat instead of marching to the right.
  if (const IfThenElse* next = op->else_case.as<IfThenElse>()) {
    os_ << "} else ";
    return print_if(next);
  }
  os_ << "} else";
  block(op->else_case);
}

void IRPrinter::print_buffer_type(const Buffer& b) {
  os_ << b.dtype().str() << "[";
  for (int i = 0; i < b.ndim(); ++i) {
    if (i) os_ << ", ";
    print(b.shape()[i]);
  }
  os_ << "]";
}

void IRPrinter::print(const Stmt& s) {
  if (!s.defined()) {
    line_start();
    os_ << "<undefined>\n";
    return;
  }
  switch (s->kind) {
    case IRNodeKind::For: return print_for(s.as<For>());
    case IRNodeKind::BufferStore: {
      const BufferStore* op = s.as<BufferStore>();
      line_start();
      os_ << op->buffer.name();
      indices(op->indices, '[', ']');
      if (op->predicate.defined()) predicate(op->predicate);
      os_ << " = ";
      print(op->value);
      os_ << "\n";
      return;
    }
    case IRNodeKind::Allocate: {
      const Buffer& b = s.as<Allocate>()->buffer;
      line_start();
      os_ << "allocate " << b.name();
      if (!b.scope().empty()) os_ << "." << b.scope();
      os_ << "[" << b.dtype().str();
      // Operands of `*` bind at least as tightly as a product, so `n + 1` gets parentheses.
      for (const Expr& d : b.shape()) {
        os_ << " * ";
        print(d, kUnary);
      }
      os_ << "]";
      return block(s.as<Allocate>()->body);
    }
    case IRNodeKind::Seq:
      for (const Stmt& x : s.as<Seq>()->seq) print(x);
      return;
    case IRNodeKind::IfThenElse:
      line_start();
      return print_if(s.as<IfThenElse>());
    case IRNodeKind::LetStmt: {
      // The body follows at the same depth: a let scopes to the end of its block.
      const LetStmt* op = s.as<LetStmt>();
      line_start();
      std::string value = print_outside(op->value);
      bind(op->var.get());
      os_ << "let " << name_of(op->var.get()) << " = " << value << "\n";
      print(op->body);
      unbind(op->var.get());
      return;
    }
    case IRNodeKind::Evaluate:
      line_start();
      print(s.as<Evaluate>()->value);
      os_ << "\n";
      return;
    case IRNodeKind::AttrStmt: {
      const AttrStmt* op = s.as<AttrStmt>();
      line_start();
      os_ << "attr " << op->key << " = ";
      print(op->value);
      return block(op->body);
    }
    case IRNodeKind::AssertStmt: {
      const AssertStmt* op = s.as<AssertStmt>();
      line_start();
      os_ << "assert(";
      print(op->condition);
      os_ << ", " << quote(op->message) << ")\n";
      return print(op->body);
    }
#define KILN_X(T) case IRNodeKind::T:
    KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
    break;
  }
  KILN_UNREACHABLE() << "expression node " << ir_node_kind_name(s->kind) << " printed as a statement";
}

void IRPrinter::print(const PrimFunc& f) {
  line_start();
  os_ << "func " << f.name() << "(";
  for (size_t i = 0; i < f.params().size(); ++i) {
    const Param& p = f.params()[i];
    if (i) os_ << ", ";
    if (p.is_buffer()) {
      os_ << p.buffer.name() << ": ";
      print_buffer_type(p.buffer);
    } else {
      os_ << p.var.name() << ": " << p.var.dtype().str();
    }
  }
  os_ << ")";
  block(f.body());
}

}  // namespace

std::string to_string(const Expr& e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

std::string to_string(const Stmt& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

std::string to_string(const PrimFunc& f) {
  std::ostringstream os;
  os << f;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Expr& e) {
  IRPrinter(os).print(e);
  return os;
}

std::ostream& operator<<(std::ostream& os, const Stmt& s) {
  IRPrinter(os).print(s);
  return os;
}

std::ostream& operator<<(std::ostream& os, const PrimFunc& f) {
  if (!f.defined()) return os << "<undefined function>\n";
  IRPrinter(os).print(f);
  return os;
}

}  // namespace kiln
