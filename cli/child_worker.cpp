#include "cli/child_worker.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "cli/activation_flag.h"
#include "common/model/llama_model.h"
#include "common/transport/shm_channel.h"

namespace pi {

int ServeParentOverShm(const char* tool, const std::string& model_path,
                       const std::string& ffn_activation, int shm_fd,
                       const ShmServeOptions& options, WorkerShard* shard) {
  // Ctrl-C in a terminal reaches the whole process group: the parent stops
  // its workers itself, after the request in hand.
  if (options.parent_pid != 0) {
    signal(SIGINT, SIG_IGN);
    // Die with the parent; the check closes the race with a parent that died
    // before the prctl.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != options.parent_pid) return 1;
  }
  ShmChannel channel;
  Status s = channel.Attach(shm_fd);
  LlamaModel model;
  Status loaded = LoadLlamaModel(model_path, &model);
  if (loaded.ok()) loaded = ApplyFfnActivationFlag(tool, ffn_activation, &model);
  if (s.ok()) s = ServeShm(&channel, model, loaded, options, shard);
  if (!s.ok()) {
    fprintf(stderr, "%s: %s\n", tool, s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace pi
