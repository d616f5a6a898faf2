#include "kiln/tuner/openmp_policy.h"

#include <cstdlib>
#include <unistd.h>

namespace kiln::tuner {

void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace kiln::tuner
