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

// One input of token ids: each an id (checked against the vocabulary later).
Status TokenArray(const json& a, size_t index, std::vector<int32_t>* out) {
  for (const json& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      return Status::Error("input[%zu]: a token id must be a non-negative integer", index);
    }
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return Status::Ok();
}

Status Inputs(const json& input, EmbeddingRequest* out) {
  const char* kShape = "input must be a string, strings, token ids or arrays of token ids";
  if (input.is_string()) {
    out->texts.push_back(input.get<std::string>());
  } else if (!input.is_array() || input.empty()) {
    return Status::Error("%s (non-empty)", kShape);
  } else if (input.size() > kMaxEmbeddingInputs) {
    return Status::Error("input: %zu inputs, at most %zu", input.size(), kMaxEmbeddingInputs);
  } else if (input[0].is_string()) {
    for (size_t i = 0; i < input.size(); ++i) {
      if (!input[i].is_string()) return Status::Error("input[%zu]: %s, not mixed", i, kShape);
      out->texts.push_back(input[i].get<std::string>());
    }
  } else if (input[0].is_number()) {
    out->ids.emplace_back();
    PI_RETURN_IF_ERROR(TokenArray(input, 0, &out->ids.back()));
  } else {
    for (size_t i = 0; i < input.size(); ++i) {
      if (!input[i].is_array()) return Status::Error("input[%zu]: %s, not mixed", i, kShape);
      out->ids.emplace_back();
      PI_RETURN_IF_ERROR(TokenArray(input[i], i, &out->ids.back()));
    }
  }
  for (size_t i = 0; i < out->texts.size(); ++i) {
    if (out->texts[i].empty()) return Status::Error("input[%zu] is empty", i);
  }
  for (size_t i = 0; i < out->ids.size(); ++i) {
    if (out->ids[i].empty()) return Status::Error("input[%zu] is empty", i);
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
// adds them; at most the context.
Status Tokenize(RequestRunner* runner, const EmbeddingRequest& r,
                std::vector<std::vector<int32_t>>* prompts, int* status) {
  const Tokenizer& tok = runner->tokenizer();
  const Engine& engine = runner->engine();
  *status = 400;
  if (!r.texts.empty()) {
    size_t bytes = 0;
    for (const std::string& t : r.texts) bytes += t.size();
    WorkGate::Pass pass;
    bool busy = false;
    const Status gated = EnterTokenizeGate(&runner->tokenize_gate(), bytes, &pass, &busy);
    if (busy) *status = 503;
    PI_RETURN_IF_ERROR(gated.WithContext("input"));
    for (const std::string& t : r.texts) {
      prompts->emplace_back();
      PI_RETURN_IF_ERROR(tok.Encode(t, tok.add_bos_token(), &prompts->back()));
      if (tok.add_eos_token() && tok.eos() >= 0) prompts->back().push_back(tok.eos());
    }
  } else {
    *prompts = r.ids;
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
      return Status::Error("input[%zu]: %zu tokens, more than the context (%d; raise -c)", i,
                           p.size(), engine.n_ctx());
    }
  }
  return Status::Ok();
}

}  // namespace

Status ParseEmbeddingRequest(const std::string& body, const std::string& model_id,
                             EmbeddingRequest* out, int* http_status, bool any_model) {
  *http_status = 400;
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the body must be a JSON object");
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (k == "dimensions") {
      return Status::Error("dimensions: shortened embeddings are not supported by this server");
    }
    if (k != "input" && k != "model" && k != "encoding_format" && k != "user") {
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
  const auto input = j.find("input");
  if (input == j.end()) return Status::Error("input is required");
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

void StartEmbedding(const HttpContext& c, const std::string& body, std::function<void()> notify,
                    CompletionStart* out) {
  RequestRunner* runner = c.runner;
  const HttpServerOptions& o = *c.options;
  EmbeddingRequest r;
  int status = 400;
  Status s = ParseEmbeddingRequest(body, o.model_id, &r, &status, o.any_model_name);
  if (s.ok() && runner->engine().has_device()) {
    s = Status::Error(
        "embeddings are computed on the host path only, and this server runs layers on a GPU "
        "(serve the model without --vram-budget for them)");
  }
  GenerationRequest request;
  if (s.ok()) s = Tokenize(runner, r, &request.embed_prompts, &status);
  if (!s.ok()) {
    out->refusal = ErrorReply(status, s.message(), status == 503 ? 1 : 0);
    return;
  }
  request.pooling = o.pooling;
  const int n_prompt = static_cast<int>(PromptTokens(request));
  CompletionChoice choice;
  choice.job = runner->Submit(std::move(request), SamplerParams(), false, std::move(notify));
  if (!choice.job) {
    out->refusal = QueueFullReply(runner->max_queue());
    return;
  }
  choice.reply =
      std::make_unique<CompletionReply>(false, CompletionInfo{}, &runner->tokenizer(), false);
  choice.reply->set_embeddings(o.model_id, r.base64);
  choice.n_prompt = n_prompt;
  out->choices.Add(std::move(choice));
  out->stream = false;
}

}  // namespace pi
