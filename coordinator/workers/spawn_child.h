// SpawnChild: starts a worker process with posix_spawn (never fork: the
// coordinator holds a mapped model and threads) with an empty signal mask
// (the coordinator blocks SIGINT/SIGTERM for its waiter thread; a child must
// not inherit that) and the given descriptors placed at the given numbers.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/base/status.h"

namespace pi {

// argv[0] is the binary; fds: (descriptor here, number in the child) pairs;
// env: "NAME=value" entries replacing or adding to this process's environment.
Status SpawnChild(const std::vector<std::string>& argv, const std::vector<std::pair<int, int>>& fds,
                  pid_t* pid, const std::vector<std::string>& env = {});

}  // namespace pi
