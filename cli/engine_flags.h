// The flags that build an engine, shared by pi-run and pi-launch, and the
// load they drive: the model (checked with --check-tensors), its tokenizer,
// the placement (--vram-budget ...), local cpu_workers and the engine.
//   -m, --model FILE   -t N   -c N   -b N   -ctk/-ctv TYPE   --sparse MODE
//   --sparse-threshold X   --target-sparsity F   --check-tensors   --cpu-workers N (gpu_split.h's)
//   --cpu-worker HOST:PORT (repeatable)   --remote-gpu-worker HOST:PORT
//   --auth-token-file F   --tls-ca F
//   --tls-cert F   --tls-key F   --worker-timeout MS   --coordinator-share F
//   -md, --model-draft FILE and the --draft-* flags (draft_flags.h)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/draft_flags.h"
#include "cli/gpu_split.h"
#include "cli/sparse_note.h"
#include "cli/worker_secrets.h"
#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/topology/topology.h"

namespace pi {

struct EngineFlags {
  std::string model_path;  // empty: the bundled demo model
  EngineOptions opt;       // n_threads defaults to the cores
  GpuSplitFlags split;
  int cpu_workers = 0;
  // pi-launch without --cpu-workers: one worker when the model's FFN can be
  // split (SupportsSparseFfn), else none, with a note saying why.
  bool cpu_workers_auto = false;
  std::vector<std::string> remote_workers;  // --cpu-worker HOST:PORT (gRPC builds)
  // --remote-gpu-worker HOST:PORT: the device's layers on a pi-gpu-worker
  // --listen there (gRPC builds; needs --vram-budget).
  std::string remote_gpu_worker;
  WorkerSecretFiles secrets;
  int worker_timeout_ms = 1000;  // a step a worker has not answered by then: the worker is lost
  // The fraction of the cold neurons this process computes itself while the
  // cpu workers compute theirs (local_workers.h's SplitColdNeurons).
  double coordinator_share = 0.0;
  // What a --vram-budget plan gives the GPU — the hot neurons, or on the
  // device path (a GPU, --host-device) whole layers — in a pi-gpu-worker
  // process (pi-launch's default; pi-run --gpu-worker) instead of this one.
  bool gpu_worker = false;
  // --sparse auto (the default): the mode the model runs best, chosen when it
  // is loaded (ChooseSparseMode), which then says which and why.
  bool sparse_auto = true;
  double target_sparsity = kDefaultTargetSparsity;  // --target-sparsity (--sparse cats)
  SparsityAllocation allocation = SparsityAllocation::kUniform;  // --sparse-allocation
  bool check_tensors = false;
  std::string ffn_activation;  // --ffn-activation (cli/activation_flag.h); local workers get it too
  bool no_mmap = false;        // --no-mmap: read the model into memory instead of mapping it
  bool mlock = false;          // --mlock: keep the model's bytes in RAM
  bool no_repack = false;      // --no-repack: products read the file's layout (weight_repack.h)
  DraftFlags draft;            // --model-draft: speculative decoding (draft_flags.h)
  EngineFlags();
};

// Help lines for the flags (without the split's, kGpuSplitUsage, and the
// draft's, kDraftUsage).
extern const char kEngineUsage[];

// Consumes `flag` (already read by args->Next()) when it is one of the
// flags; returns false for any other flag.
bool ParseEngineFlag(const std::string& flag, ArgReader* args, EngineFlags* flags);

// An error naming the first flag out of range.
Status CheckEngineFlags(const EngineFlags& flags);

// Everything a loaded engine needs kept alive, in destruction order (the
// engine before its workers and split).
struct LoadedEngine {
  LlamaModel model;
  std::unique_ptr<Tokenizer> tok;
  GpuSplit split;
  Workers workers;  // the worker processes (coordinator/topology/topology.h)
  std::unique_ptr<Engine> engine;
  LoadedDraft draft;  // --model-draft's (draft.drafter null without)
};

// Loads the model, its tokenizer, the split, the local workers and connects
// the remote ones (a line per worker on stderr, prefixed with `tool`), then
// the engine. The neurons that are not hot are split across all workers.
Status LoadEngine(const char* tool, EngineFlags* flags, LoadedEngine* out);

// Where the hot neurons run: the device's or hot backend's name (cuda,
// host), the gpu worker's backend, or "none" without a split.
std::string HotBackendName(const LoadedEngine& loaded);

// Stops the workers (after the engine is done with them); reports a worker
// that did not stop cleanly unless failures were already reported.
void StopWorkers(const char* tool, LoadedEngine* loaded);

}  // namespace pi
