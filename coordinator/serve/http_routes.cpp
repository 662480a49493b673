#include "coordinator/serve/http_routes.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "coordinator/serve/generate_request.h"
#include "coordinator/serve/openai_api.h"
#include "coordinator/serve/web_page.h"

namespace pi {
namespace {

using json = nlohmann::json;

HttpReply JsonReply(const json& j) {
  HttpReply r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// The served model, as OpenAI's model object (with llama-server's "meta").
json ModelObject(const HttpContext& c) {
  const Engine& e = c.runner->engine();
  const HttpServerOptions& o = *c.options;
  return {{"id", o.model_id},
          {"object", "model"},
          {"created", c.started_at},
          {"owned_by", "pi"},
          {"meta",
           {{"chat_template",
             o.chat_template ? json(ChatTemplateName(*o.chat_template)) : json(nullptr)},
            {"n_ctx", e.n_ctx()},
            {"n_vocab", e.n_vocab()},
            {"n_params", e.model().ParameterCount()}}}};
}

constexpr char kModelPrefix[] = "/v1/models/";

// GET /v1/models/{id}: the model when it is the one served, else 404.
HttpReply Model(const HttpContext& c) {
  const std::string id = c.path.substr(sizeof kModelPrefix - 1);
  if (id != c.options->model_id) {
    return ErrorReply(404, "model '" + id + "' is not served here (this server has '" +
                               c.options->model_id + "')");
  }
  return JsonReply(ModelObject(c));
}

HttpReply Detokenize(const Tokenizer& tok, const json& j) {
  const auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array()) {
    return ErrorReply(400, "tokens must be an array of token ids");
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const json& t : *tokens) {
    if (!t.is_number_integer() ||
        (t.is_number_unsigned() && t.get<uint64_t>() >= uint64_t{INT32_MAX}) ||
        t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
      return ErrorReply(400, "tokens: not a token id of this model");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return JsonReply({{"content", tok.Decode(ids)}});
}

HttpReply Tokenize(const HttpContext& c, const json& j) {
  const Tokenizer& tok = c.runner->tokenizer();
  const auto content = j.find("content");
  if (content == j.end() || !content->is_string()) {
    return ErrorReply(400, "content must be a string");
  }
  const auto special = j.find("add_special");
  const bool add_bos = special != j.end() && special->is_boolean() ? special->get<bool>() : false;
  std::vector<int32_t> ids;
  bool busy = false;
  const Status s = TokenizeGated(&c.runner->tokenize_gate(), tok, content->get<std::string>(),
                                 add_bos && tok.add_bos_token(), &ids, &busy);
  if (!s.ok()) return busy ? ErrorReply(503, s.message(), 1) : ErrorReply(400, s.message());
  return JsonReply({{"tokens", ids}});
}

}  // namespace

HttpReply ErrorReply(int status, const std::string& message, int retry_after_s) {
  HttpReply r;
  r.status = status;
  r.body = ErrorJson(status, message);
  r.retry_after_s = retry_after_s;
  return r;
}

bool FindRoute(const std::string& path, const std::string& method, HttpRoute* route, int* status,
               std::string* allow) {
  struct Entry {
    const char* path;
    const char* method;
    HttpRoute route;
  };
  static const Entry kRoutes[] = {
      {"/", "GET", HttpRoute::kPage},
      {"/health", "GET", HttpRoute::kHealth},
      {"/metrics", "GET", HttpRoute::kMetrics},
      {"/v1/models", "GET", HttpRoute::kModels},
      {"/v1/completions", "POST", HttpRoute::kCompletions},
      {"/v1/chat/completions", "POST", HttpRoute::kChatCompletions},
      {"/tokenize", "POST", HttpRoute::kTokenize},
      {"/detokenize", "POST", HttpRoute::kDetokenize},
  };
  const bool model_path = path.size() > sizeof kModelPrefix - 1 &&
                          path.compare(0, sizeof kModelPrefix - 1, kModelPrefix) == 0;
  for (const Entry& e : kRoutes) {
    if (path != e.path) continue;
    if (method == e.method || (method == "HEAD" && std::string(e.method) == "GET")) {
      *route = e.route;
      return true;
    }
    *status = 405;
    *allow = e.method;
    return false;
  }
  if (model_path) {  // GET /v1/models/{id}
    if (method == "GET" || method == "HEAD") {
      *route = HttpRoute::kModel;
      return true;
    }
    *status = 405;
    *allow = "GET";
    return false;
  }
  *status = 404;
  return false;
}

bool IsPublic(HttpRoute route) {
  return route == HttpRoute::kPage || route == HttpRoute::kHealth;
}

HttpReply HandleRoute(HttpRoute route, const HttpContext& c, const std::string& body) {
  if (route == HttpRoute::kPage) {
    HttpReply r;
    r.body = kWebPage;
    r.content_type = "text/html; charset=utf-8";
    return r;
  }
  if (!c.runner) {
    if (route == HttpRoute::kHealth) {
      HttpReply r = JsonReply({{"status", "loading"}});
      r.status = 503;
      r.retry_after_s = 1;
      return r;
    }
    return ErrorReply(503, "the model is still loading; retry shortly", 1);
  }
  switch (route) {
    case HttpRoute::kHealth:
      return JsonReply({{"status", c.runner->degraded() ? "degraded" : "ok"},
                        {"running", c.runner->running()},
                        {"queued", c.runner->queued()}});
    case HttpRoute::kMetrics: {
      HttpReply r;
      c.runner->RenderMetrics(&r.body);
      if (c.options->more_metrics) c.options->more_metrics(&r.body);
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return r;
    }
    case HttpRoute::kModels:
      return JsonReply({{"object", "list"}, {"data", {ModelObject(c)}}});
    case HttpRoute::kModel:
      return Model(c);
    case HttpRoute::kTokenize:
    case HttpRoute::kDetokenize: {
      const json j = json::parse(body, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return ErrorReply(400, "the body must be a JSON object");
      return route == HttpRoute::kTokenize ? Tokenize(c, j) : Detokenize(c.runner->tokenizer(), j);
    }
    default:
      return ErrorReply(500, "not a whole-reply route");
  }
}

void StartCompletion(const HttpContext& c, bool chat, const std::string& body, uint64_t number,
                     std::function<void()> notify, CompletionStart* out) {
  if (!c.runner) {
    out->refusal = ErrorReply(503, "the model is still loading; retry shortly", 1);
    return;
  }
  const HttpServerOptions& o = *c.options;
  RequestRunner* runner = c.runner;
  CompletionRequest cr;
  int status = 400;
  Status s = chat ? ParseChatRequest(body, o.model_id,
                                     o.chat_template ? &*o.chat_template : nullptr, &cr, &status)
                  : ParseCompletionRequest(body, o.model_id, &cr, &status);
  if (!s.ok()) {
    out->refusal = ErrorReply(status, s.message());
    return;
  }
  const Engine& engine = runner->engine();
  GenerationRequest request;
  SamplerParams sampling;
  bool busy = false;
  s = ParseGenerateRequestGated(&runner->tokenize_gate(), cr.request, engine.n_vocab(),
                                engine.n_ctx(), runner->tokenizer(), &request, &sampling,
                                &cr.content_spans, &busy);
  if (!s.ok()) {
    out->refusal = busy ? ErrorReply(503, s.message(), 1) : ErrorReply(400, s.message());
    return;
  }
  const int n_prompt = static_cast<int>(request.prompt.size());
  const std::vector<int32_t> prompt_ids = cr.echo ? request.prompt : std::vector<int32_t>();
  const bool logprobs = request.logprobs >= 0;
  out->job = runner->Submit(std::move(request), sampling, cr.stream, std::move(notify));
  if (!out->job) {
    out->refusal = ErrorReply(503,
                              "the queue is full (" + std::to_string(runner->max_queue()) +
                                  " requests waiting, --max-queue); retry later",
                              1);
    return;
  }
  CompletionInfo info;
  info.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(number);
  info.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  info.model = o.model_id;
  info.system_fingerprint = o.system_fingerprint;
  out->reply =
      std::make_unique<CompletionReply>(chat, std::move(info), &runner->tokenizer(), logprobs);
  out->reply->set_include_usage(cr.include_usage);
  if (cr.echo) {
    out->reply->set_echo(cr.request.has_prompt_ids() ? runner->tokenizer().Decode(prompt_ids)
                                                     : cr.request.prompt());
  }
  out->stream = cr.stream;
  out->n_prompt = n_prompt;
}

}  // namespace pi
