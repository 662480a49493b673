// ggml's CPU mat-vec on a 4096 x 11008 matrix (a 7B FFN gate/up), to put
// beside pi's `bench-kernels --benchmark_filter=MatVec`: copies spread over
// 512 MiB so every product streams from DRAM; prints GB/s of weight bytes.
// Weights are loaded as llama.cpp loads them: Q4_0/Q4_K into the CPU_REPACK
// buffer type (re-laid for its interleaved GEMV kernels), others plain.
//
// A measurement tool, not part of the build. With a ggml checkout in G:
//   cmake -S G -B B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON
//         -DBUILD_SHARED_LIBS=OFF && ninja -C B ggml ggml-cpu
//   gcc -O2 -IG/include matvec.c -o matvec B/src/libggml.a B/src/libggml-cpu.a
//       B/src/libggml-base.a -lstdc++ -lm -lpthread -fopenmp
//   ./matvec TYPE THREADS [SECONDS]   # TYPE: ggml_type id (2 q4_0, 12 q4_K, 13 q5_K, 14 q6_K)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int cols = 4096, rows = 11008;
  enum ggml_type type = (enum ggml_type)(argc > 1 ? atoi(argv[1]) : 0);
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  double secs = argc > 3 ? atof(argv[3]) : 2.0;
  if (argc < 3) {
    fprintf(stderr, "usage: matvec TYPE THREADS [SECONDS]\n");
    return 2;
  }
  const int use_repack = type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_K;
  ggml_backend_t be = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(be, threads);
  ggml_backend_dev_t dev = ggml_backend_get_device(be);
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
  ggml_backend_dev_get_extra_bufts_t get_extra =
      (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
          reg, "ggml_backend_dev_get_extra_bufts");
  if (use_repack && get_extra) {
    for (ggml_backend_buffer_type_t* b = get_extra(dev); b && *b; ++b) {
      if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) buft = *b;
    }
  }
  size_t row_bytes = ggml_row_size(type, cols);
  size_t mat = row_bytes * rows;
  int copies = (int)((512u << 20) / mat);
  struct ggml_init_params wp = {ggml_tensor_overhead() * (copies + 4), NULL, true};
  struct ggml_context* cw = ggml_init(wp);
  struct ggml_tensor* w[64];
  for (int c = 0; c < copies; ++c) w[c] = ggml_new_tensor_2d(cw, type, cols, rows);
  ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(cw, buft);
  float* src = malloc(sizeof(float) * cols * 64);
  for (int i = 0; i < cols * 64; ++i) src[i] = (float)((i * 37) % 101 - 50) * 0.01f;
  char* q = malloc(mat);
  for (int r = 0; r < rows; r += 64)
    ggml_quantize_chunk(type, src, q + r * row_bytes, 0, 64 < rows - r ? 64 : rows - r, cols, NULL);
  for (int c = 0; c < copies; ++c) ggml_backend_tensor_set(w[c], q, 0, mat);
  struct ggml_init_params ap = {
      ggml_tensor_overhead() * (3 * copies + 8) + ggml_graph_overhead() * copies, NULL, true};
  struct ggml_context* ca = ggml_init(ap);
  struct ggml_tensor* x = ggml_new_tensor_1d(ca, GGML_TYPE_F32, cols);
  struct ggml_cgraph* gf[64];
  for (int c = 0; c < copies; ++c) {
    struct ggml_tensor* y = ggml_mul_mat(ca, w[c], x);
    gf[c] = ggml_new_graph(ca);
    ggml_build_forward_expand(gf[c], y);
  }
  ggml_backend_buffer_t abuf = ggml_backend_alloc_ctx_tensors(ca, be);
  float* xv = malloc(sizeof(float) * cols);
  for (int i = 0; i < cols; ++i) xv[i] = 0.001f * (float)((i * 37) % 101 - 50);
  ggml_backend_tensor_set(x, xv, 0, sizeof(float) * cols);
  for (int c = 0; c < copies; ++c) ggml_backend_graph_compute(be, gf[c]);
  long it = 0;
  double t0 = now();
  while (now() - t0 < secs) {
    ggml_backend_graph_compute(be, gf[it % copies]);
    ++it;
  }
  double t = now() - t0;
  printf("ggml-backend %s %s t=%d: %.2f GB/s (%.3f ms per matvec)\n", ggml_backend_buft_name(buft),
         ggml_type_name(type), threads, it * (double)mat / t / 1e9, t / it * 1e3);
  (void)wbuf;
  (void)abuf;
  return 0;
}
