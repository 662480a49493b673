// pi-client: submits a prompt to a pi-launch server and prints the tokens as
// they arrive (or, with --json, one object like pi-run's). Ctrl-C cancels
// the request on the server.
//
//   pi-client -p "In the beginning" -n 64
//   pi-client --server 127.0.0.1:50051 -f prompt.txt --temp 0 --json
//   pi-client --health      pi-client --models
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/api_key_flags.h"
#include "cli/args.h"
#include "cli/request_flags.h"
#include "cli/tool_main.h"
#include "common/text/json.h"
#include "common/text/sampler.h"
#include "proto/pi.grpc.pb.h"

namespace {

void Usage() {
  fputs(
      "usage: pi-client [options]\n"
      "  --server HOST:PORT      the pi-launch to ask (default 127.0.0.1:50051)\n"
      "  --json                  print one JSON object (ids, text, timings, stop reason)\n"
      "  --health                print the server's health and exit\n"
      "  --models                print what the server has loaded and exit\n"
      "  --timeout S             give up on a server that does not answer within S seconds\n"
      "                          of connecting (default 10)\n",
      stderr);
  fputs(pi::kApiKeyUsage, stderr);
  fputs(pi::kRequestUsage, stderr);
}

struct ClientFlags {
  std::string server = "127.0.0.1:50051";
  pi::RequestFlags request;
  bool json = false, health = false, models = false;
  int timeout_s = 10;
  pi::ApiKeyFlags api_key_flags;
  std::string api_key;  // sent with every call when set
};

int ParseFlags(int argc, char** argv, ClientFlags* c) {
  pi::ArgReader args("pi-client", argc, argv);
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "--server")
          c->server = args.String(f);
        else if (f == "--json")
          c->json = true;
        else if (f == "--health")
          c->health = true;
        else if (f == "--models")
          c->models = true;
        else if (f == "--timeout")
          c->timeout_s = args.Int(f);
        else if (f == "--api-key") {
          c->api_key_flags.key = args.String(f);
          c->api_key_flags.key_given = true;
        } else if (f == "--api-key-file")
          c->api_key_flags.key_file = args.String(f);
        else if (pi::ParseRequestFlag(f, &args, &c->request)) {
        } else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  pi::Status s = pi::CheckRequestFlags(c->request);
  if (s.ok() && (c->timeout_s < 1 || c->timeout_s > 86400)) {
    s = pi::Status::Error("--timeout must be 1 to 86400 seconds, got %d", c->timeout_s);
  }
  if (s.ok()) s = pi::ResolveApiKey(c->api_key_flags, &c->api_key);
  if (!s.ok()) {
    fprintf(stderr, "pi-client: %s\n", s.message().c_str());
    return 2;
  }
  return -1;
}

// Says what went wrong with a call, in a line naming the server; returns 1.
int Failed(const ClientFlags& c, const grpc::Status& status) {
  const char* what = "error";
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      what = "unavailable";
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      what = "no answer in time";
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      what = "busy";
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      what = "refused the request";
      break;
    case grpc::StatusCode::CANCELLED:
      what = "cancelled";
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      what = "not allowed (--api-key-file)";
      break;
    case grpc::StatusCode::INTERNAL:
      what = "failed";
      break;
    default:
      break;
  }
  fprintf(stderr, "pi-client: %s: %s: %s\n", c.server.c_str(), what,
          status.error_message().c_str());
  return 1;
}

// The API key on a call, as pi-launch asks for it.
void Authorize(const ClientFlags& c, grpc::ClientContext* context) {
  if (!c.api_key.empty()) context->AddMetadata("authorization", "Bearer " + c.api_key);
}

// Waits for SIGINT/SIGTERM (blocked in every thread) and cancels `context`;
// stops when *done is set.
void CancelOnSignal(grpc::ClientContext* context, std::atomic<bool>* done,
                    std::atomic<bool>* interrupted) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec poll = {0, 100 * 1000 * 1000};
  while (!*done) {
    if (sigtimedwait(&set, nullptr, &poll) > 0) {
      *interrupted = true;
      context->TryCancel();
      return;
    }
  }
}

