#include "coordinator/workers/loopback_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <regex>
#include <vector>

#include "coordinator/workers/spawn_child.h"

namespace pi {

LoopbackWorker::~LoopbackWorker() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 500 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) usleep(10000);
    if (waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (drain_.joinable()) drain_.join();  // the pipe's end: the worker is gone
  if (stderr_fd_ >= 0) close(stderr_fd_);
}

Status LoopbackWorker::Start(const std::string& binary, const std::string& model_path,
                             int n_threads, int timeout_ms) {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token_ += kHex[rd() % 16];
  const int token_fd = memfd_create("pi-token", MFD_CLOEXEC);
  if (token_fd < 0) return Status::Error("memfd_create: %s", strerror(errno));
  const std::string line = token_ + "\n";
  const bool written =
      write(token_fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  int pipe_fds[2];
  if (!written || pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(token_fd);
    return Status::Error("cannot set up the worker's token or stderr: %s", strerror(errno));
  }
  const Status spawned =
      SpawnChild({binary, "-m", model_path, "--listen", "127.0.0.1:0", "--auth-token-file",
                  "/dev/fd/3", "-t", std::to_string(n_threads)},
                 {{token_fd, 3}, {pipe_fds[1], 2}}, &pid_);
  close(token_fd);
  close(pipe_fds[1]);
  stderr_fd_ = pipe_fds[0];
  PI_RETURN_IF_ERROR(spawned);
  // Its stderr until the address line (or its end, or the deadline).
  const std::regex ready(" on (127\\.0\\.0\\.1:[0-9]+)");
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::smatch m;
  while (!std::regex_search(seen, m, ready)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p = {stderr_fd_, POLLIN, 0};
    char buf[4096];
    ssize_t n = 0;
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0 ||
        (n = read(stderr_fd_, buf, sizeof buf)) <= 0) {
      return Status::Error("%s did not start listening: %s", binary.c_str(),
                           seen.empty() ? "(no output)" : seen.c_str());
    }
    seen.append(buf, static_cast<size_t>(n));
  }
  address_ = m[1];
  const int fd = stderr_fd_;
  drain_ = std::thread([fd] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      if (write(2, buf, static_cast<size_t>(n)) < 0) break;
    }
  });
  return Status::Ok();
}

}  // namespace pi
