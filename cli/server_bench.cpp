#include "cli/server_bench.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <cstdio>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/read_file.h"
#include "common/transport/listen_address.h"

namespace pi {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kDefaultPrompt[] = "In the beginning God created the heaven and the earth.";

struct Flags {
  std::string server;  // host:port
  std::vector<int64_t> clients = {1, 8};
  int requests = 32;    // per client count
  int max_tokens = 64;  // per request
  std::string prompt = kDefaultPrompt;
  // Set: one more client sends this prompt (max_tokens 1) over and over
  // while the run's clients go — their time to first token under a long
  // prefill.
  std::string background_prompt;
  std::string api_key;
  std::string out = "md";
  // > 0: instead of the client runs, one client's conversation of this many
  // turns, each asked with the prompt cache and without (cache_prompt false).
  int conversation = 0;
  // Conversations taking turns (each its own first line): on a server of
  // fewer sequences, each turn finds its sequence taken by another
  // conversation and its prefix in the prompt store (--cache-ram).
  int conversations = 1;
};

// The user's lines of --conversation's turns (then again from the first).
const char* const kTurns[] = {
    "\nAnd God said, Let there be light:", "\nAnd the evening and the morning were",
    "\nAnd God called the firmament", "\nAnd the earth brought forth grass,",
    "\nAnd God made two great lights;"};

// What one streamed request saw.
struct Sample {
  bool ok = false, refused = false;
  std::string error;
  double ttft_s = 0;           // request sent to first text
  std::vector<double> gaps_s;  // between later events with text
  int tokens = 0;              // completion tokens (usage), else events
  int prompt_tokens = 0;       // usage
  int prompt_evaluated = 0;    // timings.prompt_n (the rest was cached)
  std::string text;            // the reply
};

// What one request asks (Request's default: the run's prompt and -n).
struct Ask {
  const std::string* prompt = nullptr;
  int max_tokens = 0;
  bool cache_prompt = true;
};

// One streamed completion over `stream`'s connection (kept alive).
Sample Request(beast::tcp_stream* stream, const Flags& f, const std::string& host,
               bool background = false, const Ask* ask = nullptr) {
  Sample s;
  json body = {{"prompt", ask          ? *ask->prompt
                          : background ? f.background_prompt
                                       : f.prompt},
               {"max_tokens", ask          ? ask->max_tokens
                              : background ? 1
                                           : f.max_tokens},
               {"stream", true},
               {"temperature", 0},
               {"ignore_eos", true}};
  if (ask && !ask->cache_prompt) body["cache_prompt"] = false;
  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, host);
  req.set(http::field::content_type, "application/json");
  if (!f.api_key.empty()) req.set(http::field::authorization, "Bearer " + f.api_key);
  req.keep_alive(true);
  req.body() = body.dump();
  req.prepare_payload();
  beast::error_code ec;
  const auto sent = Clock::now();
  stream->expires_after(std::chrono::seconds(600));
  http::write(*stream, req, ec);
  if (ec) {
    s.error = "write: " + ec.message();
    return s;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // (a stream has no end known)
  http::read_header(*stream, buffer, parser, ec);
  if (ec) {
    s.error = "read: " + ec.message();
    return s;
  }
  const int status = parser.get().result_int();
  if (status != 200) {
    // An error's whole body (its message), read as a string.
    http::response_parser<http::string_body> whole{std::move(parser)};
    whole.body_limit(1 << 20);
    http::read(*stream, buffer, whole, ec);
    s.refused = status == 503;
    s.error = "HTTP " + std::to_string(status) + ": " + whole.get().body().substr(0, 300);
    return s;
  }
  std::string text;
  char chunk[4096];
  auto last = sent;
  bool first = true;
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    http::read_some(*stream, buffer, parser, ec);  // what has arrived, not a full buffer
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      s.error = "read: " + ec.message();
      return s;
    }
    text.append(chunk, sizeof chunk - parser.get().body().size);
    // Events as they complete: "data: {...}\n\n".
    size_t end;
    while ((end = text.find("\n\n")) != std::string::npos) {
      const std::string event = text.substr(0, end);
      text.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json j = json::parse(event.substr(6), nullptr, false);
      // Whatever the server sent: only a well-formed chunk counts.
      if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() ||
          j["choices"].empty() || !j["choices"][0].is_object()) {
        continue;
      }
      const json& choice = j["choices"][0];
      const auto now = Clock::now();
      const bool has_text = choice.contains("text") && choice["text"].is_string() &&
                            !choice["text"].get_ref<const std::string&>().empty();
      if (has_text) s.text += choice["text"].get_ref<const std::string&>();
      if (j.contains("timings") && j["timings"].is_object() && j["timings"].contains("prompt_n") &&
          j["timings"]["prompt_n"].is_number_integer()) {
        s.prompt_evaluated = j["timings"]["prompt_n"].get<int>();
      }
      if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens") &&
          j["usage"]["prompt_tokens"].is_number_integer()) {
        s.prompt_tokens = j["usage"]["prompt_tokens"].get<int>();
      }
      if (has_text) {
        const double since = std::chrono::duration<double>(now - last).count();
        if (first) s.ttft_s = std::chrono::duration<double>(now - sent).count();
        if (!first) s.gaps_s.push_back(since);
        first = false;
        last = now;
        ++s.tokens;
      }
      if (j.contains("usage") && j["usage"].is_object() &&
          j["usage"].contains("completion_tokens") &&
          j["usage"]["completion_tokens"].is_number_integer()) {
        s.tokens = j["usage"]["completion_tokens"].get<int>();
      }
    }
  }
  s.ok = true;
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

