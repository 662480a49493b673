#include "coordinator/shm_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/activation_stats.h"
#include "common/transport/hello_message.h"
#include "common/transport/step_message.h"

extern char** environ;

namespace pi {

namespace {

constexpr int kChannelFd = 3;           // where the worker finds the channel
constexpr int kSpinUs = 50;             // a worker on another core answers a step well within this
constexpr size_t kMessageSlack = 1024;  // error messages, hello replies

}  // namespace

ShmWorker::~ShmWorker() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ShmWorker::ExitReason() {
  if (pid_ <= 0) return "not running";
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return "";
  pid_ = -1;
  if (r < 0) return "gone";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

Status ShmWorker::Start(const ShmWorkerOptions& o, const LlamaModel& model,
                        const std::vector<std::vector<int32_t>>& owned) {
  options_ = o;
  model_ = &model;
  owned_ = owned;
  step_timeout_ms_ = o.step_timeout_ms;
  return Spawn();
}

Status ShmWorker::Recover() {
  if (pid_ > 0) {  // stopped or wedged: it will not come back by itself
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  ++restarts_;
  return Spawn();
}

Status ShmWorker::Spawn() {
  const ShmWorkerOptions& o = options_;
  const LlamaModel& model = *model_;
  const std::vector<std::vector<int32_t>>& owned = owned_;
  const LlamaConfig& c = model.config;
  n_embd_ = c.n_embd;
  step_id_ = 0;
  const std::vector<uint8_t> hello = WriteHello(ModelFingerprint(*model.file), o.max_batch, owned);
  const size_t request_capacity =
      std::max(hello.size(), StepRequestBytes(o.max_batch, c.n_embd, c.n_ff));
  const size_t reply_capacity = StepReplyBytes(o.max_batch, c.n_embd) + kMessageSlack;
  PI_RETURN_IF_ERROR(channel_.Create(request_capacity, reply_capacity));

  // posix_spawn (no fork of a process holding a model and threads); the
  // channel lands on fd 3 with close-on-exec cleared by the dup2.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int source = channel_.fd();
  int temp = -1;
  if (source == kChannelFd) {  // dup2(3, 3) would keep close-on-exec
    temp = fcntl(source, F_DUPFD_CLOEXEC, 10);
    source = temp;
  }
  posix_spawn_file_actions_adddup2(&fa, source, kChannelFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  const std::string fd_arg = std::to_string(kChannelFd), threads = std::to_string(o.n_threads),
                    parent = std::to_string(getpid());
  std::vector<const char*> argv = {o.binary.c_str(), "-m",           o.model_path.c_str(),
                                   "--shm-fd",       fd_arg.c_str(), "-t",
                                   threads.c_str(),  "--parent-pid", parent.c_str()};
  for (const std::string& a : o.extra_args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&pid_, o.binary.c_str(), &fa, &attr,
                             const_cast<char* const*>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (temp >= 0) close(temp);
  if (rc != 0) {
    pid_ = -1;
    return Status::Error("cannot start %s: %s", o.binary.c_str(), strerror(rc));
  }
  name_ = options_.role + " " + std::to_string(pid_);

  memcpy(channel_.slot(ShmChannel::kRequest), hello.data(), hello.size());
  channel_.Publish(ShmChannel::kRequest, hello.size());
  size_t n = 0;
  PI_RETURN_IF_ERROR(AwaitReply(o.start_timeout_ms, 0, &n));
  return ParseHelloReply(channel_.slot(ShmChannel::kReply), n, &resident_bytes_, &backend_)
      .WithContext(name_);
}

void ShmWorker::StartStep(int layer, int batch, const float* x, const int32_t* ids, int64_t n_ids) {
  batch_ = batch;
  step_start_ = std::chrono::steady_clock::now();
  WriteStepRequest(++step_id_, layer, batch, n_embd_, x, ids, n_ids,
                   channel_.slot(ShmChannel::kRequest));
  channel_.Publish(ShmChannel::kRequest, StepRequestBytes(batch, n_embd_, n_ids));
}

Status ShmWorker::AwaitReply(int timeout_ms, int spin_us, size_t* n) {
  // What is awaited, for the errors only: the hello before the first step.
  auto awaited = [this] {
    return step_id_ == 0 ? std::string("its hello") : "step " + std::to_string(step_id_);
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    // Short waits, so a dead worker is noticed between them, well before the deadline.
    bool timed_out = false;
    const int chunk = static_cast<int>(std::min<int64_t>(
        100, std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count())));
    const Status s = channel_.WaitFor(ShmChannel::kReply, chunk, spin_us, n, &timed_out);
    if (s.ok() || !timed_out) return s;
    const std::string gone = ExitReason();
    if (!gone.empty()) {
      return Status::Error("%s %s before answering %s", name_.c_str(), gone.c_str(),
                           awaited().c_str());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Error("%s did not answer %s within %d ms", name_.c_str(), awaited().c_str(),
                           timeout_ms);
    }
  }
}

Status ShmWorker::WaitStep(int timeout_ms, const float** y, int64_t* fired, int64_t* worker_ns) {
  size_t n = 0;
  PI_RETURN_IF_ERROR(AwaitReply(timeout_ms, kSpinUs, &n));
  const float round_trip_us =
      std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - step_start_)
          .count();
  int64_t ns = 0;
  PI_RETURN_IF_ERROR(ParseStepReply(channel_.slot(ShmChannel::kReply), n, step_id_, batch_, n_embd_,
                                    y, fired, &ns));
  RecordStep(round_trip_us, ns);
  if (worker_ns) *worker_ns = ns;
  return Status::Ok();
}

Status ShmWorker::Stop(int timeout_ms) {
  if (pid_ <= 0) return Status::Ok();
  const uint32_t bye = kByeMagic;
  memcpy(channel_.slot(ShmChannel::kRequest), &bye, sizeof bye);
  channel_.Publish(ShmChannel::kRequest, sizeof bye);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string gone = ExitReason();
    if (!gone.empty()) {
      return gone == "exited with status 0"
                 ? Status::Ok()
                 : Status::Error("%s %s", options_.role.c_str(), gone.c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return Status::Error("%s did not stop within %d ms; killed", name_.c_str(), timeout_ms);
}

}  // namespace pi
