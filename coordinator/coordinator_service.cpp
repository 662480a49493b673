#include "coordinator/coordinator_service.h"

#include <cstdio>
#include <utility>

#include "common/progress.h"
#include "common/sampler.h"
#include "coordinator/generate_request.h"
#include "coordinator/generation.h"

namespace pi {
namespace {

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

void FillDone(const GenerationRequest& request, const GenerationResult& g, uint32_t seed,
              double queue_s, v1::Done* done) {
  done->set_stop_reason(g.stop_reason);
  done->set_error(g.error);
  // proto3 strings are UTF-8: the text as it was streamed (bytes that
  // never became a character, from byte tokens, as U+FFFD).
  Utf8Stream whole;
  done->set_text(whole.Push(g.text) + whole.Flush());
  done->mutable_prompt_ids()->Add(request.prompt.begin(), request.prompt.end());
  done->mutable_generated_ids()->Add(g.ids.begin(), g.ids.end());
  done->set_seed(seed);
  v1::Timings* t = done->mutable_timings();
  t->set_queue_ms(queue_s * 1e3);
  t->set_prompt_n(static_cast<int32_t>(request.prompt.size()));
  t->set_prompt_ms(g.prompt_s * 1e3);
  t->set_predicted_n(static_cast<int32_t>(g.ids.size()));
  t->set_eval_n(g.n_eval);
  t->set_predicted_ms(g.eval_s * 1e3);
  t->set_sampling_ms(g.sample_s * 1e3);
}

}  // namespace

CoordinatorService::CoordinatorService(ServedModel served, int max_queue, std::string log_prefix)
    : served_(std::move(served)), admission_(max_queue), log_prefix_(std::move(log_prefix)) {}

grpc::Status CoordinatorService::Generate(grpc::ServerContext* context,
                                          const v1::GenerateRequest* in,
                                          grpc::ServerWriter<v1::GenerateReply>* writer) {
  Engine* engine = served_.engine;
  GenerationRequest request;
  SamplerParams sampling;
  const Status parsed = ParseGenerateRequest(*in, engine->n_vocab(), engine->n_ctx(), *served_.tok,
                                             &request, &sampling);
  if (!parsed.ok()) return InvalidArgument(parsed.message());
  const uint64_t id = next_request_++;
  uint64_t ticket = 0;
  if (!admission_.Enter(&ticket)) {
    fprintf(stderr, "%s: request %llu refused: %d already waiting (--max-queue)\n",
            log_prefix_.c_str(), static_cast<unsigned long long>(id), admission_.max_queue());
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the queue is full (" + std::to_string(admission_.max_queue()) +
                            " requests waiting, --max-queue); retry later");
  }
  const double t_enter = NowSeconds();
  if (!admission_.WaitTurn(ticket, [context] { return context->IsCancelled(); })) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting");
  }
  const double queue_s = NowSeconds() - t_enter;
  engine->Reset();
  sampling.repeat_last_n = RepeatLastNForContext(sampling.repeat_last_n, engine->n_ctx());
  Sampler sampler(sampling, engine->n_vocab());
  const int64_t failures_before = engine->shard_failures();
  GenerationResult g;
  v1::GenerateReply reply;
  pi::Generate(
      engine, *served_.tok, &sampler, request,
      [&](int32_t token, const std::string& text) {
        if (context->IsCancelled()) return false;
        if (token < 0 && text.empty()) return true;
        v1::Token* t = reply.mutable_token();
        t->set_id(token);
        t->set_text(text);
        return writer->Write(reply);
      },
      &g);
  shard_failures_ = engine->shard_failures();
  shard_recoveries_ = engine->shard_recoveries();
  // A worker lost during the request, or still down from before.
  const bool lost = engine->shard_failures() > failures_before ||
                    engine->shard_failures() > engine->shard_recoveries();
  const std::string warning =
      lost ? engine->shard_error() + " (its neurons ran in the coordinator: same tokens, slower)"
           : "";
  admission_.Leave(ticket);
  fprintf(stderr,
          "%s: request %llu: %zu prompt + %zu tokens, %.1f tokens/s, queued %.0f ms, %s%s%s%s%s\n",
          log_prefix_.c_str(), static_cast<unsigned long long>(id), request.prompt.size(),
          g.ids.size(), g.eval_s > 0 ? g.n_eval / g.eval_s : 0.0, queue_s * 1e3, g.stop_reason,
          g.error.empty() ? "" : ": ", g.error.c_str(),
          warning.empty() ? "" : "; worker lost: ", warning.c_str());
  if (std::string(g.stop_reason) == "cancelled") {
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
  }
  reply.Clear();
  FillDone(request, g, sampler.seed(), queue_s, reply.mutable_done());
  reply.mutable_done()->set_warning(warning);
  writer->Write(reply);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* in,
                                          v1::TokenizeReply* reply) {
  const Tokenizer& tok = *served_.tok;
  std::vector<int32_t> ids;
  const Status s =
      tok.Encode(in->text(), in->has_add_bos() ? in->add_bos() : tok.add_bos_token(), &ids);
  if (!s.ok()) return InvalidArgument(s.message());
  for (int32_t id : ids) {
    reply->add_ids(id);
    reply->add_pieces(tok.TokenToPiece(id));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Health(grpc::ServerContext*, const v1::HealthRequest*,
                                        v1::HealthReply* reply) {
  reply->set_status(shard_failures_ > shard_recoveries_ ? "degraded" : "ok");
  reply->set_running(admission_.running());
  reply->set_queued(admission_.queued());
  reply->set_max_queue(admission_.max_queue());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Models(grpc::ServerContext*, const v1::ModelsRequest*,
                                        v1::ModelsReply* reply) {
  const Engine& e = *served_.engine;
  const LlamaConfig& c = e.model().config;
  reply->set_model_path(served_.model_path);
  reply->set_arch(c.arch);
  reply->set_n_layer(c.n_layer);
  reply->set_n_embd(c.n_embd);
  reply->set_n_ff(c.n_ff);
  reply->set_n_vocab(c.n_vocab);
  reply->set_n_ctx(e.n_ctx());
  reply->set_sparse(served_.sparse);
  reply->set_vram_budget(served_.vram_budget);
  reply->set_hot_backend(served_.hot_backend);
  for (const WorkerDescription& w : served_.workers) {
    v1::WorkerInfo* info = reply->add_workers();
    info->set_name(w.name);
    info->set_transport(w.transport);
    info->set_backend(w.backend);
    info->set_resident_bytes(w.resident_bytes);
    info->set_neurons(w.neurons);
  }
  reply->set_shard_failures(shard_failures_);
  reply->set_shard_recoveries(shard_recoveries_);
  return grpc::Status::OK;
}

}  // namespace pi
