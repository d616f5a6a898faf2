// Compiles y = 2 * x + 1 over 1000 floats with kiln and exports it as a library.
#include <cstdio>

#include "kiln/driver/build.h"
#include "kiln/ir/op.h"
#include "kiln/te/operation.h"
#include "kiln/te/schedule.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  using namespace kiln;
  te::Tensor x = te::placeholder({1000}, DataType::Float(32), "x");
  te::Tensor y = te::compute({1000}, [&](const std::vector<Var>& i) { return x(i[0]) * Expr(2.0f) + Expr(1.0f); }, "y");
  te::Schedule s = te::create_schedule({y});
  Module m = build(s, {x, y}, "llvm", "affine");
  m.export_library(argv[1]);
  std::printf("exported %s\n", argv[1]);
  return 0;
}
