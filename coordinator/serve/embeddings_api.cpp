#include "coordinator/serve/embeddings_api.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "coordinator/serve/completion_reply.h"
#include "coordinator/serve/generate_request.h"
#include "coordinator/serve/openai_api.h"
#include "coordinator/serve/request_runner.h"

namespace pi {
namespace {

using json = nlohmann::json;

// One input: a text, token ids, or both mixed.
Status OneInput(const json& x, const std::string& name, MixedPrompt* out) {
  if (x.is_string()) {
    out->push_back(PromptPiece{x.get<std::string>(), -1});
  } else if (!x.is_array() || !ReadMixedPrompt(x, out).ok()) {
    return Status::Error(
        "%s: an input must be a string, token ids (non-negative integers) or both mixed",
        name.c_str());
  }
  return Status::Ok();
}

Status Inputs(const json& input, EmbeddingRequest* out) {
  // Several inputs: an array of strings or of arrays (one array of ids, or
  // of ids and strings mixed, is one input).
  const bool several = input.is_array() && !input.empty() && !IsMixedPrompt(input) &&
                       (input[0].is_string() || input[0].is_array());
  if (!several) {
    if (input.is_array() && input.empty()) return Status::Error("input is empty");
    out->inputs.emplace_back();
    return OneInput(input, "input", &out->inputs.back());
  }
  if (input.size() > kMaxEmbeddingInputs) {
    return Status::Error("input: %zu inputs, at most %zu", input.size(), kMaxEmbeddingInputs);
  }
  for (size_t i = 0; i < input.size(); ++i) {
    out->inputs.emplace_back();
    PI_RETURN_IF_ERROR(OneInput(input[i], "input[" + std::to_string(i) + "]", &out->inputs.back()));
  }
  return Status::Ok();
}

std::string Base64(const std::vector<float>& v) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian hosts (x86-64, arm64)
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) {
      w = (w << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    }
    for (size_t k = 0; k < 4; ++k) {
      out += k <= n ? kDigits[(w >> (18 - 6 * k)) & 63] : '=';
    }
  }
  return out;
}

// Each input as the prompt the model reads: BOS (and EOS) as its tokenizer
// adds them around text; at least one token, at most the context.
Status Tokenize(RequestRunner* runner, const EmbeddingRequest& r,
                std::vector<std::vector<int32_t>>* prompts, int* status) {
  const Tokenizer& tok = runner->tokenizer();
  const Engine& engine = runner->engine();
  *status = 400;
  size_t bytes = 0;
  for (const MixedPrompt& m : r.inputs) bytes += MixedPromptTextBytes(m);
  WorkGate::Pass pass;
  bool busy = false;
  const Status gated = EnterTokenizeGate(&runner->tokenize_gate(), bytes, &pass, &busy);
  if (busy) *status = 503;
  PI_RETURN_IF_ERROR(gated.WithContext("input"));
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    prompts->emplace_back();
    PI_RETURN_IF_ERROR(
        EncodeMixedPrompt(tok, r.inputs[i], tok.add_eos_token(), false, &prompts->back())
            .WithContext("input[" + std::to_string(i) + "]"));
    // (A text with no tokens: an empty one where the model adds no BOS.)
    if (prompts->back().empty()) return Status::Error("input[%zu] is empty", i);
  }
  for (size_t i = 0; i < prompts->size(); ++i) {
    const std::vector<int32_t>& p = (*prompts)[i];
    for (int32_t id : p) {
      if (id >= engine.n_vocab()) {
        return Status::Error("input[%zu]: token %d is outside the vocabulary (0..%d)", i, id,
                             engine.n_vocab() - 1);
      }
    }
    if (p.size() > static_cast<size_t>(engine.n_ctx())) {
      return Status::Error("input[%zu]: %zu tokens, too large for the context (%d; raise -c)", i,
                           p.size(), engine.n_ctx());
    }
  }
  return Status::Ok();
}

}  // namespace