void FillRequest(const pi::RequestFlags& r, pi::v1::GenerateRequest* req) {
  req->set_prompt(r.prompt);
  req->set_n_predict(r.n_predict);
  req->set_ignore_eos(r.ignore_eos);
  for (const std::string& stop : r.stops) req->add_stop(stop);
  req->set_grammar(r.grammar);
  const pi::SamplerParams& sp = r.sampling;
  pi::v1::SamplingParams* s = req->mutable_sampling();
  s->set_temperature(sp.temp);
  s->set_top_k(sp.top_k);
  s->set_top_p(sp.top_p);
  s->set_min_p(sp.min_p);
  s->set_repeat_penalty(sp.repeat_penalty);
  s->set_repeat_last_n(sp.repeat_last_n);
  s->set_seed(sp.seed == 0xFFFFFFFFu ? -1 : static_cast<int64_t>(sp.seed));
  s->set_frequency_penalty(sp.frequency_penalty);
  s->set_presence_penalty(sp.presence_penalty);
  for (const auto& [id, bias] : sp.logit_bias) {
    pi::v1::LogitBias* b = s->add_logit_bias();
    b->set_token(id);
    b->set_bias(bias);
  }
}

void PrintJson(const ClientFlags& c, const pi::v1::Done& d) {
  const std::vector<int32_t> prompt(d.prompt_ids().begin(), d.prompt_ids().end());
  const std::vector<int32_t> ids(d.generated_ids().begin(), d.generated_ids().end());
  const pi::v1::Timings& t = d.timings();
  auto per_second = [](int n, double ms) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  printf(
      "{\"server\":%s,\"seed\":%u,\"prompt\":%s,\"prompt_tokens\":%s,\"generated_tokens\":%s,"
      "\"text\":%s,\"stop_reason\":%s,",
      pi::JsonEscape(c.server).c_str(), d.seed(), pi::JsonEscape(c.request.prompt).c_str(),
      pi::JsonIntArray(prompt).c_str(), pi::JsonIntArray(ids).c_str(),
      pi::JsonEscape(d.text()).c_str(), pi::JsonEscape(d.stop_reason()).c_str());
  if (!d.error().empty()) printf("\"error\":%s,", pi::JsonEscape(d.error()).c_str());
  if (!d.warning().empty()) printf("\"warning\":%s,", pi::JsonEscape(d.warning()).c_str());
  printf(
      "\"timings\":{\"queue_ms\":%s,\"prompt_n\":%d,\"prompt_ms\":%s,\"prompt_per_second\":%s,"
      "\"predicted_n\":%d,\"eval_n\":%d,\"predicted_ms\":%s,\"predicted_per_second\":%s,"
      "\"sampling_ms\":%s}}\n",
      pi::JsonNumber(t.queue_ms()).c_str(), t.prompt_n(), pi::JsonNumber(t.prompt_ms()).c_str(),
      pi::JsonNumber(per_second(t.prompt_n(), t.prompt_ms())).c_str(), t.predicted_n(), t.eval_n(),
      pi::JsonNumber(t.predicted_ms()).c_str(),
      pi::JsonNumber(per_second(t.eval_n(), t.predicted_ms())).c_str(),
      pi::JsonNumber(t.sampling_ms()).c_str());
}

int Generate(const ClientFlags& c, pi::v1::Coordinator::Stub* stub) {
  pi::v1::GenerateRequest req;
  FillRequest(c.request, &req);
  grpc::ClientContext context;
  Authorize(c, &context);
  std::atomic<bool> done{false}, interrupted{false};
  std::thread canceller(CancelOnSignal, &context, &done, &interrupted);
  std::unique_ptr<grpc::ClientReader<pi::v1::GenerateReply>> reader = stub->Generate(&context, req);
  if (!c.json) {
    fputs(c.request.prompt.c_str(), stdout);
    fflush(stdout);
  }
  pi::v1::GenerateReply reply;
  pi::v1::Done last;
  bool finished = false;
  while (reader->Read(&reply)) {
    if (reply.has_token() && !c.json) {
      fputs(reply.token().text().c_str(), stdout);
      fflush(stdout);
    } else if (reply.has_done()) {
      last = reply.done();
      finished = true;
    }
  }
  const grpc::Status status = reader->Finish();
  done = true;
  canceller.join();
  if (!c.json) fputs("\n", stdout);
  if (interrupted) {
    fprintf(stderr, "pi-client: interrupted: the request was cancelled on the server\n");
    return 130;
  }
  if (!status.ok()) return Failed(c, status);
  if (!finished) {
    fprintf(stderr, "pi-client: %s: the stream ended without a result\n", c.server.c_str());
    return 1;
  }
  const pi::v1::Timings& t = last.timings();
  fprintf(stderr, "pi-client: %d prompt + %d tokens, %.2f tokens/s, queued %.1f ms, stop: %s\n",
          t.prompt_n(), t.predicted_n(),
          t.predicted_ms() > 0 ? 1e3 * t.eval_n() / t.predicted_ms() : 0.0, t.queue_ms(),
          last.stop_reason().c_str());
  if (!last.error().empty()) fprintf(stderr, "pi-client: %s\n", last.error().c_str());
  if (!last.warning().empty()) {
    fprintf(stderr, "pi-client: warning: %s\n", last.warning().c_str());
  }
  if (c.json) PrintJson(c, last);
  return last.error().empty() ? 0 : 1;
}

