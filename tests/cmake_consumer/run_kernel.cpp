// Loads a kernel library with kiln_runtime alone and checks its results.
#include <cstdio>

#include "kiln/runtime/module.h"
#include "kiln/runtime/ndarray.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  kiln::Module m = kiln::Module::load(argv[1]);
  kiln::NDArray x = kiln::NDArray::empty({1000}, kiln::DataType::Float(32)), y = kiln::NDArray::empty({1000}, kiln::DataType::Float(32));
  for (int i = 0; i < 1000; ++i) x.data_as<float>()[i] = static_cast<float>(i);
  m.call("affine", {x, y});
  for (int i = 0; i < 1000; ++i)
    if (y.data_as<float>()[i] != 2.0f * i + 1.0f) {
      std::printf("wrong at %d: %f\n", i, y.data_as<float>()[i]);
      return 1;
    }
  std::printf("ok\n");
  return 0;
}
