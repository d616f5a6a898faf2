#include "kiln/tuner/openmp_policy.h"

#include <cstdlib>
#include <unistd.h>

// Only kiln's own process (XGBoost's threads) gets the passive policy: the
// peer libraries run through bench/peers/launcher.py, which removes
// OMP_WAIT_POLICY (and every KILN_* setting) from their environment, so
// PyTorch and OpenBLAS are timed with their default policy.
namespace kiln::tuner {

void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace kiln::tuner
