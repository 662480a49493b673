// ServeShm: a worker's session over a shared-memory channel. It waits for
// the coordinator's hello, loads the shard it names (refusing another model,
// another protocol version or a shard that does not fit, with a reply saying
// which), then answers request after request through the shard until a bye,
// or until its parent is gone. A thread of its own bumps the channel's
// heartbeat so the coordinator can tell a stopped worker from a busy one.
#pragma once

#include <sys/types.h>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/transport/shm_channel.h"
#include "common/transport/worker_shard.h"

namespace pi {

struct ShmServeOptions {
  int n_threads = 1;
  pid_t parent_pid = 0;  // exit when the parent is no longer this pid (0: do not check)
  int hello_timeout_ms = 60000;
};

// Returns OK after a bye; an error when the hello is refused or the parent
// died. `loaded` is how loading the model went: an error is the answer to
// the hello (so the coordinator learns why at once), and `model` is unused.
// `shard` (a ShardServer over a cold or hot Shard, a DeviceShard) takes the hello and
// answers the requests.
Status ServeShm(ShmChannel* channel, const LlamaModel& model, const Status& loaded,
                const ShmServeOptions& options, WorkerShard* shard);

}  // namespace pi