struct Row {
  int clients = 0, requests = 0, ok = 0, refused = 0, errors = 0;
  int64_t tokens = 0;
  int background = 0;  // the background client's requests that completed meanwhile
  double seconds = 0, ttft_p50 = 0, ttft_p99 = 0, gap_p50 = 0, gap_p99 = 0;
  std::string first_error;
};

// A connected stream to host:port, or false.
bool Connect(net::io_context* ioc, const std::string& host, const std::string& port,
             beast::tcp_stream* stream, std::string* error) {
  tcp::resolver resolver(*ioc);
  beast::error_code ec;
  stream->expires_after(std::chrono::seconds(30));
  stream->connect(resolver.resolve(host, port, ec), ec);
  if (ec) *error = "connect: " + ec.message();
  return !ec;
}

Row RunClients(const Flags& f, int n_clients, const std::string& host, const std::string& port) {
  std::vector<Sample> samples(f.requests);
  std::atomic<int> next{0};
  std::atomic<bool> clients_done{false};
  std::atomic<int> background_done{0};
  // The background client: long prompts back to back until the clients are
  // done (each request ends on its own: bounded by the run).
  std::thread background;
  if (!f.background_prompt.empty()) {
    background = std::thread([&] {
      net::io_context ioc;
      beast::tcp_stream stream(ioc);
      std::string error;
      if (!Connect(&ioc, host, port, &stream, &error)) return;
      while (!clients_done.load()) {
        if (!Request(&stream, f, host, true).ok) return;
        ++background_done;
      }
    });
    // Its first prompt under way before the clients start.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < n_clients; ++c) {
    threads.emplace_back([&] {
      net::io_context ioc;
      beast::tcp_stream stream(ioc);
      bool connected = false;
      for (int i; (i = next++) < f.requests;) {
        if (!connected && !Connect(&ioc, host, port, &stream, &samples[i].error)) continue;
        connected = true;
        samples[i] = Request(&stream, f, host);
        // A failed or refused request may leave the connection unusable.
        if (!samples[i].ok) {
          beast::error_code ignored;
          stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
          stream.close();
          connected = false;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  clients_done = true;
  if (background.joinable()) background.join();
  Row r;
  r.background = background_done.load();
  r.clients = n_clients;
  r.requests = f.requests;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, gaps;
  for (const Sample& s : samples) {
    if (s.ok) {
      ++r.ok;
      r.tokens += s.tokens;
      ttft.push_back(s.ttft_s);
      gaps.insert(gaps.end(), s.gaps_s.begin(), s.gaps_s.end());
    } else if (s.refused) {
      ++r.refused;
    } else {
      ++r.errors;
      if (r.first_error.empty()) r.first_error = s.error;
    }
  }
  r.ttft_p50 = Percentile(ttft, 0.5);
  r.ttft_p99 = Percentile(ttft, 0.99);
  r.gap_p50 = Percentile(gaps, 0.5);
  r.gap_p99 = Percentile(gaps, 0.99);
  return r;
}

// --conversation: one client, a conversation of f.conversation turns (with
// --conversations K, K conversations taking turns). Each turn's prompt is the
// last one, its reply and the next user line; each is asked with the cache,
// then without, on one connection (greedy: the same reply either way), and
// their times to first token are printed side by side.
int RunConversation(const Flags& f, const std::string& host, const std::string& port) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  std::string error;
  if (!Connect(&ioc, host, port, &stream, &error)) {
    fprintf(stderr, "pi-bench: %s\n", error.c_str());
    return 1;
  }
  std::vector<std::string> prompts(f.conversations, f.prompt);
  for (int c = 1; c < f.conversations; ++c) {
    prompts[c] = "Conversation " + std::to_string(c + 1) + ".\n" + f.prompt;
  }
  const bool several = f.conversations > 1;
  json rows = json::array();
  if (f.out == "md") {
    printf("| turn |%s prompt tokens | evaluated (cached) | TTFT cached ms | TTFT uncached ms |\n",
           several ? " conversation |" : "");
    printf("| ---: |%s ---: | ---: | ---: | ---: |\n", several ? " ---: |" : "");
  }
  for (int t = 0; t < f.conversation; ++t) {
    for (int c = 0; c < f.conversations; ++c) {
      Sample got[2];
      for (int uncached = 0; uncached < 2; ++uncached) {
        Ask ask{&prompts[c], f.max_tokens, uncached == 0};
        got[uncached] = Request(&stream, f, host, false, &ask);
        if (!got[uncached].ok) {
          fprintf(stderr, "pi-bench: turn %d: %s\n", t + 1,
                  got[uncached].refused ? "refused (503)" : got[uncached].error.c_str());
          return 1;
        }
      }
      if (got[0].text != got[1].text) {
        fprintf(stderr, "pi-bench: turn %d: the cached and uncached replies differ\n", t + 1);
        return 1;
      }
      if (f.out == "md") {
        printf("| %d |%s %d | %d | %.1f | %.1f |\n", t + 1,
               several ? (" " + std::to_string(c + 1) + " |").c_str() : "", got[0].prompt_tokens,
               got[0].prompt_evaluated, got[0].ttft_s * 1e3, got[1].ttft_s * 1e3);
      }
      rows.push_back({{"turn", t + 1},
                      {"conversation", c + 1},
                      {"prompt_tokens", got[0].prompt_tokens},
                      {"prompt_evaluated", got[0].prompt_evaluated},
                      {"ttft_cached_ms", got[0].ttft_s * 1e3},
                      {"ttft_uncached_ms", got[1].ttft_s * 1e3}});
      prompts[c] += got[0].text + kTurns[t % (sizeof kTurns / sizeof kTurns[0])];
    }
  }
  if (f.out == "json") printf("%s\n", rows.dump(2).c_str());
  return 0;
}

void Print(const Flags& f, const std::vector<Row>& rows) {
  if (f.out == "json") {
    json all = json::array();
    for (const Row& r : rows) {
      all.push_back({{"server", f.server},
                     {"clients", r.clients},
                     {"requests", r.requests},
                     {"ok", r.ok},
                     {"refused", r.refused},
                     {"errors", r.errors},
                     {"tokens", r.tokens},
                     {"seconds", r.seconds},
                     {"tokens_per_second", r.seconds > 0 ? r.tokens / r.seconds : 0.0},
                     {"ttft_p50_ms", r.ttft_p50 * 1e3},
                     {"ttft_p99_ms", r.ttft_p99 * 1e3},
                     {"token_p50_ms", r.gap_p50 * 1e3},
                     {"token_p99_ms", r.gap_p99 * 1e3},
                     {"background_prompts", r.background}});
    }
    printf("%s\n", all.dump(2).c_str());
    return;
  }
  printf(
      "| clients | requests | ok | 503 | errors | tokens | t/s (aggregate) | TTFT p50/p99 ms | "
      "token p50/p99 ms |\n");
  printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& r : rows) {
    printf("| %d | %d | %d | %d | %d | %lld | %.2f | %.1f / %.1f | %.2f / %.2f |\n", r.clients,
           r.requests, r.ok, r.refused, r.errors, static_cast<long long>(r.tokens),
           r.seconds > 0 ? r.tokens / r.seconds : 0.0, r.ttft_p50 * 1e3, r.ttft_p99 * 1e3,
           r.gap_p50 * 1e3, r.gap_p99 * 1e3);
  }
  for (const Row& r : rows) {
    if (!f.background_prompt.empty()) {
      fprintf(stderr, "pi-bench: %d clients: %d background prompt(s) completed meanwhile\n",
              r.clients, r.background);
    }
    if (!r.first_error.empty()) {
      fprintf(stderr, "pi-bench: %d clients: %d errors, the first: %s\n", r.clients, r.errors,
              r.first_error.c_str());
    }
  }
}

void ServerBenchUsage() {
  fprintf(stderr,
          "usage: pi-bench --server HOST:PORT [options]   (a running pi-launch --http)\n"
          "  --clients C[,C]         concurrent clients per run (default 1,8)\n"
          "  --requests N            streamed requests per run, shared by the clients\n"
          "                          (default 32)\n"
          "  -n, --n-gen N           max_tokens of each request (default 64; ignore_eos)\n"
          "  --prompt TEXT, --prompt-file F  the prompt (default: a sentence)\n"
          "  --background-prompt-file F  meanwhile one more client sends this prompt\n"
          "                          (max_tokens 1) back to back: the clients' time to\n"
          "                          first token while a long prompt is prefilled\n"
          "  --conversation T        instead: one client's conversation of T turns (each\n"
          "                          prompt the last, its reply and a new line), each turn\n"
          "                          asked with the prompt cache and without: the times to\n"
          "                          first token side by side\n"
          "  --conversations K       with --conversation: K conversations taking turns\n"
          "                          (each its own first line; on a server of fewer\n"
          "                          sequences each turn's prefix comes from the prompt\n"
          "                          store, --cache-ram); default 1\n"
          "  --api-key-file F        the server's API key\n"
          "  -o, --output md|json    (default md)\n");
}

}  // namespace

int RunServerBench(int argc, char** argv) {
  ArgReader args("pi-bench", argc, argv);
  Flags f;
  std::string prompt_file, key_file, background_file;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& flag) {
        if (flag == "--server")
          f.server = args.String(flag);
        else if (flag == "--clients")
          f.clients = args.IntList(flag, 1, 256);
        else if (flag == "--requests")
          f.requests = args.Int(flag);
        else if (flag == "-n" || flag == "--n-gen")
          f.max_tokens = args.Int(flag);
        else if (flag == "--prompt")
          f.prompt = args.String(flag);
        else if (flag == "--prompt-file")
          prompt_file = args.String(flag);
        else if (flag == "--background-prompt-file")
          background_file = args.String(flag);
        else if (flag == "--api-key-file")
          key_file = args.String(flag);
        else if (flag == "-o" || flag == "--output")
          f.out = args.String(flag);
        else if (flag == "--conversation")
          f.conversation = args.Int(flag);
        else if (flag == "--conversations")
          f.conversations = args.Int(flag);
        else
          args.Fail("unknown flag '" + flag + "' with --server (see pi-bench --server --help)");
        return true;
      },
      ServerBenchUsage);
  if (flags_rc >= 0) return flags_rc;
  std::string host;
  int port = 0;
  Status s = SplitHostPort(f.server, "--server", &host, &port);
  if (s.ok() && port == 0)
    s = Status::Error("--server %s: port 0 names no server", f.server.c_str());
  if (s.ok() && (f.requests < 1 || f.requests > 100000)) {
    s = Status::Error("--requests must be 1 to 100000, got %d", f.requests);
  }
  if (s.ok() && (f.max_tokens < 1 || f.max_tokens > 1000000)) {
    s = Status::Error("-n must be 1 to 1000000, got %d", f.max_tokens);
  }
  if (s.ok() && f.out != "md" && f.out != "json") s = Status::Error("-o expects md or json");
  if (s.ok() && (f.conversation < 0 || f.conversation > 1000)) {
    s = Status::Error("--conversation must be 0 (off) to 1000 turns, got %d", f.conversation);
  }
  if (s.ok() && (f.conversations < 1 || f.conversations > 64)) {
    s = Status::Error("--conversations must be 1 to 64, got %d", f.conversations);
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-bench: %s\n", s.message().c_str());
    return 2;
  }
  if (!prompt_file.empty()) s = ReadWholeFile(prompt_file, &f.prompt).WithContext("--prompt-file");
  if (s.ok() && !background_file.empty()) {
    s = ReadWholeFile(background_file, &f.background_prompt)
            .WithContext("--background-prompt-file");
    if (s.ok() && f.background_prompt.empty()) {
      s = Status::Error("--background-prompt-file %s is empty", background_file.c_str());
    }
  }
  if (s.ok() && !key_file.empty()) {
    s = ReadWholeFile(key_file, &f.api_key).WithContext("--api-key-file");
    while (!f.api_key.empty() && (f.api_key.back() == '\n' || f.api_key.back() == '\r')) {
      f.api_key.pop_back();
    }
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-bench: %s\n", s.message().c_str());
    return 1;
  }
  if (f.conversation > 0) return RunConversation(f, host, std::to_string(port));
  std::vector<Row> rows;
  for (int64_t c : f.clients) {
    fprintf(stderr, "pi-bench: %lld client(s), %d requests of %d tokens to %s ...\n",
            static_cast<long long>(c), f.requests, f.max_tokens, f.server.c_str());
    rows.push_back(RunClients(f, static_cast<int>(c), host, std::to_string(port)));
  }
  Print(f, rows);
  for (const Row& r : rows) {
    if (r.ok == 0) return 1;
  }
  return 0;
}

}  // namespace pi
