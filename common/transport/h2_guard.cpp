#include "common/transport/h2_guard.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/transport/h2_frames.h"
#include "common/transport/tcp_listen.h"

namespace pi {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using unix_socket = net::local::stream_protocol;
using error_code = boost::system::error_code;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct H2Guard::Impl {
  H2GuardOptions options;
  std::string folder, socket_path;
  std::mutex mu;
  int open = 0;
  std::unordered_map<std::string, int> open_by_client;
  struct Arrivals {
    TokenBucket bucket;
    double last_s = 0;
  };
  std::unordered_map<std::string, Arrivals> arrivals;  // by client address
  std::atomic<int64_t> accepted{0}, refused{0}, disconnected{0};
  std::atomic<bool> stopping{false};
  // After what the relays use: the io_context's handlers (and the relays
  // they hold) go first.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread thread;

  void Accept();
  void Closed(const std::string& client);
  bool Admit(const std::string& client);  // mu held
};

namespace {

// One client connection and its relay to the backend, on one strand.
class Relay : public std::enable_shared_from_this<Relay> {
 public:
  Relay(tcp::socket client, H2Guard::Impl* guard, std::string address)
      : client_(std::move(client)),
        backend_(client_.get_executor()),
        guard_(guard),
        address_(std::move(address)),
        streams_(guard->options.streams_per_second, guard->options.stream_burst),
        resets_(guard->options.resets_per_second, guard->options.reset_burst),
        settings_(guard->options.settings_per_second, guard->options.settings_burst) {}
  ~Relay() { guard_->Closed(address_); }

  void Start() {
    backend_.async_connect(unix_socket::endpoint(guard_->socket_path),
                           [self = shared_from_this()](error_code ec) {
                             if (ec) return self->Close();
                             self->PumpIn();
                             self->PumpOut();
                           });
  }
  void Close() {
    error_code ignored;
    client_.close(ignored);
    backend_.close(ignored);
  }

 private:
  static void OnFrame(void* self, const H2FrameScanner::Frame& f) {
    static_cast<Relay*>(self)->Judge(f);
  }
  static void OnServerFrame(void* self, const H2FrameScanner::Frame& f) {
    static_cast<Relay*>(self)->Answered(f);
  }
  void Judge(const H2FrameScanner::Frame& f) {
    const double now = Now();
    const char* over = nullptr;
    if (f.type == kH2Headers && f.stream > last_stream_) {
      last_stream_ = f.stream;
      if (!streams_.Take(now)) over = "opened streams faster than its budget";
    } else if (f.type == kH2RstStream) {
      if (!resets_.Take(now)) over = "reset streams faster than its budget";
      Forget(f.stream);
    } else if (f.type == kH2Settings && !(f.flags & 1)) {
      if (!settings_.Take(now)) over = "sent SETTINGS faster than its budget";
    } else if (f.type == kH2Data && f.stream != 0 && !answered_.count(f.stream)) {
      unanswered_[f.stream] += f.length;
      unanswered_total_ += f.length;
      const int64_t limit = guard_->options.max_unanswered_bytes;
      if (limit > 0 && unanswered_total_ > limit) {
        over = "sent more bytes than a message before any answer";
      }
    }
    if (over && !over_) over_ = over;
  }
  // The server sent a frame on a stream: what the client sent there is
  // answered; the stream's end (or a reset) forgets it.
  void Answered(const H2FrameScanner::Frame& f) {
    if (f.stream == 0) return;
    const auto it = unanswered_.find(f.stream);
    if (it != unanswered_.end()) {
      unanswered_total_ -= it->second;
      unanswered_.erase(it);
    }
    if ((f.type == kH2Headers && (f.flags & kH2EndStream)) || f.type == kH2RstStream ||
        (f.type == kH2Data && (f.flags & kH2EndStream))) {
      answered_.erase(f.stream);
    } else {
      answered_.insert(f.stream);
    }
  }
  void Forget(uint32_t stream) {
    const auto it = unanswered_.find(stream);
    if (it != unanswered_.end()) {
      unanswered_total_ -= it->second;
      unanswered_.erase(it);
    }
    answered_.erase(stream);
  }
  // Client to backend, judged on the way.
  void PumpIn() {
    client_.async_read_some(net::buffer(in_), [self = shared_from_this()](error_code ec, size_t n) {
      if (ec) return self->Close();
      if (!self->scanner_.Feed(self->in_.data(), n, &Relay::OnFrame, self.get())) {
        return self->Disconnect("sent what is not HTTP/2");
      }
      if (self->over_) return self->Disconnect(self->over_);
      net::async_write(self->backend_, net::buffer(self->in_.data(), n),
                       [self](error_code wec, size_t) {
                         if (wec) return self->Close();
                         self->PumpIn();
                       });
    });
  }
  void PumpOut() {
    backend_.async_read_some(net::buffer(out_),
                             [self = shared_from_this()](error_code ec, size_t n) {
                               if (ec) return self->Close();
                               net::async_write(self->client_, net::buffer(self->out_.data(), n),
                                                [self](error_code wec, size_t) {
                                                  if (wec) return self->Close();
                                                  self->PumpOut();
                                                });
                             });
  }
  void Disconnect(const std::string& why) {
    ++guard_->disconnected;
    fprintf(stderr, "%s: disconnected %s: it %s\n", guard_->options.log_prefix.c_str(),
            address_.c_str(), why.c_str());
    Close();
  }

