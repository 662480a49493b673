#include "coordinator/serve/completion_choices.h"

#include <nlohmann/json.hpp>

namespace pi {

using json = nlohmann::json;

bool CompletionChoices::Started() const {
  for (const CompletionChoice& c : choices_) {
    if (c.reply->started()) return true;
  }
  return false;
}

void CompletionChoices::Cancel(RequestRunner* runner, const std::string& why) {
  for (CompletionChoice& c : choices_) {
    c.job->stream.SetNotify(nullptr);
    if (runner && !c.ended) runner->Cancel(c.job, why);
  }
}

void CompletionChoices::Usage(int* prompt_tokens, int* completion_tokens) const {
  *prompt_tokens = *completion_tokens = 0;
  for (const CompletionChoice& c : choices_) {
    if (c.counts_prompt) *prompt_tokens += c.n_prompt;
    *completion_tokens += static_cast<int>(c.job->result.ids.size());
  }
}

int CompletionChoices::WholeResponse(std::string* body) const {
  if (choices_.size() == 1) {
    const CompletionChoice& c = choices_[0];
    return c.reply->WholeResponse(c.job->result, c.n_prompt, body);
  }
  // llama-server's native replies: a list of them, in prompt order.
  const bool native = choices_[0].reply->native();
  json whole = native ? json::array() : json();
  for (const CompletionChoice& c : choices_) {
    std::string one;
    const int status = c.reply->WholeResponse(c.job->result, c.n_prompt, &one);
    if (status != 200) {
      *body = std::move(one);
      return status;
    }
    json j = json::parse(one);
    if (native) {
      whole.push_back(std::move(j));
      continue;
    }
    if (whole.is_null()) {
      whole = std::move(j);
      continue;
    }
    for (json& choice : j["choices"]) whole["choices"].push_back(std::move(choice));
  }
  if (native) {
    *body = whole.dump(-1, ' ', false, json::error_handler_t::replace);
    return 200;
  }
  // One usage for the request; the timings were each choice's own.
  int prompt_tokens = 0, completion_tokens = 0;
  Usage(&prompt_tokens, &completion_tokens);
  whole["usage"] = {{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}};
  whole.erase("timings");
  *body = whole.dump(-1, ' ', false, json::error_handler_t::replace);
  return 200;
}

CompletionChoices::Step CompletionChoices::Drain(bool streaming, RequestRunner* runner,
                                                 std::string* events, bool* last, int* status,
                                                 std::string* body) {
  events->clear();
  *last = false;
  const bool several = choices_.size() > 1;
  CompletionChoice* failed = nullptr;
  bool all_ended = true;
  for (CompletionChoice& c : choices_) {
    if (c.ended) continue;
    const bool ended = c.job->stream.Take(&tokens_);
    if (streaming) c.reply->AppendTokenEvents(tokens_, c.job->result, events);
    if (!ended) {
      all_ended = false;
      continue;
    }
    c.ended = true;
    const GenerationResult& g = c.job->result;
    const std::string reason = g.stop_reason;
    if (c.job->state == RequestJob::kAbandoned || reason == "cancelled") return Step::kCancelled;
    if (reason == "error") {
      failed = &c;
      break;
    }
    // A stream's choice ends with its last chunk (one choice: and [DONE]).
    if (streaming) c.reply->AppendEndEvents(g, c.n_prompt, events);
    if (streaming && !several) *last = true;
  }
  if (failed) {
    Cancel(runner, "another choice of the request failed");
    if (!streaming || !Started()) {
      *status = failed->reply->WholeResponse(failed->job->result, failed->n_prompt, body);
      return Step::kWhole;
    }
    failed->reply->AppendEndEvents(failed->job->result, failed->n_prompt, events);
    *last = true;
    return Step::kGoing;
  }
  if (!all_ended) return Step::kGoing;
  if (!streaming) {
    *status = WholeResponse(body);
    return Step::kWhole;
  }
  // With several, the request's end follows them all: the usage chunk
  // (stream_options) and [DONE]; a native stream ends with each "stop".
  if (several) {
    if (!choices_[0].reply->native()) {
      if (include_usage_) {
        int prompt_tokens = 0, completion_tokens = 0;
        Usage(&prompt_tokens, &completion_tokens);
        CompletionReply::AppendEvent(UsageChunkJson(info_, chat_, prompt_tokens, completion_tokens),
                                     events);
      }
      CompletionReply::AppendEvent("[DONE]", events);
    }
    *last = true;
  }
  return Step::kGoing;
}

}  // namespace pi
