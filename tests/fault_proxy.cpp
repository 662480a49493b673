// pi-fault-proxy: a TCP proxy that puts faults between a coordinator and a
// remote worker where the kernel has no netem: a one-way delay on every
// byte in each direction, a blackhole (bytes held, connections left open:
// a host that went silent), and a reset (every connection closed). The
// two-host rig (deploy/two-host-rig.sh) and the fault tests drive it.
//
//   pi-fault-proxy --listen 127.0.0.1:0 --to 127.0.0.1:50061 [--delay-ms 0.5]
//
// Ready once it prints "pi-fault-proxy: on HOST:PORT -> TO". Commands on
// stdin, one per line: "delay MS", "blackhole", "pass" (held bytes go on,
// delayed as before), "reset", "quit" (or end of input).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_delay_us{0};
std::atomic<bool> g_blackhole{false};

constexpr size_t kMaxQueued = 64 << 20;  // bytes held per direction before reading stops

// One direction of one connection: a reader queues chunks stamped with
// their arrival; a writer sends each once its delay has passed (and no
// blackhole holds it).
struct Pipe {
  int from = -1, to = -1;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<Clock::time_point, std::string>> chunks;
  size_t queued = 0;
  bool closed = false;

  void Read() {
    char buf[65536];
    while (true) {
      const ssize_t n = read(from, buf, sizeof buf);
      std::unique_lock<std::mutex> lock(mu);
      if (n <= 0) break;
      chunks.emplace_back(Clock::now(), std::string(buf, static_cast<size_t>(n)));
      queued += static_cast<size_t>(n);
      cv.notify_all();
      cv.wait(lock, [this] { return queued < kMaxQueued || closed; });
      if (closed) return;
    }
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
    cv.notify_all();
  }

  void Write() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      if (chunks.empty()) {
        if (closed) break;
        cv.wait_for(lock, std::chrono::milliseconds(50));
        continue;
      }
      const auto due = chunks.front().first + std::chrono::microseconds(g_delay_us.load());
      if (g_blackhole.load() || Clock::now() < due) {
        cv.wait_until(lock, g_blackhole.load() ? Clock::now() + std::chrono::milliseconds(5) : due);
        continue;
      }
      std::string data = std::move(chunks.front().second);
      chunks.pop_front();
      queued -= data.size();
      cv.notify_all();
      lock.unlock();
      size_t off = 0;
      while (off < data.size()) {
        const ssize_t n = send(to, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      lock.lock();
      if (off < data.size()) break;
    }
    closed = true;
    cv.notify_all();
    shutdown(to, SHUT_WR);
  }
};

struct Connection {
  int client = -1, server = -1;
  Pipe up, down;
  std::vector<std::thread> threads;
  void Reset() {
    shutdown(client, SHUT_RDWR);
    shutdown(server, SHUT_RDWR);
  }
};

std::mutex g_connections_mu;
std::vector<std::shared_ptr<Connection>> g_connections;

bool ParseAddress(const std::string& s, sockaddr_in* a) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons(static_cast<uint16_t>(atoi(s.c_str() + colon + 1)));
  return inet_pton(AF_INET, s.substr(0, colon).c_str(), &a->sin_addr) == 1;
}

void Serve(int listener, sockaddr_in upstream) {
  while (true) {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) return;
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(server, reinterpret_cast<sockaddr*>(&upstream), sizeof upstream) != 0) {
      close(client);
      close(server);
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_shared<Connection>();
    c->client = client;
    c->server = server;
    c->up.from = client;
    c->up.to = server;
    c->down.from = server;
    c->down.to = client;
    for (Pipe* p : {&c->up, &c->down}) {
      c->threads.emplace_back([p] { p->Read(); });
      c->threads.emplace_back([p] { p->Write(); });
    }
    std::lock_guard<std::mutex> lock(g_connections_mu);
    g_connections.push_back(c);
  }
}

void WakeWriters() {
  std::lock_guard<std::mutex> lock(g_connections_mu);
  for (auto& c : g_connections) {
    for (Pipe* p : {&c->up, &c->down}) {
      std::lock_guard<std::mutex> pl(p->mu);
      p->cv.notify_all();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0", to;
  double delay_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "pi-fault-proxy: %s expects a value\n", f.c_str());
      return 2;
    }
    if (f == "--listen")
      listen = argv[++i];
    else if (f == "--to")
      to = argv[++i];
    else if (f == "--delay-ms")
      delay_ms = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: pi-fault-proxy --listen HOST:PORT --to HOST:PORT [--delay-ms X]\n");
      return 2;
    }
  }
  sockaddr_in local, upstream;
  if (!ParseAddress(listen, &local) || !ParseAddress(to, &upstream) || delay_ms < 0 ||
      delay_ms > 10000) {
    fprintf(stderr, "pi-fault-proxy: --listen and --to take IPv4:PORT, --delay-ms 0..10000\n");
    return 2;
  }
  g_delay_us = static_cast<int64_t>(delay_ms * 1000);
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof local;
  if (bind(listener, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::listen(listener, 64) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    fprintf(stderr, "pi-fault-proxy: cannot listen on %s: %s\n", listen.c_str(), strerror(errno));
    return 1;
  }
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, host, sizeof host);
  fprintf(stderr, "pi-fault-proxy: on %s:%d -> %s, delay %.3f ms\n", host, ntohs(local.sin_port),
          to.c_str(), delay_ms);
  std::thread(Serve, listener, upstream).detach();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.rfind("delay ", 0) == 0) {
      g_delay_us = static_cast<int64_t>(atof(line.c_str() + 6) * 1000);
    } else if (line == "blackhole") {
      g_blackhole = true;
    } else if (line == "pass") {
      g_blackhole = false;
    } else if (line == "reset") {
      std::lock_guard<std::mutex> lock(g_connections_mu);
      for (auto& c : g_connections) c->Reset();
    } else if (line == "quit") {
      break;
    } else if (!line.empty()) {
      fprintf(stderr, "pi-fault-proxy: unknown command '%s'\n", line.c_str());
      continue;
    }
    WakeWriters();
    fprintf(stderr, "pi-fault-proxy: %s\n", line.c_str());
  }
  // Exit without joining the pumps: the process's end closes every socket.
  _exit(0);
}