  tcp::socket client_;
  unix_socket::socket backend_;
  H2Guard::Impl* guard_;
  const std::string address_;
  H2FrameScanner scanner_;
  H2FrameScanner server_scanner_{/*client=*/false};
  std::unordered_map<uint32_t, int64_t> unanswered_;  // stream -> DATA bytes before an answer
  int64_t unanswered_total_ = 0;
  std::unordered_set<uint32_t> answered_;  // live streams the server has answered
  TokenBucket streams_, resets_, settings_;
  uint32_t last_stream_ = 0;
  const char* over_ = nullptr;
  std::array<uint8_t, 65536> in_, out_;
};

}  // namespace

void H2Guard::Impl::Closed(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu);
  --open;
  if (--open_by_client[client] <= 0) open_by_client.erase(client);
}

bool H2Guard::Impl::Admit(const std::string& client) {
  const double now = Now();
  // Addresses not seen for a minute are forgotten (their budgets full again).
  if (arrivals.size() > 4096) {
    for (auto it = arrivals.begin(); it != arrivals.end();) {
      it = now - it->second.last_s > 60 ? arrivals.erase(it) : std::next(it);
    }
  }
  auto it = arrivals.find(client);
  if (it == arrivals.end()) {
    it =
        arrivals
            .emplace(client,
                     Arrivals{TokenBucket(options.connects_per_second, options.connect_burst), now})
            .first;
  }
  it->second.last_s = now;
  if (!it->second.bucket.Take(now)) return false;
  const int from_client = open_by_client.count(client) ? open_by_client[client] : 0;
  return open < options.max_connections && (options.max_connections_per_client <= 0 ||
                                            from_client < options.max_connections_per_client);
}

void H2Guard::Impl::Accept() {
  acceptor->async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (stopping) return;
    if (ec) {
      // Out of descriptors (or a connection reset before it was taken): go
      // on after a pause instead of spinning.
      auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](error_code) { Accept(); });
      return;
    }
    const std::string client = PeerAddress(socket);
    bool admitted = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      const int from_client = open_by_client.count(client) ? open_by_client[client] : 0;
      if (open < options.max_connections && (options.max_connections_per_client <= 0 ||
                                             from_client < options.max_connections_per_client)) {
        ++open;
        ++open_by_client[client];
        admitted = true;
      }
    }
    if (admitted) {
      ++accepted;
      // Small frames (a step's reply) go out at once, not after the peer's
      // delayed ACK of the one before (Nagle: 40 ms).
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Relay>(std::move(socket), this, client)->Start();
    } else {
      ++refused;
      error_code ignored;
      socket.close(ignored);
    }
    Accept();
  });
}

H2Guard::H2Guard() : impl_(std::make_unique<Impl>()) {}

H2Guard::~H2Guard() {
  Shutdown();
}

Status H2Guard::MakeBackendAddress(std::string* address) {
  char folder[] = "/tmp/pi-grpc-XXXXXX";
  if (!mkdtemp(folder)) return Status::Error("cannot make a folder for the gRPC socket in /tmp");
  chmod(folder, 0700);
  impl_->folder = folder;
  impl_->socket_path = impl_->folder + "/grpc.sock";
  *address = "unix:" + impl_->socket_path;
  return Status::Ok();
}

Status H2Guard::Start(const std::string& listen, const H2GuardOptions& options,
                      std::string* bound) {
  Impl& m = *impl_;
  if (m.socket_path.empty()) return Status::Error("H2Guard: no backend address made");
  m.options = options;
  PI_RETURN_IF_ERROR(ListenTcp(m.ioc, listen, "--listen", &m.acceptor, bound));
  m.work.emplace(m.ioc.get_executor());
  m.Accept();
  m.thread = std::thread([&m] { m.ioc.run(); });
  return Status::Ok();
}

void H2Guard::Shutdown() {
  Impl& m = *impl_;
  if (m.thread.joinable()) {
    m.stopping = true;
    m.work.reset();
    m.ioc.stop();  // the relays go with the io_context's handlers
    m.thread.join();
    m.acceptor.reset();
  }
  if (!m.socket_path.empty()) {
    unlink(m.socket_path.c_str());
    rmdir(m.folder.c_str());
    m.socket_path.clear();
  }
}

H2Guard::Counts H2Guard::counts() const {
  return {impl_->accepted.load(), impl_->refused.load(), impl_->disconnected.load()};
}

}  // namespace pi
