#include "coordinator/serve/openai_api.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "coordinator/serve/generate_request.h"

namespace pi {
namespace {

using json = nlohmann::json;

// Reads an optional number field into *out (set when present).
Status Number(const json& j, const char* key, double lo, double hi, double* out, bool* present) {
  *present = false;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return Status::Error("%s must be a number", key);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) return Status::Error("%s is out of range [%g, %g]", key, lo, hi);
  *out = v;
  *present = true;
  return Status::Ok();
}

Status Integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out,
               bool* present) {
  *present = false;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) return Status::Error("%s must be an integer", key);
  // Read as what it is: an unsigned value over INT64_MAX must not wrap to a negative one.
  const bool too_big = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX};
  const int64_t v = too_big ? INT64_MAX : it->get<int64_t>();
  if (too_big || v < lo || v > hi) {
    return Status::Error("%s is out of range [%lld, %lld]", key, static_cast<long long>(lo),
                         static_cast<long long>(hi));
  }
  *out = v;
  *present = true;
  return Status::Ok();
}

Status Prompt(const json& j, v1::GenerateRequest* req) {
  const auto it = j.find("prompt");
  if (it == j.end()) return Status::Error("prompt is required");
  if (it->is_string()) {
    req->set_prompt(it->get<std::string>());
    return Status::Ok();
  }
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    req->set_prompt((*it)[0].get<std::string>());
    return Status::Ok();
  }
  if (it->is_array()) {
    v1::TokenIds* ids = req->mutable_prompt_ids();
    for (const json& t : *it) {
      if (!t.is_number_integer()) {
        return Status::Error("prompt must be a string, token ids, or one string in an array");
      }
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > INT32_MAX)
        return Status::Error("prompt: token %lld is not an id", static_cast<long long>(id));
      ids->add_ids(static_cast<int32_t>(id));
    }
    return Status::Ok();
  }
  return Status::Error("prompt must be a string, token ids, or one string in an array");
}

Status Stops(const json& j, v1::GenerateRequest* req) {
  const auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    req->add_stop(it->get<std::string>());
    return Status::Ok();
  }
  if (!it->is_array()) return Status::Error("stop must be a string or an array of strings");
  if (it->size() > kMaxStopStrings) {
    return Status::Error("stop: %zu strings, at most %zu", it->size(), kMaxStopStrings);
  }
  for (const json& s : *it) {
    if (!s.is_string()) return Status::Error("stop must be a string or an array of strings");
    req->add_stop(s.get<std::string>());
  }
  return Status::Ok();
}

Status Sampling(const json& j, v1::SamplingParams* s) {
  double v = 0;
  int64_t i = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Number(j, "temperature", -1e9, 1e9, &v, &present));
  if (present) s->set_temperature(static_cast<float>(v));
  PI_RETURN_IF_ERROR(Number(j, "top_p", -1e9, 1e9, &v, &present));
  if (present) s->set_top_p(static_cast<float>(v));
  PI_RETURN_IF_ERROR(Number(j, "min_p", -1e9, 1e9, &v, &present));
  if (present) s->set_min_p(static_cast<float>(v));
  PI_RETURN_IF_ERROR(Number(j, "repeat_penalty", -1e9, 1e9, &v, &present));
  if (present) s->set_repeat_penalty(static_cast<float>(v));
  PI_RETURN_IF_ERROR(Integer(j, "top_k", INT32_MIN, INT32_MAX, &i, &present));
  if (present) s->set_top_k(static_cast<int32_t>(i));
  PI_RETURN_IF_ERROR(Integer(j, "repeat_last_n", INT32_MIN, INT32_MAX, &i, &present));
  if (present) s->set_repeat_last_n(static_cast<int32_t>(i));
  PI_RETURN_IF_ERROR(Integer(j, "seed", -1, UINT32_MAX, &i, &present));
  if (present) s->set_seed(i);
  return Status::Ok();
}

}  // namespace

