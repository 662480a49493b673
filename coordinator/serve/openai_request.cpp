// The OpenAI-style request bodies (openai_api.h): every field a client sends
// is read, or refused by name. OpenAI answers an unrecognized argument with a
// 400 too; a server that skipped one would let a client believe a setting
// took effect (a JSON mode, a tool, a penalty) that did not.
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/text/sampler.h"
#include "coordinator/serve/chat_messages.h"
#include "coordinator/serve/generate_request.h"
#include "coordinator/serve/openai_api.h"
#include "coordinator/serve/output_constraint.h"

namespace pi {
namespace {

using json = nlohmann::json;

// ---- the fields each endpoint reads -------------------------------------------

const char* const kSharedFields[] = {"model",
                                     "max_tokens",
                                     "n_predict",
                                     "stop",
                                     "stream",
                                     "temperature",
                                     "top_p",
                                     "top_k",
                                     "min_p",
                                     "repeat_penalty",
                                     "repeat_last_n",
                                     "seed",
                                     "ignore_eos",
                                     "presence_penalty",
                                     "frequency_penalty",
                                     "logit_bias",
                                     "user",
                                     "cache_prompt",
                                     "id_slot",
                                     "speculative.n_max",
                                     "speculative.n_min",
                                     "speculative.p_min",
                                     "timings_per_token",
                                     "grammar",
                                     "json_schema"};
const char* const kCompletionFields[] = {"prompt", "echo",           "logprobs",
                                         "n",      "stream_options", "suffix"};
const char* const kChatFields[] = {
    "messages", "max_completion_tokens", "logprobs", "top_logprobs", "response_format",
    "n",        "stream_options",        "tools",    "tool_choice",  "parallel_tool_calls"};
// llama-server's native /completion.
const char* const kNativeFields[] = {"prompt", "n_probs", "post_sampling_probs", "return_tokens",
                                     "response_fields"};
// llama-server's /infill: the native fields and the code around the cursor.
const char* const kInfillFields[] = {"prompt",        "n_probs",        "post_sampling_probs",
                                     "return_tokens", "input_prefix",   "input_suffix",
                                     "input_extra",   "response_fields"};

// Fields clients send that this server does not implement, and what to say.
struct NotImplemented {
  const char* field;
  const char* what;
};
const NotImplemented kNotImplemented[] = {
    {"functions", "the deprecated function calls are not supported by this server: use tools"},
    {"function_call",
     "the deprecated function calls are not supported by this server: use "
     "tool_choice"},
    {"best_of", "best_of is not supported by this server: ask for n choices and pick"},
    {"n_probs", "not supported: ask for logprobs"},
    {"post_sampling_probs", "not supported here: the native /completion takes it, with n_probs"},
    {"store", "stored completions are not supported by this server"},
    {"metadata", "stored completions are not supported by this server"},
};

bool Listed(const std::string& key, const char* const* begin, const char* const* end) {
  for (const char* const* f = begin; f != end; ++f) {
    if (key == *f) return true;
  }
  return false;
}

// Every key of the body is one the endpoint reads, else the error names it.
template <size_t N>
Status CheckFields(const json& j, const char* const (&own)[N]) {
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (Listed(key, std::begin(kSharedFields), std::end(kSharedFields)) ||
        Listed(key, own, own + N)) {
      continue;
    }
    for (const NotImplemented& n : kNotImplemented) {
      if (key == n.field) return Status::Error("%s: %s", n.field, n.what);
    }
    return Status::Error("unrecognized request argument: %s", key.c_str());
  }
  return Status::Ok();
}

// ---- values ---------------------------------------------------------------------

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

Status Boolean(const json& j, const char* key, bool* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return Status::Error("%s must be true or false", key);
  *out = it->get<bool>();
  return Status::Ok();
}

// One prompt: a string, token ids, or llama-server's mix of both (its
// pieces in *mixed, made tokens once the tokenizer is at hand).
Status OnePrompt(const json& p, v1::GenerateRequest* req, MixedPrompt* mixed) {
  if (p.is_string()) {
    req->set_prompt(p.get<std::string>());
    return Status::Ok();
  }
  if (IsMixedPrompt(p)) return ReadMixedPrompt(p, mixed);
  if (!p.is_array()) return Status::Error("a prompt must be a string, token ids or both mixed");
  v1::TokenIds* ids = req->mutable_prompt_ids();
  for (const json& t : p) {
    if (!t.is_number_integer()) {
      return Status::Error("a prompt must be a string, token ids or both mixed");
    }
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      return Status::Error("token %lld is not an id", static_cast<long long>(id));
    ids->add_ids(static_cast<int32_t>(id));
  }
  return Status::Ok();
}

// prompt: a string, token ids, a mix of both, or an array of those (several
// prompts, at most kMaxChoices: the first in out->request, the others in
// out->more_prompts).
Status Prompt(const json& j, CompletionRequest* out) {
  const auto it = j.find("prompt");
  if (it == j.end()) return Status::Error("prompt is required");
  const bool several = it->is_array() && !it->empty() && !IsMixedPrompt(*it) &&
                       ((*it)[0].is_string() || (*it)[0].is_array());
  out->mixed_prompts.assign(1, MixedPrompt());
  if (!several) return OnePrompt(*it, &out->request, &out->mixed_prompts[0]).WithContext("prompt");
  if (it->size() > kMaxChoices) {
    return Status::Error("prompt: %zu prompts, at most %zu in one request", it->size(),
                         kMaxChoices);
  }
  out->mixed_prompts.resize(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    v1::GenerateRequest* r = &out->request;
    if (i > 0) {
      out->more_prompts.emplace_back();
      r = &out->more_prompts.back();
    }
    PI_RETURN_IF_ERROR(
        OnePrompt((*it)[i], r, &out->mixed_prompts[i]).WithContext("prompt " + std::to_string(i)));
  }
  return Status::Ok();
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

// One token's bias: a number in [-100, 100], or false (llama-server's ban).
Status AddLogitBias(int64_t id, const json& v, v1::SamplingParams* s) {
  if (id < 0 || id > INT32_MAX) {
    return Status::Error("logit_bias: %lld is not a token id", static_cast<long long>(id));
  }
  if (static_cast<size_t>(s->logit_bias_size()) >= kMaxLogitBiases) {
    return Status::Error("logit_bias: more than %zu tokens", kMaxLogitBiases);
  }
  float bias;
  if (v.is_boolean() && !v.get<bool>()) {
    bias = -INFINITY;
  } else if (v.is_number() && v.get<double>() >= -100.0 && v.get<double>() <= 100.0) {
    bias = static_cast<float>(v.get<double>());
  } else {
    return Status::Error("logit_bias: token %lld's bias must be a number in [-100, 100] (or false)",
                         static_cast<long long>(id));
  }
  v1::LogitBias* b = s->add_logit_bias();
  b->set_token(static_cast<int32_t>(id));
  b->set_bias(bias);
  return Status::Ok();
}

// OpenAI's {"token id": bias}, or llama-server's [[id, bias], ...].
Status LogitBias(const json& j, v1::SamplingParams* s) {
  const auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_object()) {
    for (const auto& item : it->items()) {
      const std::string& key = item.key();
      char* end = nullptr;
      const long long id = key.empty() || key.size() > 10 ? -1 : strtoll(key.c_str(), &end, 10);
      if (id < 0 || end != key.c_str() + key.size()) {
        return Status::Error("logit_bias: key '%s' is not a token id", key.c_str());
      }
      PI_RETURN_IF_ERROR(AddLogitBias(id, item.value(), s));
    }
    return Status::Ok();
  }
  if (it->is_array()) {
    for (const json& pair : *it) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer()) {
        return Status::Error("logit_bias: each entry must be [token id, bias]");
      }
      const bool too_big = pair[0].is_number_unsigned() && pair[0].get<uint64_t>() > INT32_MAX;
      PI_RETURN_IF_ERROR(AddLogitBias(too_big ? -1 : pair[0].get<int64_t>(), pair[1], s));
    }
    return Status::Ok();
  }
  return Status::Error("logit_bias must be an object of token id: bias");
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
  PI_RETURN_IF_ERROR(Number(j, "presence_penalty", -2, 2, &v, &present));
  if (present) s->set_presence_penalty(static_cast<float>(v));
  PI_RETURN_IF_ERROR(Number(j, "frequency_penalty", -2, 2, &v, &present));
  if (present) s->set_frequency_penalty(static_cast<float>(v));
  PI_RETURN_IF_ERROR(Integer(j, "top_k", INT32_MIN, INT32_MAX, &i, &present));
  if (present) s->set_top_k(static_cast<int32_t>(i));
  PI_RETURN_IF_ERROR(Integer(j, "repeat_last_n", INT32_MIN, INT32_MAX, &i, &present));
  if (present) s->set_repeat_last_n(static_cast<int32_t>(i));
  PI_RETURN_IF_ERROR(Integer(j, "seed", -1, UINT32_MAX, &i, &present));
  if (present) s->set_seed(i);
  return LogitBias(j, s);
}

