#include "coordinator/serve/coordinator_service.h"

#include <cstdio>
#include <utility>

#include "common/text/sampler.h"
#include "common/transport/auth_token.h"
#include "common/transport/grpc_metadata.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/generate_request.h"

namespace pi {
namespace {

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

grpc::Status Exhausted(const std::string& message) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message);
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
  for (const TokenLogprob& lp : g.logprobs) {
    v1::TokenLogprob* out = done->add_logprobs();
    out->set_id(lp.id);
    out->set_logprob(lp.logprob);
    for (const auto& [id, value] : lp.top) {
      v1::TopLogprob* top = out->add_top();
      top->set_id(id);
      top->set_logprob(value);
    }
  }
  v1::Timings* t = done->mutable_timings();
  t->set_queue_ms(queue_s * 1e3);
  t->set_prompt_n(static_cast<int32_t>(request.prompt.size()) - g.n_cached);
  t->set_prompt_ms(g.prompt_s * 1e3);
  t->set_predicted_n(SampledTokens(g));
  t->set_eval_n(g.n_eval);
  t->set_predicted_ms(g.eval_s * 1e3);
  t->set_sampling_ms(g.sample_s * 1e3);
}

}  // namespace

CoordinatorService::CoordinatorService(ServedModel served, RequestRunner* runner,
                                       CoordinatorServiceOptions options)
    : served_(std::move(served)), runner_(runner), options_(std::move(options)) {}

grpc::Status CoordinatorService::Authenticate(const grpc::ServerContext& context,
                                              const char* call) const {
  if (options_.api_key.empty()) return grpc::Status::OK;
  const std::string presented = ClientMetadata(context, kAuthMetadataKey);
  if (BearerMatches(presented, options_.api_key)) return grpc::Status::OK;
  fprintf(stderr, "pi-launch: refused %s from %s: %s API key\n", call, context.peer().c_str(),
          presented.empty() ? "no" : "a wrong");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "a valid API key is required (authorization: Bearer KEY)");
}

grpc::Status CoordinatorService::Generate(grpc::ServerContext* context,
                                          const v1::GenerateRequest* in,
                                          grpc::ServerWriter<v1::GenerateReply>* writer) {
  grpc::Status auth = Authenticate(*context, "Generate");
  if (!auth.ok()) return auth;
  const Engine& engine = runner_->engine();
  GenerationRequest request;
  SamplerParams sampling;
  bool busy = false;
  const Status parsed =
      ParseGenerateRequestGated(&runner_->tokenize_gate(), *in, engine.n_vocab(), engine.n_ctx(),
                                runner_->tokenizer(), &request, &sampling, nullptr, &busy);
  if (!parsed.ok()) return busy ? Exhausted(parsed.message()) : InvalidArgument(parsed.message());
  // The call is answered now (its headers), so the front door counts its
  // prompt as taken while it waits for the engine (h2_guard.h).
  writer->SendInitialMetadata();
  v1::GenerateReply reply;
  RunOutcome run;
  bool write_failed = false;
  runner_->Run(
      request, sampling, [context] { return context->IsCancelled(); },
      [&](int32_t token, const std::string& text) {
        if (token < 0 && text.empty()) return true;
        v1::Token* t = reply.mutable_token();
        t->set_id(token);
        t->set_text(text);
        write_failed = !writer->Write(reply);
        return !write_failed;
      },
      &run);
  if (run.kind == RunOutcome::kQueueFull) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the queue is full (" + std::to_string(runner_->max_queue()) +
                            " requests waiting, --max-queue); retry later");
  }
  if (run.kind == RunOutcome::kCancelledWaiting) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting");
  }
  if (std::string(run.result.stop_reason) == "cancelled") {
    return grpc::Status(grpc::StatusCode::CANCELLED, write_failed
                                                         ? "the client did not read its stream"
                                                         : "cancelled by the client");
  }
  if (std::string(run.result.stop_reason) == "error") {
    return grpc::Status(grpc::StatusCode::INTERNAL, "the generation failed: " + run.result.error);
  }
  reply.Clear();
  FillDone(request, run.result, run.seed, run.queue_s, reply.mutable_done());
  reply.mutable_done()->set_warning(run.warning);
  writer->Write(reply);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Tokenize(grpc::ServerContext* context,
                                          const v1::TokenizeRequest* in, v1::TokenizeReply* reply) {
  grpc::Status auth = Authenticate(*context, "Tokenize");
  if (!auth.ok()) return auth;
  const Tokenizer& tok = runner_->tokenizer();
  std::vector<int32_t> ids;
  bool busy = false;
  const Status s =
      TokenizeGated(&runner_->tokenize_gate(), tok, in->text(),
                    in->has_add_bos() ? in->add_bos() : tok.add_bos_token(), &ids, &busy);
  if (!s.ok()) return busy ? Exhausted(s.message()) : InvalidArgument(s.message());
  for (int32_t id : ids) {
    reply->add_ids(id);
    reply->add_pieces(tok.TokenToPiece(id));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Health(grpc::ServerContext*, const v1::HealthRequest*,
                                        v1::HealthReply* reply) {
  reply->set_status(runner_->degraded() ? "degraded" : "ok");
  reply->set_running(runner_->running());
  reply->set_queued(runner_->queued());
  reply->set_max_queue(runner_->max_queue());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Models(grpc::ServerContext* context, const v1::ModelsRequest*,
                                        v1::ModelsReply* reply) {
  grpc::Status auth = Authenticate(*context, "Models");
  if (!auth.ok()) return auth;
  const Engine& e = runner_->engine();
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
  reply->set_shard_failures(runner_->shard_failures());
  reply->set_shard_recoveries(runner_->shard_recoveries());
  return grpc::Status::OK;
}

}  // namespace pi
