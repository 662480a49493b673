#include "coordinator/workers/spawn_child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <string>

extern char** environ;

namespace pi {

Status SpawnChild(const std::vector<std::string>& argv, const std::vector<std::pair<int, int>>& fds,
                  pid_t* pid, const std::vector<std::string>& env) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  std::vector<int> temps;
  for (auto [from, to] : fds) {
    if (from == to) {  // dup2(n, n) would keep close-on-exec: go through a copy
      from = fcntl(from, F_DUPFD_CLOEXEC, 10);
      temps.push_back(from);
    }
    posix_spawn_file_actions_adddup2(&fa, from, to);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<const char*> args;
  for (const std::string& a : argv) args.push_back(a.c_str());
  args.push_back(nullptr);
  // This environment less the names env sets, then env.
  std::vector<const char*> envp;
  for (char** e = environ; *e; ++e) {
    bool replaced = false;
    for (const std::string& kv : env) {
      const size_t eq = kv.find('=');
      replaced = replaced || (eq != std::string::npos && strncmp(*e, kv.c_str(), eq + 1) == 0);
    }
    if (!replaced) envp.push_back(*e);
  }
  for (const std::string& kv : env) envp.push_back(kv.c_str());
  envp.push_back(nullptr);
  const int rc = posix_spawn(pid, args[0], &fa, &attr, const_cast<char* const*>(args.data()),
                             const_cast<char* const*>(envp.data()));
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  for (int fd : temps) close(fd);
  if (rc != 0) {
    *pid = -1;
    return Status::Error("cannot start %s: %s", args[0], strerror(rc));
  }
  return Status::Ok();
}

}  // namespace pi