// stream_options: {"include_usage": bool}, with stream: true only (as OpenAI).
Status StreamOptions(const json& j, CompletionRequest* out) {
  const auto it = j.find("stream_options");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!out->stream) return Status::Error("stream_options: only with stream: true");
  if (!it->is_object()) return Status::Error("stream_options must be an object");
  for (const auto& item : it->items()) {
    if (item.key() != "include_usage") {
      return Status::Error("stream_options: unrecognized option %s", item.key().c_str());
    }
  }
  return Boolean(*it, "include_usage", &out->include_usage).WithContext("stream_options");
}

// The fields completions and chat completions share.
Status CommonFields(const json& j, const std::string& model_id, bool any_model,
                    CompletionRequest* out, int* http_status) {
  const auto model = j.find("model");
  if (model != j.end() && !model->is_null()) {
    if (!model->is_string()) return Status::Error("model must be a string");
    PI_RETURN_IF_ERROR(
        CheckRequestModel(model->get<std::string>(), model_id, any_model, http_status));
  }
  v1::GenerateRequest& req = out->request;
  int64_t i = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "max_tokens", -2, INT32_MAX, &i, &present));
  if (!present) PI_RETURN_IF_ERROR(Integer(j, "n_predict", -2, INT32_MAX, &i, &present));
  req.set_n_predict(present ? static_cast<int32_t>(i) : -1);
  PI_RETURN_IF_ERROR(Integer(j, "n", 1, kMaxChoices, &i, &present));
  out->n = present ? static_cast<int>(i) : 1;
  PI_RETURN_IF_ERROR(Stops(j, &req));
  PI_RETURN_IF_ERROR(Sampling(j, req.mutable_sampling()));
  PI_RETURN_IF_ERROR(Boolean(j, "stream", &out->stream));
  PI_RETURN_IF_ERROR(StreamOptions(j, out));
  bool ignore_eos = false;
  PI_RETURN_IF_ERROR(Boolean(j, "ignore_eos", &ignore_eos));
  req.set_ignore_eos(ignore_eos);
  // Identifies the end user to the operator (OpenAI's abuse monitoring): no
  // effect on the answer.
  const auto user = j.find("user");
  if (user != j.end() && !user->is_null() && !user->is_string()) {
    return Status::Error("user must be a string");
  }
  // llama-server's prompt cache switch (default on).
  bool cache_prompt = true;
  PI_RETURN_IF_ERROR(Boolean(j, "cache_prompt", &cache_prompt));
  if (!cache_prompt) req.set_cache_prompt(false);
  // llama-server's: the slot (sequence) to run on; -1 any.
  PI_RETURN_IF_ERROR(Integer(j, "id_slot", -1, INT32_MAX, &i, &present));
  if (present && i >= 0) req.set_id_slot(static_cast<int32_t>(i));
  // llama-server's: this request's drafting (speculative decoding).
  PI_RETURN_IF_ERROR(Integer(j, "speculative.n_max", 0, 256, &i, &present));
  if (present) req.set_draft_max(static_cast<int32_t>(i));
  PI_RETURN_IF_ERROR(Integer(j, "speculative.n_min", 0, 256, &i, &present));
  if (present) req.set_draft_min(static_cast<int32_t>(i));
  double p_min = 0;
  PI_RETURN_IF_ERROR(Number(j, "speculative.p_min", 0.0, 1.0, &p_min, &present));
  if (present) req.set_draft_p_min(static_cast<float>(p_min));
  // llama-server's: each streamed chunk carries the timings so far.
  return Boolean(j, "timings_per_token", &out->timings_per_token);
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