int Health(const ClientFlags& c, pi::v1::Coordinator::Stub* stub) {
  grpc::ClientContext context;
  Authorize(c, &context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(c.timeout_s));
  pi::v1::HealthReply h;
  const grpc::Status status = stub->Health(&context, pi::v1::HealthRequest(), &h);
  if (!status.ok()) return Failed(c, status);
  printf("{\"status\":%s,\"running\":%d,\"queued\":%d,\"max_queue\":%d}\n",
         pi::JsonEscape(h.status()).c_str(), h.running(), h.queued(), h.max_queue());
  return 0;
}

int Models(const ClientFlags& c, pi::v1::Coordinator::Stub* stub) {
  grpc::ClientContext context;
  Authorize(c, &context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(c.timeout_s));
  pi::v1::ModelsReply m;
  const grpc::Status status = stub->Models(&context, pi::v1::ModelsRequest(), &m);
  if (!status.ok()) return Failed(c, status);
  printf(
      "{\"model\":%s,\"arch\":%s,\"n_layer\":%d,\"n_embd\":%d,\"n_ff\":%d,\"n_vocab\":%d,"
      "\"n_ctx\":%d,\"sparse\":%s,\"vram_budget\":%lld,\"hot_backend\":%s,\"shard_failures\":%lld,"
      "\"shard_recoveries\":%lld,\"workers\":[",
      pi::JsonEscape(m.model_path()).c_str(), pi::JsonEscape(m.arch()).c_str(), m.n_layer(),
      m.n_embd(), m.n_ff(), m.n_vocab(), m.n_ctx(), pi::JsonEscape(m.sparse()).c_str(),
      static_cast<long long>(m.vram_budget()), pi::JsonEscape(m.hot_backend()).c_str(),
      static_cast<long long>(m.shard_failures()), static_cast<long long>(m.shard_recoveries()));
  for (int i = 0; i < m.workers_size(); ++i) {
    const pi::v1::WorkerInfo& w = m.workers(i);
    printf(
        "%s{\"name\":%s,\"transport\":%s,\"backend\":%s,\"resident_bytes\":%lld,\"neurons\":%lld}",
        i ? "," : "", pi::JsonEscape(w.name()).c_str(), pi::JsonEscape(w.transport()).c_str(),
        pi::JsonEscape(w.backend()).c_str(), static_cast<long long>(w.resident_bytes()),
        static_cast<long long>(w.neurons()));
  }
  printf("]}\n");
  return 0;
}

}  // namespace

static int Run(int argc, char** argv) {
  sigset_t set;  // before gRPC starts threads: the canceller alone takes these
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ClientFlags c;
  const int flags_status = ParseFlags(argc, argv, &c);
  if (flags_status >= 0) return flags_status;
  pi::Status read = pi::ReadPromptFile(&c.request);
  if (read.ok()) read = pi::ReadGrammarFlags(&c.request);
  if (!read.ok()) {
    fprintf(stderr, "pi-client: %s\n", read.message().c_str());
    return 1;
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(c.server, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(c.timeout_s))) {
    fprintf(stderr, "pi-client: %s: no server answers there (waited %d s; is pi-launch running?)\n",
            c.server.c_str(), c.timeout_s);
    return 1;
  }
  std::unique_ptr<pi::v1::Coordinator::Stub> stub = pi::v1::Coordinator::NewStub(channel);
  if (c.health) return Health(c, stub.get());
  if (c.models) return Models(c, stub.get());
  return Generate(c, stub.get());
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-client", Run, argc, argv);
}
