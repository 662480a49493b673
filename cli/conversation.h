// pi-run -cnv: a conversation in the terminal, as llama-cli's. Each line
// read is the user's turn; the whole conversation is rendered with the chat
// template (common/text/chat_template.h, the code the HTTP API's chat uses),
// tokenized with its control tokens, and the assistant's reply streamed to
// `out`, one reply per turn followed by a newline; each turn starts from the
// prefix the last turn's prompt left in the KV cache (prompt_cache.h). Ends at end of input or
// a line "/exit"; a conversation that outgrows the context ends with an
// error saying so.
#pragma once

#include <cstdio>
#include <istream>
#include <string>

#include "cli/engine_flags.h"
#include "cli/request_flags.h"
#include "common/base/status.h"
#include "common/text/chat_template.h"
#include "common/text/sampler.h"

namespace pi {

struct ConversationOptions {
  ChatTemplate chat_template = ChatTemplate::kChatml;
  std::string system_prompt;  // empty: none
  int n_predict = -1;         // per reply (-1: to the end of text or the context)
  std::vector<std::string> stops;
  bool ignore_eos = false;
};

// `prompt_out`: where the "> " cue goes (stderr: the replies alone on `out`).
Status RunConversation(const ConversationOptions& options, LoadedEngine* loaded, Sampler* sampler,
                       std::istream& in, FILE* out, FILE* prompt_out);

}  // namespace pi