// What every completion body starts with: the JSON object, only `own` and
// the shared fields, and those read (*http_status 400 until the caller is
// done, 404 for another model).
// n_probs (each token's log-probability with this many alternatives, 0 to
// 20), post_sampling_probs, return_tokens and response_fields: the native
// completion's own fields.
Status NativeFields(const json& j, CompletionRequest* out) {
  int64_t n = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "n_probs", 0, 20, &n, &present));
  if (present && n > 0) {
    PI_RETURN_IF_ERROR(AskLogprobs(static_cast<int>(n), out));
    out->n_probs = static_cast<int>(n);
  }
  // post_sampling_probs: those of the draw (after the sampler's filters and
  // temperature) instead of log-probabilities under the model.
  bool post = false;
  PI_RETURN_IF_ERROR(Boolean(j, "post_sampling_probs", &post));
  out->request.set_post_sampling_probs(post && out->n_probs > 0);
  PI_RETURN_IF_ERROR(Boolean(j, "return_tokens", &out->return_tokens));
  // response_fields: the reply's fields to keep, "a/b" for a nested one.
  const auto fields = j.find("response_fields");
  if (fields == j.end() || fields->is_null()) return Status::Ok();
  if (!fields->is_array() || fields->size() > kMaxResponseFields) {
    return Status::Error("response_fields must be an array of at most %zu field names",
                         kMaxResponseFields);
  }
  for (const json& f : *fields) {
    if (!f.is_string() || f.get<std::string>().empty() || f.get<std::string>().size() > 256) {
      return Status::Error("response_fields: each must be a field name of 1 to 256 characters");
    }
    out->response_fields.push_back(f.get<std::string>());
  }
  return Status::Ok();
}

