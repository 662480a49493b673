#include "coordinator/serve/http_routes.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/text/unicode.h"
#include "coordinator/serve/embeddings_api.h"
#include "coordinator/serve/generate_request.h"
#include "coordinator/serve/openai_api.h"
#include "coordinator/serve/slots_api.h"
#include "coordinator/serve/web_page.h"

namespace pi {
namespace {

using json = nlohmann::json;

HttpReply JsonReply(const json& j) {
  HttpReply r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// A token's bytes as a JSON string when they are UTF-8, else as numbers.
json Utf8OrBytes(const std::string& piece) {
  for (size_t pos = 0; pos < piece.size();) {
    uint32_t cp;
    size_t len;
    if (DecodeUtf8(piece.data(), piece.size(), pos, &cp, &len) != Utf8Status::kValid) {
      json bytes = json::array();
      for (unsigned char ch : piece) bytes.push_back(static_cast<int>(ch));
      return bytes;
    }
    pos += len;
  }
  return piece;
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
            {"n_params", e.model().ParameterCount()},
            {"gpu_worker", o.gpu_worker}}}};
}

constexpr char kModelPrefix[] = "/v1/models/";

// GET /v1/models/{id}: the model when it is the one served, else 404.
HttpReply Model(const HttpContext& c) {
  const std::string id = c.path.substr(sizeof kModelPrefix - 1);
  if (id != c.options->model_id && !c.options->any_model_name) {
    return ErrorReply(404, "model '" + id + "' is not served here (this server has '" +
                               c.options->model_id + "')");
  }
  return JsonReply(ModelObject(c));
}

HttpReply Detokenize(const Tokenizer& tok, const json& j) {
  for (const auto& item : j.items()) {
    if (item.key() != "tokens")
      return ErrorReply(400, "unrecognized request argument: " + item.key());
  }
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
  for (const auto& item : j.items()) {
    if (item.key() != "content" && item.key() != "add_special" && item.key() != "with_pieces") {
      return ErrorReply(400, "unrecognized request argument: " + item.key());
    }
  }
  bool add_bos = false, with_pieces = false;
  for (auto [key, flag] : {std::pair{"add_special", &add_bos}, {"with_pieces", &with_pieces}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) return ErrorReply(400, std::string(key) + " must be true or false");
    *flag = it->get<bool>();
  }
  std::vector<int32_t> ids;
  bool busy = false;
  const Status s = TokenizeGated(&c.runner->tokenize_gate(), tok, content->get<std::string>(),
                                 add_bos && tok.add_bos_token(), &ids, &busy);
  if (!s.ok()) return busy ? ErrorReply(503, s.message(), 1) : ErrorReply(400, s.message());
  if (!with_pieces) return JsonReply({{"tokens", ids}});
  // llama-server's shape: each id with its piece, a string when it is
  // UTF-8, else its bytes.
  json tokens = json::array();
  for (int32_t id : ids) {
    const std::string piece = tok.TokenToPiece(id);
    tokens.push_back({{"id", id}, {"piece", Utf8OrBytes(piece)}});
  }
  return JsonReply({{"tokens", tokens}});
}

// GET /props: llama-server's server properties (read-only).
HttpReply Props(const HttpContext& c) {
  const Engine& e = c.runner->engine();
  const HttpServerOptions& o = *c.options;
  return JsonReply(
      {{"default_generation_settings",
        {{"n_ctx", e.n_ctx()},
         {"model", o.model_id},
         {"params",
          {{"temperature", o.default_temperature >= 0 ? o.default_temperature : 0.8f},
           {"top_k", 40},
           {"top_p", 0.95},
           {"min_p", 0.05},
           {"repeat_penalty", 1.0},
           {"repeat_last_n", 64},
           {"presence_penalty", 0.0},
           {"frequency_penalty", 0.0},
           {"n_predict", o.n_predict},
           {"seed", o.default_seed == kRandomSeed ? json(-1) : json(o.default_seed)}}}}},
       {"total_slots", e.n_seq()},
       {"model_path", o.model_path},
       {"chat_template",
        o.chat_template ? json(ChatTemplateName(*o.chat_template)) : json(nullptr)},
       {"build_info", o.system_fingerprint}});
}