namespace {

// The fields completions and chat completions share: model, max_tokens (or
// n_predict), n, stop, sampling, stream, ignore_eos.
Status CommonFields(const json& j, const std::string& model_id, CompletionRequest* out,
                    int* http_status) {
  const auto model = j.find("model");
  if (model != j.end() && !model->is_null()) {
    if (!model->is_string()) return Status::Error("model must be a string");
    if (model->get<std::string>() != model_id) {
      *http_status = 404;
      return Status::Error("model '%s' is not served here (this server has '%s')",
                           model->get<std::string>().c_str(), model_id.c_str());
    }
  }
  v1::GenerateRequest& req = out->request;
  int64_t i = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "max_tokens", -2, INT32_MAX, &i, &present));
  if (!present) PI_RETURN_IF_ERROR(Integer(j, "n_predict", -2, INT32_MAX, &i, &present));
  req.set_n_predict(present ? static_cast<int32_t>(i) : -1);
  PI_RETURN_IF_ERROR(Integer(j, "n", 1, 1, &i, &present));  // one choice per request
  PI_RETURN_IF_ERROR(Stops(j, &req));
  PI_RETURN_IF_ERROR(Sampling(j, req.mutable_sampling()));
  const auto stream = j.find("stream");
  if (stream != j.end() && !stream->is_null()) {
    if (!stream->is_boolean()) return Status::Error("stream must be true or false");
    out->stream = stream->get<bool>();
  }
  const auto ignore_eos = j.find("ignore_eos");
  if (ignore_eos != j.end() && ignore_eos->is_boolean())
    req.set_ignore_eos(ignore_eos->get<bool>());
  return Status::Ok();
}

Status AskLogprobs(int top, CompletionRequest* out) {
  out->request.set_logprobs(true);
  out->request.set_top_logprobs(top);
  return Status::Ok();
}

Status ParseObject(const std::string& body, json* j) {
  *j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return Status::Error("the body is not JSON");
  if (!j->is_object()) return Status::Error("the body must be a JSON object");
  return Status::Ok();
}

}  // namespace

Status ParseCompletionRequest(const std::string& body, const std::string& model_id,
                              CompletionRequest* out, int* http_status) {
  *http_status = 400;
  json j;
  PI_RETURN_IF_ERROR(ParseObject(body, &j));
  PI_RETURN_IF_ERROR(CommonFields(j, model_id, out, http_status));
  PI_RETURN_IF_ERROR(Prompt(j, &out->request));
  // logprobs: how many most likely tokens to list beside each token's (0 to 5).
  int64_t n = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "logprobs", 0, 5, &n, &present));
  if (present) PI_RETURN_IF_ERROR(AskLogprobs(static_cast<int>(n), out));
  *http_status = 200;
  return Status::Ok();
}

Status ParseChatRequest(const std::string& body, const std::string& model_id,
                        const ChatTemplate* chat_template, CompletionRequest* out,
                        int* http_status) {
  *http_status = 400;
  json j;
  PI_RETURN_IF_ERROR(ParseObject(body, &j));
  PI_RETURN_IF_ERROR(CommonFields(j, model_id, out, http_status));
  const auto messages = j.find("messages");
  if (messages == j.end() || !messages->is_array() || messages->empty()) {
    return Status::Error("messages must be a non-empty array of {role, content}");
  }
  std::vector<ChatMessage> chat;
  for (size_t k = 0; k < messages->size(); ++k) {
    const json& m = (*messages)[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return Status::Error("messages[%zu] must be {\"role\": string, \"content\": string}", k);
    }
    chat.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  if (!chat_template) {
    return Status::Error(
        "this model has no chat template: start pi-launch with --chat-template NAME (%s)",
        ChatTemplateNames());
  }
  std::string prompt;
  PI_RETURN_IF_ERROR(RenderChat(*chat_template, chat, true, &prompt, &out->content_spans));
  out->request.set_prompt(prompt);
  out->request.set_parse_special(true);  // the template's markers; never the contents
  // logprobs: true, with top_logprobs (0 to 20) most likely tokens beside each.
  const auto logprobs = j.find("logprobs");
  if (logprobs != j.end() && !logprobs->is_null() && !logprobs->is_boolean()) {
    return Status::Error("logprobs must be true or false");
  }
  int64_t top = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "top_logprobs", 0, 20, &top, &present));
  const bool asked = logprobs != j.end() && logprobs->is_boolean() && logprobs->get<bool>();
  if (present && !asked) return Status::Error("top_logprobs needs logprobs: true");
  if (asked) PI_RETURN_IF_ERROR(AskLogprobs(static_cast<int>(top), out));
  *http_status = 200;
  return Status::Ok();
}

const char* FinishReason(const std::string& stop_reason) {
  return stop_reason == "length" || stop_reason == "context" ? "length" : "stop";
}