Status OptionalString(const json& j, const char* key, std::string* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return Status::Error("%s must be a string", key);
  *out = it->get<std::string>();
  return Status::Ok();
}

// input_extra: the other files, [{"filename": ..., "text": ...}].
Status InfillFiles(const json& j, std::vector<InfillFile>* out) {
  const auto it = j.find("input_extra");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Status::Error("input_extra must be an array of {filename, text}");
  if (it->size() > kMaxInfillFiles) {
    return Status::Error("input_extra: %zu files, at most %zu", it->size(), kMaxInfillFiles);
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& f = (*it)[i];
    if (!f.is_object()) return Status::Error("input_extra[%zu] must be {filename, text}", i);
    InfillFile file;
    for (const auto& item : f.items()) {
      const std::string& key = item.key();
      std::string* field = key == "filename" ? &file.filename
                           : key == "text"   ? &file.text
                                             : nullptr;
      if (field == nullptr) {
        return Status::Error("input_extra[%zu].%s: unrecognized field", i, key.c_str());
      }
      if (!item.value().is_string()) {
        return Status::Error("input_extra[%zu].%s must be a string", i, key.c_str());
      }
      *field = item.value().get<std::string>();
    }
    // (The filename may be left out, as llama-server takes it; the text not.)
    if (!f.contains("text")) return Status::Error("input_extra[%zu].text is required", i);
    out->push_back(std::move(file));
  }
  return Status::Ok();
}

template <size_t N>
Status ReadBody(const std::string& body, const char* const (&own)[N], const std::string& model_id,
                bool any_model, json* j, CompletionRequest* out, int* http_status) {
  *http_status = 400;
  PI_RETURN_IF_ERROR(ParseObject(body, j));
  PI_RETURN_IF_ERROR(CheckFields(*j, own));
  PI_RETURN_IF_ERROR(CommonFields(*j, model_id, any_model, out, http_status));
  return ReadOutputConstraint(body, *j, &out->request);
}

}  // namespace

Status CheckRequestModel(const std::string& requested, const std::string& model_id, bool any_model,
                         int* http_status) {
  if (any_model || requested == model_id) return Status::Ok();
  *http_status = 404;
  return Status::Error("model '%s' is not served here (this server has '%s')", requested.c_str(),
                       model_id.c_str());
}

Status RenderChatMessages(const std::string& body, const ChatTemplate* chat_template,
                          std::string* prompt) {
  json j;
  PI_RETURN_IF_ERROR(ParseObject(body, &j));
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (k != "messages" && k != "tools" && k != "tool_choice" && k != "parallel_tool_calls") {
      return Status::Error("unrecognized request argument: %s", item.key().c_str());
    }
  }
  ChatPrompt chat;
  PI_RETURN_IF_ERROR(ReadChatPrompt(body, j, chat_template, &chat));
  *prompt = std::move(chat.text);
  return Status::Ok();
}