// GET /slots: one entry per sequence the engine runs at once (a request's
// id_slot), and whether it runs a job now.
HttpReply Slots(const HttpContext& c) {
  const Engine& e = c.runner->engine();
  json slots = json::array();
  for (int i = 0; i < e.n_seq(); ++i) {
    slots.push_back({{"id", i}, {"n_ctx", e.n_ctx()}, {"is_processing", c.runner->seq_busy(i)}});
  }
  return JsonReply(slots);
}

}  // namespace

HttpReply QueueFullReply(int max_queue) {
  return ErrorReply(503,
                    "the queue is full (" + std::to_string(max_queue) +
                        " requests waiting, --max-queue); retry later",
                    1);
}

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
      // llama-server's own: its paths without /v1, and its server routes.
      {"/models", "GET", HttpRoute::kModels},
      {"/completions", "POST", HttpRoute::kNativeCompletion},  // (llama-server's alias)
      {"/chat/completions", "POST", HttpRoute::kChatCompletions},
      {"/props", "GET", HttpRoute::kProps},
      {"/slots", "GET", HttpRoute::kSlots},
      {"/apply-template", "POST", HttpRoute::kApplyTemplate},
      {"/completion", "POST", HttpRoute::kNativeCompletion},
      {"/infill", "POST", HttpRoute::kInfill},
      {"/v1/embeddings", "POST", HttpRoute::kEmbeddings},
      {"/embedding", "POST", HttpRoute::kNativeEmbeddings},
      {"/embeddings", "POST", HttpRoute::kNativeEmbeddings},
      {"/v1/responses", "POST", HttpRoute::kResponses},
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
  if (path.size() > sizeof kSlotsPrefix - 1 &&
      path.compare(0, sizeof kSlotsPrefix - 1, kSlotsPrefix) == 0) {  // POST /slots/{id}
    if (method == "POST") {
      *route = HttpRoute::kSlotAction;
      return true;
    }
    *status = 405;
    *allow = "POST";
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
    if (!c.options->web_page) return ErrorReply(404, "GET /: the chat page is off (--no-webui)");
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
    case HttpRoute::kProps:
      return Props(c);
    case HttpRoute::kSlots:
      return Slots(c);
    case HttpRoute::kApplyTemplate: {
      const ChatTemplate* t = c.options->chat_template ? &*c.options->chat_template : nullptr;
      std::string prompt;
      const Status s = RenderChatMessages(body, t, &prompt);
      if (!s.ok()) return ErrorReply(400, s.message());
      return JsonReply({{"prompt", prompt}});
    }
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

namespace {

// The body read as its kind says.
Status ParseCompletion(const HttpServerOptions& o, CompletionKind kind, const std::string& body,
                       CompletionRequest* cr, int* status) {
  switch (kind) {
    case CompletionKind::kChat:
      return ParseChatRequest(body, o.model_id, o.chat_template ? &*o.chat_template : nullptr, cr,
                              status, o.any_model_name);
    case CompletionKind::kNative:
      return ParseNativeCompletionRequest(body, o.model_id, cr, status, o.any_model_name);
    case CompletionKind::kInfill:
      return ParseInfillRequest(body, o.model_id, cr, status, o.any_model_name);
    case CompletionKind::kEmbeddings:
    case CompletionKind::kNativeEmbeddings:
    case CompletionKind::kSlotAction:
      return Status::Error("not a completion");  // (StartEmbedding reads these)
    case CompletionKind::kResponses: {
      std::string chat;
      *status = 400;
      PI_RETURN_IF_ERROR(ResponsesToChat(body, &chat, &cr->responses_echo));
      cr->responses = true;
      return InResponsesTerms(ParseChatRequest(chat, o.model_id,
                                               o.chat_template ? &*o.chat_template : nullptr, cr,
                                               status, o.any_model_name));
    }
    case CompletionKind::kCompletions:
      break;
  }
  return ParseCompletionRequest(body, o.model_id, cr, status, o.any_model_name);
}

// The server's defaults (--seed, --temp, -n) where the request left them
// out; -n also caps what it asks for (as llama-server's).
void ApplyServerDefaults(const HttpServerOptions& o, v1::GenerateRequest* r) {
  v1::SamplingParams* sp = r->mutable_sampling();
  if (!sp->has_seed() && o.default_seed != kRandomSeed) sp->set_seed(o.default_seed);
  if (!sp->has_temperature() && o.default_temperature >= 0) {
    sp->set_temperature(o.default_temperature);
  }
  if (o.n_predict > 0 && (r->n_predict() < 0 || r->n_predict() > o.n_predict)) {
    r->set_n_predict(o.n_predict);
  }
}

// An infill request's prompt: InfillPrompt's tokens (infill.h), leaving room
// for n_predict tokens (a quarter of the context when it asks for no limit).
Status InfillTokens(RequestRunner* runner, bool spm, CompletionRequest* cr, int* status) {
  const Tokenizer& tok = runner->tokenizer();
  const InfillInput& in = cr->infill_input;
  size_t bytes = in.prefix.size() + in.suffix.size() + in.prompt.size();
  for (const InfillFile& f : in.extra) bytes += f.filename.size() + f.text.size();
  WorkGate::Pass pass;
  bool busy = false;
  const Status gated = EnterTokenizeGate(&runner->tokenize_gate(), bytes, &pass, &busy);
  *status = busy ? 503 : 400;
  PI_RETURN_IF_ERROR(gated);
  const int n_ctx = runner->engine().n_ctx();
  const int n_predict = cr->request.has_n_predict() ? cr->request.n_predict() : -1;
  const int reserve = n_predict > 0 ? std::min(n_predict, n_ctx - 1) : n_ctx / 4;
  std::vector<int32_t> ids;
  Status s = InfillPrompt(tok, in, spm, n_ctx - reserve, &ids, &cr->infill_truncated);
  if (!s.ok()) return s;
  cr->request.clear_prompt();
  for (int32_t id : ids) cr->request.mutable_prompt_ids()->add_ids(id);
  return Status::Ok();
}

// The prompts that mix token ids and text, made token ids (gated as any
// tokenizing of a request's text).
Status MixedPromptTokens(RequestRunner* runner, CompletionRequest* cr, int* status) {
  size_t bytes = 0;
  bool any = false;
  for (const MixedPrompt& m : cr->mixed_prompts) {
    bytes += MixedPromptTextBytes(m);
    any = any || !m.empty();
  }
  if (!any) return Status::Ok();
  WorkGate::Pass pass;
  bool busy = false;
  const Status gated = EnterTokenizeGate(&runner->tokenize_gate(), bytes, &pass, &busy);
  *status = busy ? 503 : 400;
  PI_RETURN_IF_ERROR(gated.WithContext("prompt"));
  std::vector<int32_t> ids;
  for (size_t p = 0; p < cr->mixed_prompts.size(); ++p) {
    if (cr->mixed_prompts[p].empty()) continue;
    v1::GenerateRequest* r = p == 0 ? &cr->request : &cr->more_prompts[p - 1];
    PI_RETURN_IF_ERROR(EncodeMixedPrompt(runner->tokenizer(), cr->mixed_prompts[p], false,
                                         r->parse_special(), &ids)
                           .WithContext("prompt"));
    r->clear_prompt();
    for (int32_t id : ids) r->mutable_prompt_ids()->add_ids(id);
  }
  return Status::Ok();
}

// Tokenizes one prompt of a completion and submits its n choices (indexes
// first_choice on) to *choices; false with *refusal when the prompt is
// refused or the queue is full.
bool SubmitPrompt(const HttpContext& c, CompletionKind kind, const CompletionRequest& cr,
                  const v1::GenerateRequest& prompt, int first_choice, const CompletionInfo& info,
                  bool several, const std::function<void()>& notify, CompletionChoices* choices,
                  HttpReply* refusal) {
  const HttpServerOptions& o = *c.options;
  RequestRunner* runner = c.runner;
  const Tokenizer& tok = runner->tokenizer();
  const Engine& engine = runner->engine();
  GenerationRequest request;
  SamplerParams sampling;
  bool busy = false;
  const Status s =
      ParseGenerateRequestGated(&runner->tokenize_gate(), prompt, engine.n_vocab(), engine.n_ctx(),
                                tok, &request, &sampling, &cr.content_spans, &busy);
  if (!s.ok()) {
    *refusal = busy ? ErrorReply(503, s.message(), 1) : ErrorReply(400, s.message());
    return false;
  }
  const bool native = kind == CompletionKind::kNative || kind == CompletionKind::kInfill;
  const int n_prompt = static_cast<int>(request.prompt.size());
  // The prompt's text, for echo.
  std::string prompt_text;
  if (cr.echo) {
    prompt_text = prompt.has_prompt_ids() ? tok.Decode(request.prompt) : prompt.prompt();
  }
  NativeReplyInfo native_info;
  if (native || o.verbose) {
    native_info.model = o.model_id;
    native_info.prompt = NativePromptText(tok, request.prompt);
    native_info.n_prompt = n_prompt;
    native_info.return_tokens = cr.return_tokens;
    native_info.n_probs = cr.n_probs;
    native_info.post_sampling_probs = cr.request.post_sampling_probs();
    native_info.sampling = sampling;
    native_info.n_predict = request.n_predict;
    native_info.stops = request.stops;
    native_info.ignore_eos = request.ignore_eos;
    native_info.prompt_truncated = cr.infill_truncated;
    native_info.response_fields = cr.response_fields;
  }
  const bool logprobs = request.logprobs >= 0;
  const bool chat = kind == CompletionKind::kChat || kind == CompletionKind::kResponses;
  for (int k = 0; k < cr.n; ++k) {
    // A choice's own draws: a given seed goes on by one a choice (a random
    // one is each sampler's own).
    SamplerParams choice_sampling = sampling;
    if (k > 0 && sampling.seed != kRandomSeed) {
      choice_sampling.seed = static_cast<uint32_t>((uint64_t{sampling.seed} + k) % kRandomSeed);
    }
    CompletionChoice choice;
    choice.job = runner->Submit(request, choice_sampling, cr.stream, notify);
    if (!choice.job) {
      *refusal = QueueFullReply(runner->max_queue());
      return false;
    }
    CompletionInfo choice_info = info;
    choice_info.choice = first_choice + k;
    choice.reply = std::make_unique<CompletionReply>(chat, std::move(choice_info), &tok, logprobs);
    CompletionReply& reply = *choice.reply;
    reply.set_include_usage(cr.include_usage);
    reply.set_timings_per_token(cr.timings_per_token && cr.stream);
    if (cr.echo) reply.set_echo(prompt_text);
    native_info.index = first_choice + k;
    if (native) {
      reply.set_native(native_info);
    } else if (o.verbose && !cr.responses) {
      reply.set_verbose(native_info);
    }
    if (cr.tools) reply.set_tools(cr.tool_syntax);
    if (cr.responses) reply.set_responses(cr.responses_echo);
    if (several) reply.set_one_of_several();
    choice.n_prompt = n_prompt;
    choice.counts_prompt = k == 0;
    choices->Add(std::move(choice));
  }
  return true;
}

}  // namespace

CompletionReply* SubmitWholeJob(RequestRunner* runner, GenerationRequest request,
                                std::function<void()> notify, CompletionStart* out) {
  CompletionChoice choice;
  choice.n_prompt = static_cast<int>(PromptTokens(request));
  choice.job = runner->Submit(std::move(request), SamplerParams(), false, std::move(notify));
  if (!choice.job) {
    out->refusal = QueueFullReply(runner->max_queue());
    return nullptr;
  }
  choice.reply =
      std::make_unique<CompletionReply>(false, CompletionInfo{}, &runner->tokenizer(), false);
  CompletionReply* reply = choice.reply.get();
  out->choices.Add(std::move(choice));
  out->stream = false;
  return reply;
}

void StartCompletion(const HttpContext& c, CompletionKind kind, const std::string& body,
                     uint64_t number, std::function<void()> notify, CompletionStart* out) {
  if (!c.runner) {
    out->refusal = ErrorReply(503, "the model is still loading; retry shortly", 1);
    return;
  }
  if (kind == CompletionKind::kSlotAction) {
    return StartSlotAction(c, c.query, body, std::move(notify), out);
  }
  if (kind == CompletionKind::kEmbeddings || kind == CompletionKind::kNativeEmbeddings) {
    return StartEmbedding(c, body, kind == CompletionKind::kNativeEmbeddings, std::move(notify),
                          out);
  }
  const HttpServerOptions& o = *c.options;
  RequestRunner* runner = c.runner;
  CompletionRequest cr;
  int status = 400;
  Status s = ParseCompletion(o, kind, body, &cr, &status);
  if (!s.ok()) {
    out->refusal = ErrorReply(status, s.message());
    return;
  }
  const Engine& engine = runner->engine();
  ApplyServerDefaults(o, &cr.request);
  if (cr.infill) {
    s = InfillTokens(runner, o.spm_infill, &cr, &status);
    if (!s.ok()) {
      // A completion's suffix asked for it: the error names the field.
      if (kind == CompletionKind::kCompletions && status == 400) s = s.WithContext("suffix");
      out->refusal = ErrorReply(status, s.message(), status == 503 ? 1 : 0);
      return;
    }
  }
  s = MixedPromptTokens(runner, &cr, &status);
  if (!s.ok()) {
    out->refusal = ErrorReply(status, s.message(), status == 503 ? 1 : 0);
    return;
  }
  // The prompts: the request's, then the others (completions).
  std::vector<v1::GenerateRequest> prompts{cr.request};
  for (const v1::GenerateRequest& more : cr.more_prompts) {
    v1::GenerateRequest r = cr.request;
    if (more.has_prompt_ids()) {
      *r.mutable_prompt_ids() = more.prompt_ids();
    } else {
      r.set_prompt(more.prompt());
    }
    prompts.push_back(std::move(r));
  }
  const int total = cr.n * static_cast<int>(prompts.size());
  const int at_once = runner->max_queue() + engine.n_seq();
  if (total > at_once) {
    out->refusal = ErrorReply(
        400, "n: " + std::to_string(total) + " choices in all; this server holds at most " +
                 std::to_string(at_once) + " requests at once (--max-queue and -np)");
    return;
  }
  const bool chat = kind == CompletionKind::kChat || kind == CompletionKind::kResponses;
  CompletionInfo info;
  info.id = (kind == CompletionKind::kResponses ? "resp_"
             : chat                             ? "chatcmpl-"
                                                : "cmpl-") +
            std::to_string(number);
  info.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  info.model = o.model_id;
  info.system_fingerprint = o.system_fingerprint;
  info.last_chunk_usage = total == 1;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (!SubmitPrompt(c, kind, cr, prompts[p], static_cast<int>(p) * cr.n, info, total > 1, notify,
                      &out->choices, &out->refusal)) {
      // What was submitted goes: the request is refused whole.
      out->choices.Cancel(runner, "another choice of the request was refused");
      out->choices = CompletionChoices();
      return;
    }
  }
  if (total > 1) out->choices.SetSeveral(info, chat, cr.include_usage);
  out->stream = cr.stream;
}

}  // namespace pi
