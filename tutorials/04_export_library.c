/* Tutorial 4 (the C side): run a model exported by kiln with nothing but
 * libkiln_runtime. Built and run by 04_export_library.py; by hand:
 *   cc -std=c99 -I<repo>/include 04_export_library.c -L<build> -lkiln_runtime -Wl,-rpath,<build> -o run_model
 *   ./run_model model.so [inputs.bin [outputs.bin]]
 * Inputs (float32) come from inputs.bin (all inputs' raw bytes, in order) or,
 * without it, the pattern x[i] = (i % 17) / 8 - 1. The outputs' first values
 * are printed, and all their raw bytes written to outputs.bin when given. */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/runtime/c_api.h"

#define CHECK(call) do { if ((call) != KILN_OK) { fprintf(stderr, "%s\n", kiln_last_error()); return 1; } } while (0)

/* A compact CPU float32 tensor of the model's input or output `i`. */
static int make_tensor(KilnModel* m, int is_input, int i, DLTensor* t, const char** name) {
  const int64_t* shape; int ndim; DLDataType dt; int64_t n = 1;
  CHECK(is_input ? kiln_model_input_info(m, i, name, &ndim, &shape, &dt) : kiln_model_output_info(m, i, name, &ndim, &shape, &dt));
  if (dt.code != kDLFloat || dt.bits != 32) { fprintf(stderr, "%s: this program handles float32 only\n", *name); return 1; }
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  DLTensor z = {malloc((size_t)n * 4 + 4), {kDLCPU, 0}, ndim, dt, (int64_t*)shape, NULL, 0};
  *t = z;
  return t->data == NULL;
}

static int64_t numel(const DLTensor* t) { int64_t n = 1; for (int d = 0; d < t->ndim; ++d) n *= t->shape[d]; return n; }

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s model.so [inputs.bin [outputs.bin]]\n", argv[0]); return 2; }
  KilnModel* m; int n_in, n_out; const char* name;
  CHECK(kiln_model_load(argv[1], &m));
  CHECK(kiln_model_num_inputs(m, &n_in));
  CHECK(kiln_model_num_outputs(m, &n_out));
  FILE* in = argc > 2 ? fopen(argv[2], "rb") : NULL;
  if (argc > 2 && !in) { perror(argv[2]); return 1; }
  for (int i = 0; i < n_in; ++i) {
    DLTensor x;
    if (make_tensor(m, 1, i, &x, &name)) return 1;
    float* v = (float*)x.data;
    for (int64_t k = 0; k < numel(&x); ++k) v[k] = (float)(k % 17) / 8.0f - 1.0f;
    if (in && fread(v, 4, (size_t)numel(&x), in) != (size_t)numel(&x)) { fprintf(stderr, "%s: short read\n", argv[2]); return 1; }
    CHECK(kiln_model_set_input(m, i, &x));  /* copies: x may go */
    free(x.data);
  }
  CHECK(kiln_model_run(m));
  FILE* out = argc > 3 ? fopen(argv[3], "wb") : NULL;
  for (int i = 0; i < n_out; ++i) {
    DLTensor y;
    if (make_tensor(m, 0, i, &y, &name)) return 1;
    CHECK(kiln_model_get_output(m, i, &y));
    const float* v = (const float*)y.data;
    printf("%s [%lld values]:", name, (long long)numel(&y));
    for (int64_t k = 0; k < numel(&y) && k < 5; ++k) printf(" %.6f", v[k]);
    printf("\n");
    if (out) fwrite(v, 4, (size_t)numel(&y), out);
    free(y.data);
  }
  if (in) fclose(in);
  if (out) fclose(out);
  kiln_model_free(m);
  return 0;
}
