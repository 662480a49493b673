// llama.cpp's matmul work on a GGUF model, through ggml-backend as llama.cpp
// loads weights (Q4_0/Q4_K into CPU_REPACK, others plain): every 2-D weight
// but token_embd times TOKENS activation vectors (1: a decode step; more: a
// prompt batch, whose output.weight product takes the last token only, as
// llama.cpp's; with `decode`, a step of TOKENS sequences decoding together,
// each wanting its logits: the head over every token), one graph per step. A lower bound on llama.cpp's time per
// step (no attention, norms, rope), to put beside `pi-bench -p 0 -n 64` or
// `-p TOKENS -n 0` on the same file (a PWRI file needs its magic changed to
// GGUF first: ggml reads only GGUF).
//
// A measurement tool, not part of the build; built as matvec.c says.
//   ./model_matmuls MODEL.gguf THREADS [SECONDS] [TOKENS] [decode]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "gguf.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: model_matmuls MODEL.gguf THREADS [SECONDS] [TOKENS] [decode]\n");
    return 2;
  }
  const char* path = argv[1];
  int threads = atoi(argv[2]);
  double secs = argc > 3 ? atof(argv[3]) : 5.0;
  const int tokens = argc > 4 ? atoi(argv[4]) : 1;
  const int decode = argc > 5 && strcmp(argv[5], "decode") == 0;
  if (tokens < 1 || tokens > 4096) {
    fprintf(stderr, "TOKENS must be 1..4096\n");
    return 2;
  }
  struct ggml_context* meta = NULL;
  struct gguf_init_params gp = {true, &meta};
  struct gguf_context* g = gguf_init_from_file(path, gp);
  if (!g) {
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  ggml_backend_t be = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(be, threads);
  ggml_backend_dev_t dev = ggml_backend_get_device(be);
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  ggml_backend_buffer_type_t plain = ggml_backend_dev_buffer_type(dev), repack = NULL;
  ggml_backend_dev_get_extra_bufts_t get_extra =
      (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
          reg, "ggml_backend_dev_get_extra_bufts");
  for (ggml_backend_buffer_type_t* b = get_extra ? get_extra(dev) : NULL; b && *b; ++b)
    if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) repack = *b;
  int n = (int)gguf_get_n_tensors(g);
  struct ggml_init_params wp = {ggml_tensor_overhead() * (n + 4), NULL, true};
  struct ggml_context* cr = ggml_init(wp);
  struct ggml_context* cp = ggml_init(wp);
  struct ggml_tensor* w[4096];
  int idx[4096];
  int nw = 0;
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    const char* name = gguf_get_tensor_name(g, i);
    struct ggml_tensor* t = ggml_get_tensor(meta, name);
    if (ggml_n_dims(t) != 2 || strcmp(name, "token_embd.weight") == 0) continue;
    if (nw == 4096) break;
    int rp = repack && (t->type == GGML_TYPE_Q4_0 || t->type == GGML_TYPE_Q4_K);
    w[nw] = ggml_dup_tensor(rp ? cr : cp, t);
    ggml_set_name(w[nw], name);
    idx[nw++] = i;
    bytes += ggml_nbytes(t);
  }
  if (repack) ggml_backend_alloc_ctx_tensors_from_buft(cr, repack);
  ggml_backend_alloc_ctx_tensors_from_buft(cp, plain);
  FILE* f = fopen(path, "rb");
  size_t data0 = gguf_get_data_offset(g);
  for (int k = 0; k < nw; ++k) {
    size_t nb = ggml_nbytes(w[k]);
    void* buf = malloc(nb);
    fseek(f, (long)(data0 + gguf_get_tensor_offset(g, idx[k])), SEEK_SET);
    if (fread(buf, 1, nb, f) != nb) return 2;
    ggml_backend_tensor_set(w[k], buf, 0, nb);
    free(buf);
  }
  struct ggml_init_params ap = {ggml_tensor_overhead() * (2 * nw + 16) + ggml_graph_overhead(),
                                NULL, true};
  struct ggml_context* ca = ggml_init(ap);
  struct ggml_cgraph* gf = ggml_new_graph(ca);
  struct ggml_tensor* xs[8];
  int64_t xn[8], xt[8];
  int nx = 0;
  for (int k = 0; k < nw; ++k) {
    /* A prompt's output head reads only the batch's last token, as
       llama.cpp's prompt processing computes logits for it alone; a
       decode step of `tokens` sequences wants every sequence's. */
    const int64_t cols =
        !decode && strcmp(ggml_get_name(w[k]), "output.weight") == 0 ? 1 : tokens;
    int j = 0;
    while (j < nx && (xn[j] != w[k]->ne[0] || xt[j] != cols)) ++j;
    if (j == nx && nx == 8) return 3; /* more distinct widths than this tool expects */
    if (j == nx) {
      xn[nx] = w[k]->ne[0];
      xt[nx] = cols;
      xs[nx++] = ggml_new_tensor_2d(ca, GGML_TYPE_F32, w[k]->ne[0], cols);
    }
    ggml_build_forward_expand(gf, ggml_mul_mat(ca, w[k], xs[j]));
  }
  ggml_backend_alloc_ctx_tensors(ca, be);
  for (int j = 0; j < nx; ++j) {
    const int64_t nv = xn[j] * xt[j];
    float* v = malloc(sizeof(float) * nv);
    for (int64_t i = 0; i < nv; ++i) v[i] = 0.001f * (float)((i * 37) % 101 - 50);
    ggml_backend_tensor_set(xs[j], v, 0, sizeof(float) * nv);
    free(v);
  }
  for (int r = 0; r < 3; ++r) ggml_backend_graph_compute(be, gf);
  long it = 0;
  double t0 = now();
  while (now() - t0 < secs) {
    ggml_backend_graph_compute(be, gf);
    ++it;
  }
  double t = now() - t0;
  printf(
      "ggml matmuls of %s t=%d x%d tokens%s: %d weights, %.1f MB, %.2f tokens/s bound "
      "(%.2f ms a step), %.2f GB/s of weights\n",
      path, threads, tokens, decode ? " (decode step)" : "", nw, bytes / 1e6, it * tokens / t, t / it * 1e3,
      it * (double)bytes / t / 1e9);
  return 0;
}
