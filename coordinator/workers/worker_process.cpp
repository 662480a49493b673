#include "coordinator/workers/worker_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/transport/hello_message.h"
#include "coordinator/workers/spawn_child.h"

namespace pi {

namespace {

constexpr int kChannelFd = 3;  // where the worker finds the channel

}  // namespace

WorkerProcess::~WorkerProcess() {
  Kill();
}

void WorkerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string WorkerProcess::ExitReason() {
  if (pid_ <= 0) return "not running";
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return "";
  pid_ = -1;
  if (r < 0) return "gone";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

Status WorkerProcess::Spawn(const WorkerProcessOptions& o, const std::vector<uint8_t>& hello,
                            size_t request_capacity, size_t reply_capacity, int64_t* resident_bytes,
                            std::string* backend) {
  Kill();
  role_ = o.role;
  PI_RETURN_IF_ERROR(channel_.Create(std::max(request_capacity, hello.size()), reply_capacity));

  std::vector<std::string> argv = {o.binary,
                                   "-m",
                                   o.model_path,
                                   "--shm-fd",
                                   std::to_string(kChannelFd),
                                   "-t",
                                   std::to_string(o.n_threads),
                                   "--parent-pid",
                                   std::to_string(getpid())};
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  PI_RETURN_IF_ERROR(SpawnChild(argv, {{channel_.fd(), kChannelFd}}, &pid_, o.env));
  name_ = o.role + " " + std::to_string(pid_);

  memcpy(channel_.slot(ShmChannel::kRequest), hello.data(), hello.size());
  channel_.Publish(ShmChannel::kRequest, hello.size());
  size_t n = 0;
  PI_RETURN_IF_ERROR(AwaitReply(o.start_timeout_ms, 0, "its hello", 0, &n));
  return ParseHelloReply(channel_.slot(ShmChannel::kReply), n, resident_bytes, backend)
      .WithContext(name_);
}

Status WorkerProcess::AwaitReply(int timeout_ms, int spin_us, const char* what, uint64_t id,
                                 size_t* n) {
  auto awaited = [&] { return id == 0 ? std::string(what) : what + (" " + std::to_string(id)); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    // Short waits, so a dead worker is noticed between them, well before the deadline.
    const int chunk = static_cast<int>(std::min<int64_t>(
        100, std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count())));
    const Status s = channel_.WaitFor(ShmChannel::kReply, chunk, spin_us, n);
    if (s.ok() || s.code() != Status::Code::kTimeout) return s;
    const std::string gone = ExitReason();
    if (!gone.empty()) {
      return Status::Lost("%s %s before answering %s", name_.c_str(), gone.c_str(),
                          awaited().c_str());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Timeout("%s did not answer %s within %d ms", name_.c_str(), awaited().c_str(),
                             timeout_ms);
    }
  }
}

Status WorkerProcess::Stop(int timeout_ms) {
  if (pid_ <= 0) return Status::Ok();
  const uint32_t bye = kByeMagic;
  memcpy(channel_.slot(ShmChannel::kRequest), &bye, sizeof bye);
  channel_.Publish(ShmChannel::kRequest, sizeof bye);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string gone = ExitReason();
    if (!gone.empty()) {
      return gone == "exited with status 0" ? Status::Ok()
                                            : Status::Error("%s %s", role_.c_str(), gone.c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Kill();
  return Status::Timeout("%s did not stop within %d ms; killed", name_.c_str(), timeout_ms);
}

}  // namespace pi
