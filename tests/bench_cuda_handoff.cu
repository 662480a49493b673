// bench-cuda-handoff: the fixed cost of handing a layer between the host and
// the GPU, measured piece by piece — what a split layer pays besides reading
// its weights (CudaModelBackend: one graph launch, x copied out, an event
// the host spins on, the host's sum copied back in). Each figure is the mean
// over many iterations, in microseconds:
//
//   launch+sync     an empty graph (one tiny kernel) launched, stream synchronized
//   launch+event    the same, the host spinning on an event recorded in the graph
//   x out + event   a graph copying 16 KiB to pinned memory, then an event
//                   (the host's wait for a split layer's x)
//   round trip      x out + event, then a graph copying 16 KiB in and adding it
//                   (a split layer's whole handshake, with no compute)
//   flag            a kernel writing a flag into mapped pinned memory, the host
//                   polling it (no driver call in the wait)
//   per node        the GPU time per kernel node in a graph of 64 tiny kernels
//
// Markdown table on stdout.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace {

constexpr int kIters = 2000;
constexpr size_t kBytes = 16384;

__global__ void Tiny(float* p) {
  if (threadIdx.x == 0) p[0] += 1.0f;
}
__global__ void AddKernel(float* y, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}
__global__ void WriteFlag(volatile int* flag, int value) {
  __threadfence_system();
  *flag = value;
}

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  fprintf(stderr, "bench-cuda-handoff: %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudaGraphExec_t Capture(cudaStream_t s, const std::function<void()>& work) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  Ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  work();
  Ok(cudaStreamEndCapture(s, &g), "capture");
  Ok(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  cudaGraphDestroy(g);
  return exec;
}

void Spin(cudaEvent_t e) {
  for (;;) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return;
    if (r != cudaErrorNotReady) Ok(r, "event");
  }
}

// Mean microseconds of `iters` runs of f (after 50 warmups).
double Time(const std::function<void()>& f, int iters = kIters) {
  for (int i = 0; i < 50; ++i) f();
  const double t0 = Now();
  for (int i = 0; i < iters; ++i) f();
  return (Now() - t0) / iters * 1e6;
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    fprintf(stderr, "bench-cuda-handoff: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t s;
  Ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  float *d_x, *d_y, *h_x, *h_y;
  int* h_flag;
  Ok(cudaMalloc(&d_x, kBytes), "malloc");
  Ok(cudaMalloc(&d_y, kBytes), "malloc");
  Ok(cudaMallocHost(&h_x, kBytes), "pinned");
  Ok(cudaMallocHost(&h_y, kBytes), "pinned");
  Ok(cudaHostAlloc(&h_flag, sizeof(int), cudaHostAllocMapped), "mapped");
  int* d_flag = nullptr;
  Ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_flag), h_flag, 0), "mapped pointer");
  cudaEvent_t ev;
  Ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
  const int floats = static_cast<int>(kBytes / 4);

  cudaGraphExec_t empty = Capture(s, [&] { Tiny<<<1, 32, 0, s>>>(d_y); });
  cudaGraphExec_t empty_ev = Capture(s, [&] {
    Tiny<<<1, 32, 0, s>>>(d_y);
    cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal);
  });
  cudaGraphExec_t x_out = Capture(s, [&] {
    Tiny<<<1, 32, 0, s>>>(d_x);
    cudaMemcpyAsync(h_x, d_x, kBytes, cudaMemcpyDeviceToHost, s);
    cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal);
  });
  cudaGraphExec_t y_in = Capture(s, [&] {
    cudaMemcpyAsync(d_y, h_y, kBytes, cudaMemcpyHostToDevice, s);
    AddKernel<<<(floats + 255) / 256, 256, 0, s>>>(d_x, d_y, floats);
  });
  cudaGraphExec_t nodes64 = Capture(s, [&] {
    for (int i = 0; i < 64; ++i) Tiny<<<1, 32, 0, s>>>(d_y);
  });

  printf("device: %s; %d iterations each, 16 KiB copies, pinned host memory\n\n", prop.name,
         kIters);
  printf("| what | us |\n|---|---:|\n");
  printf("| launch+sync | %.2f |\n", Time([&] {
           cudaGraphLaunch(empty, s);
           Ok(cudaStreamSynchronize(s), "sync");
         }));
  printf("| launch+event (spin) | %.2f |\n", Time([&] {
           cudaGraphLaunch(empty_ev, s);
           Spin(ev);
         }));
  printf("| x out + event (spin) | %.2f |\n", Time([&] {
           cudaGraphLaunch(x_out, s);
           Spin(ev);
         }));
  printf("| round trip: x out + event, y in + add, sync | %.2f |\n", Time([&] {
                                                                       cudaGraphLaunch(x_out, s);
                                                                       Spin(ev);
                                                                       cudaGraphLaunch(y_in, s);
                                                                     }) + 0.0);
  Ok(cudaStreamSynchronize(s), "sync");
  int value = 0;
  printf("| flag: kernel writes mapped pinned flag, host polls | %.2f |\n", Time([&] {
           ++value;
           WriteFlag<<<1, 1, 0, s>>>(d_flag, value);
           while (*static_cast<volatile int*>(h_flag) != value) {
           }
         }));
  Ok(cudaStreamSynchronize(s), "sync");
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0, s);
  for (int i = 0; i < 200; ++i) cudaGraphLaunch(nodes64, s);
  cudaEventRecord(t1, s);
  Ok(cudaEventSynchronize(t1), "nodes");
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  printf("| per node (GPU time, graph of 64 tiny kernels) | %.2f |\n", ms * 1e3 / (200 * 64));
  cudaEventRecord(t0, s);
  for (int i = 0; i < 2000; ++i) cudaGraphLaunch(empty, s);
  cudaEventRecord(t1, s);
  Ok(cudaEventSynchronize(t1), "graphs");
  cudaEventElapsedTime(&ms, t0, t1);
  printf("| per graph launch, back to back (GPU time, 1 node each) | %.2f |\n", ms * 1e3 / 2000);
  return 0;
}