Status ParseCompletionRequest(const std::string& body, const std::string& model_id,
                              CompletionRequest* out, int* http_status, bool any_model) {
  json j;
  PI_RETURN_IF_ERROR(ReadBody(body, kCompletionFields, model_id, any_model, &j, out, http_status));
  PI_RETURN_IF_ERROR(Prompt(j, out));
  if (out->n * (1 + out->more_prompts.size()) > kMaxChoices) {
    return Status::Error("n: %d choices for each of %zu prompts, at most %zu choices in all",
                         out->n, 1 + out->more_prompts.size(), kMaxChoices);
  }
  // logprobs: how many most likely tokens to list beside each token's (0 to 5).
  int64_t n = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "logprobs", 0, 5, &n, &present));
  if (present) PI_RETURN_IF_ERROR(AskLogprobs(static_cast<int>(n), out));
  PI_RETURN_IF_ERROR(Boolean(j, "echo", &out->echo));
  if (out->echo && present) {
    return Status::Error("echo: with logprobs (the prompt's own) is not supported by this server");
  }
  // suffix: OpenAI's insertion, the middle between the prompt and it.
  const auto suffix = j.find("suffix");
  if (suffix != j.end() && !suffix->is_null()) {
    if (!suffix->is_string()) return Status::Error("suffix must be a string");
    if (!out->request.has_prompt()) return Status::Error("suffix: the prompt must be text");
    if (!out->more_prompts.empty()) return Status::Error("suffix: with one prompt only");
    if (out->echo) return Status::Error("echo: with suffix is not supported by this server");
    out->infill = true;
    out->infill_input.prefix = out->request.prompt();
    out->infill_input.suffix = suffix->get<std::string>();
  }
  *http_status = 200;
  return Status::Ok();
}

Status ParseNativeCompletionRequest(const std::string& body, const std::string& model_id,
                                    CompletionRequest* out, int* http_status, bool any_model) {
  json j;
  PI_RETURN_IF_ERROR(ReadBody(body, kNativeFields, model_id, any_model, &j, out, http_status));
  PI_RETURN_IF_ERROR(Prompt(j, out));
  PI_RETURN_IF_ERROR(NativeFields(j, out));
  *http_status = 200;
  return Status::Ok();
}

Status ParseInfillRequest(const std::string& body, const std::string& model_id,
                          CompletionRequest* out, int* http_status, bool any_model) {
  json j;
  PI_RETURN_IF_ERROR(ReadBody(body, kInfillFields, model_id, any_model, &j, out, http_status));
  InfillInput& in = out->infill_input;
  PI_RETURN_IF_ERROR(OptionalString(j, "input_prefix", &in.prefix));
  PI_RETURN_IF_ERROR(OptionalString(j, "input_suffix", &in.suffix));
  PI_RETURN_IF_ERROR(OptionalString(j, "prompt", &in.prompt));
  PI_RETURN_IF_ERROR(InfillFiles(j, &in.extra));
  out->infill = true;
  PI_RETURN_IF_ERROR(NativeFields(j, out));
  *http_status = 200;
  return Status::Ok();
}

Status ParseChatRequest(const std::string& body, const std::string& model_id,
                        const ChatTemplate* chat_template, CompletionRequest* out, int* http_status,
                        bool any_model) {
  json j;
  PI_RETURN_IF_ERROR(ReadBody(body, kChatFields, model_id, any_model, &j, out, http_status));
  // max_completion_tokens: OpenAI's current name for max_tokens in chat.
  int64_t max = 0;
  bool present = false;
  PI_RETURN_IF_ERROR(Integer(j, "max_completion_tokens", -2, INT32_MAX, &max, &present));
  if (present) {
    const bool other = j.contains("max_tokens") && !j["max_tokens"].is_null();
    if (other && out->request.n_predict() != max) {
      return Status::Error("max_tokens and max_completion_tokens differ: give one");
    }
    out->request.set_n_predict(static_cast<int32_t>(max));
  }
  ChatPrompt chat;
  PI_RETURN_IF_ERROR(ReadChatPrompt(body, j, chat_template, &chat));
  out->request.set_prompt(chat.text);
  out->content_spans = std::move(chat.spans);
  if (chat.tools) {
    // The calls are held to the tools' grammar: no other constraint beside it.
    if (!out->request.grammar().empty()) {
      return Status::Error("tools and grammar, json_schema or response_format: give one");
    }
    out->request.set_grammar(chat.grammar);
    out->request.set_grammar_trigger(chat.trigger);
    out->tools = true;
    out->tool_syntax = chat.syntax;
  }
  out->request.set_parse_special(true);  // the template's markers; never the contents
  // logprobs: true, with top_logprobs (0 to 20) most likely tokens beside each.
  bool asked = false;
  PI_RETURN_IF_ERROR(Boolean(j, "logprobs", &asked));
  int64_t top = 0;
  PI_RETURN_IF_ERROR(Integer(j, "top_logprobs", 0, 20, &top, &present));
  if (present && !asked) return Status::Error("top_logprobs needs logprobs: true");
  if (asked && out->tools) {
    return Status::Error("logprobs with tools is not supported by this server");
  }
  if (asked) PI_RETURN_IF_ERROR(AskLogprobs(static_cast<int>(top), out));
  *http_status = 200;
  return Status::Ok();
}

}  // namespace pi