Status ParseEmbeddingRequest(const std::string& body, const std::string& model_id,
                             EmbeddingRequest* out, int* http_status, bool any_model, bool native) {
  *http_status = 400;
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the body must be a JSON object");
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (k == "dimensions") {
      return Status::Error("dimensions: shortened embeddings are not supported by this server");
    }
    if (k != "input" && k != "model" && k != "encoding_format" && k != "user" &&
        !(native && k == "content")) {
      return Status::Error("unrecognized request argument: %s", k.c_str());
    }
  }
  const auto model = j.find("model");
  if (model != j.end() && !model->is_null()) {
    if (!model->is_string()) return Status::Error("model must be a string");
    PI_RETURN_IF_ERROR(
        CheckRequestModel(model->get<std::string>(), model_id, any_model, http_status));
  }
  const auto user = j.find("user");
  if (user != j.end() && !user->is_null() && !user->is_string()) {
    return Status::Error("user must be a string");
  }
  const auto format = j.find("encoding_format");
  if (format != j.end() && !format->is_null()) {
    if (*format == "base64") {
      out->base64 = true;
    } else if (*format != "float") {
      return Status::Error("encoding_format must be float or base64");
    }
  }
  if (native && out->base64) {
    return Status::Error("encoding_format base64: llama-server's embeddings are floats");
  }
  // (llama-server's route takes "content" where "input" is not given)
  auto input = j.find("input");
  if (input == j.end() && native) input = j.find("content");
  if (input == j.end())
    return Status::Error(native ? "input or content is required" : "input is required");
  PI_RETURN_IF_ERROR(Inputs(*input, out));
  *http_status = 200;
  return Status::Ok();
}

std::string EmbeddingsJson(const std::string& model, const std::vector<std::vector<float>>& data,
                           bool base64, int prompt_tokens) {
  json list = json::array();
  for (size_t i = 0; i < data.size(); ++i) {
    list.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", base64 ? json(Base64(data[i])) : json(data[i])}});
  }
  const json j = {{"object", "list"},
                  {"data", std::move(list)},
                  {"model", model},
                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string NativeEmbeddingsJson(const std::vector<std::vector<float>>& data, int n_embd) {
  json list = json::array();
  for (size_t i = 0; i < data.size(); ++i) {
    json rows = json::array();
    for (size_t at = 0; at + n_embd <= data[i].size(); at += n_embd) {
      rows.push_back(std::vector<float>(data[i].begin() + at, data[i].begin() + at + n_embd));
    }
    list.push_back({{"index", i}, {"embedding", std::move(rows)}});
  }
  return list.dump(-1, ' ', false, json::error_handler_t::replace);
}

void StartEmbedding(const HttpContext& c, const std::string& body, bool native,
                    std::function<void()> notify, CompletionStart* out) {
  RequestRunner* runner = c.runner;
  const HttpServerOptions& o = *c.options;
  EmbeddingRequest r;
  int status = 400;
  Status s = ParseEmbeddingRequest(body, o.model_id, &r, &status, o.any_model_name, native);
  // (a refusal below is the request's: 400)
  if (s.ok() && runner->engine().has_device()) {
    status = 400;
    s = Status::Error(
        "embeddings are computed on the host path only, and this server runs layers on a GPU "
        "(serve the model without --vram-budget for them)");
  }
  const bool per_token = o.pooling == Pooling::kTokens;
  if (s.ok() && per_token && !native) {
    status = 400;
    s = Status::Error(
        "this server's pooling is none (each token's state), which OpenAI's embeddings cannot "
        "carry: POST /embeddings for them, or serve with --pooling mean, last or cls");
  }
  GenerationRequest request;
  if (s.ok()) s = Tokenize(runner, r, &request.embed_prompts, &status);
  const int64_t n_embd = runner->engine().model().config.n_embd;
  if (s.ok() && per_token &&
      static_cast<int64_t>(PromptTokens(request)) * n_embd > kMaxTokenEmbeddingValues) {
    s = Status::Error("input: %zu tokens of %lld values each: more than %lld values in one reply",
                      PromptTokens(request), static_cast<long long>(n_embd),
                      static_cast<long long>(kMaxTokenEmbeddingValues));
  }
  if (!s.ok()) {
    out->refusal = ErrorReply(status, s.message(), status == 503 ? 1 : 0);
    return;
  }
  request.pooling = o.pooling;
  CompletionReply* reply = SubmitWholeJob(runner, std::move(request), std::move(notify), out);
  if (reply) reply->set_embeddings(o.model_id, r.base64, native ? static_cast<int>(n_embd) : 0);
}

}  // namespace pi