namespace {

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// Adds usage, and the timings when known, to a finished reply.
void AddUsage(const CompletionInfo& info, int prompt_tokens, int completion_tokens, json* j) {
  (*j)["usage"] = Usage(prompt_tokens, completion_tokens);
  const ReplyTimings* t = info.timings;
  if (!t) return;
  (*j)["timings"] = {
      {"prompt_n", t->prompt_n},
      {"prompt_ms", t->prompt_ms},
      {"predicted_n", t->predicted_n},
      {"predicted_ms", t->predicted_ms},
      {"predicted_per_second", t->predicted_ms > 0 ? 1e3 * t->predicted_n / t->predicted_ms : 0.0},
      {"ffn_neurons", t->ffn_neurons},
      {"ffn_hot_neurons", t->ffn_hot}};
}

// The bytes of a token's text, for chat logprobs' "bytes".
json Bytes(const std::string& text) {
  json b = json::array();
  for (unsigned char ch : text) b.push_back(static_cast<int>(ch));
  return b;
}

// The legacy completions shape: tokens, token_logprobs, top_logprobs, text_offset.
json CompletionLogprobs(const CompletionInfo& info) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = info.logprob_offset;
  for (const TokenLogprob& t : *info.logprobs) {
    const std::string piece = info.tok->TokenToPiece(t.id);
    tokens.push_back(piece);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[info.tok->TokenToPiece(id)] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// The chat shape: content, each {token, logprob, bytes, top_logprobs}.
json ChatLogprobs(const CompletionInfo& info) {
  json content = json::array();
  for (const TokenLogprob& t : *info.logprobs) {
    const std::string piece = info.tok->TokenToPiece(t.id);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string p = info.tok->TokenToPiece(id);
      top.push_back({{"token", p}, {"logprob", lp}, {"bytes", Bytes(p)}});
    }
    content.push_back(
        {{"token", piece}, {"logprob", t.logprob}, {"bytes", Bytes(piece)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// The reply around one choice, with the usage where `usage`.
std::string Reply(const CompletionInfo& info, const char* object, json choice, bool usage,
                  int prompt_tokens, int completion_tokens) {
  json j = {{"id", info.id},
            {"object", object},
            {"created", info.created},
            {"model", info.model},
            {"choices", {std::move(choice)}}};
  if (usage) AddUsage(info, prompt_tokens, completion_tokens, &j);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string CompletionJson(const CompletionInfo& info, const std::string& text,
                           const char* finish_reason, int prompt_tokens, int completion_tokens) {
  json choice = {
      {"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (info.logprobs && info.tok) choice["logprobs"] = CompletionLogprobs(info);
  return Reply(info, "text_completion", std::move(choice), true, prompt_tokens, completion_tokens);
}

std::string CompletionChunkJson(const CompletionInfo& info, const std::string& text,
                                const char* finish_reason, int prompt_tokens,
                                int completion_tokens) {
  json choice = {{"text", text}, {"index", 0}, {"logprobs", nullptr}};
  if (info.logprobs && info.tok) choice["logprobs"] = CompletionLogprobs(info);
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return Reply(info, "text_completion", std::move(choice), finish_reason != nullptr, prompt_tokens, completion_tokens);
}

std::string ChatCompletionJson(const CompletionInfo& info, const std::string& text,
                               const char* finish_reason, int prompt_tokens,
                               int completion_tokens) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", text}}},
                 {"finish_reason", finish_reason}};
  if (info.logprobs && info.tok) choice["logprobs"] = ChatLogprobs(info);
  return Reply(info, "chat.completion", std::move(choice), true, prompt_tokens, completion_tokens);
}

std::string ChatChunkJson(const CompletionInfo& info, bool first, const std::string& text,
                          const char* finish_reason, int prompt_tokens, int completion_tokens) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!finish_reason) delta["content"] = text;
  json choice = {{"index", 0}, {"delta", delta}};
  if (info.logprobs && info.tok) choice["logprobs"] = ChatLogprobs(info);
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return Reply(info, "chat.completion.chunk", std::move(choice), finish_reason != nullptr, prompt_tokens, completion_tokens);
}

std::string ErrorJson(int http_status, const std::string& message) {
  const char* type = http_status == 401   ? "authentication_error"
                     : http_status == 404 ? "not_found_error"
                     : http_status == 503 ? "unavailable_error"
                     : http_status >= 500 ? "server_error"
                                          : "invalid_request_error";
  json j = {{"error", {{"code", http_status}, {"message", message}, {"type", type}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace pi
