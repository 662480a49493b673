// RequestStream: one request's tokens on their way from the engine to the
// client's connection. The engine pushes and never waits on a client: the
// stream holds at most `max_tokens` tokens (and `max_bytes` of their text)
// that the connection has not taken yet; one more cancels the request as a
// slow consumer, and the engine frees its sequence at its next step. The
// connection takes what is there when told (the notify callback, run on the
// engine's thread when the stream goes from empty to holding something, and
// at the end) or by waiting. Taking swaps the strings' buffers, so a stream
// in steady use allocates nothing.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace pi {

// Where a request stood when a token was told (llama-server's
// timings_per_token): the prompt tokens evaluated and their time, the
// tokens sampled so far and the time since the first.
struct TokenTimes {
  int prompt_n = 0, predicted_n = 0;
  double prompt_ms = 0, predicted_ms = 0;
};

class RequestStream {
 public:
  struct Token {
    int32_t id = 0;    // -1: the text left at the end (held back for a stop string)
    std::string text;  // whole UTF-8, possibly empty
    int logprob = -1;  // the index of its entry in the result's logprobs, or -1
    TokenTimes times;
  };

  RequestStream(size_t max_tokens, size_t max_bytes);

  // The engine's side. Push returns false when the request is to stop: the
  // client cancelled, or this token found the stream full (then cancelled
  // with "the client did not read its stream").
  bool Push(int32_t id, const std::string& text, int logprob, const TokenTimes& times = {});
  // The request is over: its result is final and no token follows.
  void End();
  bool cancelled() const;

  // The connection's side. `notify` is set before the request is submitted;
  // once SetNotify(nullptr) returns, no call of the old one runs or will.
  void SetNotify(std::function<void()> notify);
  // Moves the waiting tokens into *out (its old strings' buffers come back
  // for reuse); true when the stream has ended and nothing is left.
  bool Take(std::vector<Token>* out);
  // Waits until there is something to take, the end, or `seconds` passed.
  void Wait(double seconds);
  // Stops the request (first reason kept); the engine sees it at its next step.
  void Cancel(const std::string& why);
  std::string cancel_reason() const;
  bool ended() const;

 private:
  const size_t max_tokens_, max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Token> ring_;  // max_tokens_ slots, a ring from head_
  size_t head_ = 0, count_ = 0, bytes_ = 0;
  bool ended_ = false;
  bool cancelled_ = false;
  std::string cancel_reason_;
  std::mutex notify_mu_;  // held while notify_ runs (never with mu_)
  std::function<void()> notify_;
  void Notify();
};

}  // namespace pi
