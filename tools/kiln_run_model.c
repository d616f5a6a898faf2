/* kiln_run_model: runs a model library (Executor::export_library) through
 * kiln's C API and nothing else, on whatever machine it was built for. It is
 * small on purpose: cross-compiled for a device (tests/python/test_export_aarch64.py
 * builds it with aarch64-linux-gnu-gcc against kiln_runtime built for AArch64)
 * it needs neither LLVM nor Python there.
 *
 *   kiln_run_model model.so inputs.bin outputs.bin
 *
 * inputs.bin holds every input's raw bytes, in input order (each input's
 * dtype and shape as the model declares them); outputs.bin receives every
 * output's raw bytes likewise. A static model only: a model with shape
 * variables needs their values, which this program does not take.
 * Prints one line per output and, last, the process's peak resident memory
 * ("max_rss_kib N": VmHWM of /proc/self/status, which under qemu-user is the
 * emulator's own; getrusage's maxrss is no good here, as Linux carries it
 * across exec from the process that started this one, e.g. a Python parent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime/c_api.h"

#define CHECK(call) do { if ((call) != KILN_OK) { fprintf(stderr, "kiln_run_model: %s\n", kiln_last_error()); return 1; } } while (0)

/* The peak resident set of this process in KiB (VmHWM), or -1 where /proc is missing. */
static long peak_rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kib;
}

/* A compact CPU tensor of the model's input or output `i`, its bytes in *nbytes. */
static int make_tensor(KilnModel* m, int is_input, int i, DLTensor* t, size_t* nbytes) {
  const int64_t* shape; const char* name; int ndim; DLDataType dt; int64_t n = 1;
  CHECK(is_input ? kiln_model_input_info(m, i, &name, &ndim, &shape, &dt) : kiln_model_output_info(m, i, &name, &ndim, &shape, &dt));
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  *nbytes = (size_t)n * ((dt.bits * dt.lanes + 7) / 8);
  DLTensor z = {malloc(*nbytes + 1), {kDLCPU, 0}, ndim, dt, (int64_t*)shape, NULL, 0};
  *t = z;
  if (!t->data) { fprintf(stderr, "kiln_run_model: out of memory for %s\n", name); return 1; }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: %s model.so inputs.bin outputs.bin\n", argv[0]); return 2; }
  KilnModel* m; int n_in, n_out, n_vars;
  CHECK(kiln_model_load(argv[1], &m));
  CHECK(kiln_model_num_shape_vars(m, &n_vars));
  if (n_vars) { fprintf(stderr, "kiln_run_model: %s has shape variables; this program runs static models only\n", argv[1]); return 1; }
  CHECK(kiln_model_num_inputs(m, &n_in));
  CHECK(kiln_model_num_outputs(m, &n_out));
  FILE* in = fopen(argv[2], "rb");
  if (!in) { perror(argv[2]); return 1; }
  for (int i = 0; i < n_in; ++i) {
    DLTensor x; size_t nbytes;
    if (make_tensor(m, 1, i, &x, &nbytes)) return 1;
    if (fread(x.data, 1, nbytes, in) != nbytes) { fprintf(stderr, "kiln_run_model: %s: short read at input %d\n", argv[2], i); return 1; }
    CHECK(kiln_model_set_input(m, i, &x));  /* copies: x may go */
    free(x.data);
  }
  fclose(in);
  CHECK(kiln_model_run(m));
  FILE* out = fopen(argv[3], "wb");
  if (!out) { perror(argv[3]); return 1; }
  for (int i = 0; i < n_out; ++i) {
    DLTensor y; size_t nbytes;
    if (make_tensor(m, 0, i, &y, &nbytes)) return 1;
    CHECK(kiln_model_get_output(m, i, &y));
    if (fwrite(y.data, 1, nbytes, out) != nbytes) { fprintf(stderr, "kiln_run_model: cannot write %s\n", argv[3]); return 1; }
    printf("output %d: %zu bytes\n", i, nbytes);
    free(y.data);
  }
  if (fclose(out) != 0) { perror(argv[3]); return 1; }
  kiln_model_free(m);
  printf("max_rss_kib %ld\n", peak_rss_kib());
  return 0;
}
