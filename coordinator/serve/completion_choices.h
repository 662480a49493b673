// CompletionChoices: what one completion request runs — a job and its reply
// per choice (one; or n for each of its prompts) — drained together into one
// HTTP response. A whole response lists the choices by index and sums the
// usage (each prompt's tokens once); a stream sends each choice's chunks
// under its index as they come and each choice's last chunk as it ends,
// then, with several, the request's usage (stream_options) and [DONE]. A
// choice that fails fails the request: a 500 when nothing went out yet,
// else an error event and no [DONE]; the other choices are cancelled.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coordinator/serve/completion_reply.h"
#include "coordinator/serve/request_job.h"
#include "coordinator/serve/request_runner.h"

namespace pi {

struct CompletionChoice {
  std::shared_ptr<RequestJob> job;
  std::unique_ptr<CompletionReply> reply;
  int n_prompt = 0;
  bool counts_prompt = true;  // its prompt's first choice: the usage counts the prompt here
  bool ended = false;         // its stream's end was taken
};

class CompletionChoices {
 public:
  // With several choices: what the stream's last chunks carry (the id,
  // model and fingerprint; chat or completions; the usage chunk).
  void SetSeveral(CompletionInfo info, bool chat, bool include_usage) {
    info_ = std::move(info);
    chat_ = chat;
    include_usage_ = include_usage;
  }
  void Add(CompletionChoice c) { choices_.push_back(std::move(c)); }
  size_t size() const { return choices_.size(); }

  enum class Step {
    kGoing,      // *events holds what is ready to send (maybe nothing); *last: the end is in it
    kWhole,      // the whole reply: *status and *body
    kCancelled,  // a job ended cancelled (the client left, the server stops): no normal end
  };
  // Takes what the jobs' streams hold (events only when `streaming`).
  Step Drain(bool streaming, RequestRunner* runner, std::string* events, bool* last, int* status,
             std::string* body);
  // Every job: no more notices, and cancelled (a waiting one leaves the line).
  void Cancel(RequestRunner* runner, const std::string& why);

 private:
  bool Started() const;  // an event of any choice went out
  // The choices' whole responses as one (a failed one's error instead).
  int WholeResponse(std::string* body) const;
  void Usage(int* prompt_tokens, int* completion_tokens) const;

  std::vector<CompletionChoice> choices_;
  std::vector<RequestStream::Token> tokens_;
  CompletionInfo info_;
  bool chat_ = false, include_usage_ = false;
};

}  // namespace pi
