// Chat templates: a conversation (system, user and assistant messages)
// rendered as the prompt text a chat model was trained on, for the families
// llama.cpp recognises without a Jinja engine. The family is detected from
// the GGUF's tokenizer.chat_template (the Jinja text, by the markers each
// family's template contains) or named by --chat-template. The rendered
// text holds the family's control tokens literally; it is tokenized with
// special tokens parsed (Tokenizer::Encode's parse_special) outside the
// messages' own text (the content spans), so no message can write a
// control token, the BOS added by the tokenizer as usual.
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/format/gguf.h"
#include "common/text/tokenizer.h"

namespace pi {

// kMistral is Mistral's v1 format ("[INST] user [/INST]"); kMistralV3 and
// kMistralV3Tekken the formats of its models with tool tokens (7B v0.3; Nemo,
// whose markers take no spaces), as their own templates write them.
enum class ChatTemplate {
  kChatml,
  kLlama2,
  kLlama3,
  kMistral,
  kMistralV3,
  kMistralV3Tekken,
  kZephyr,
  kGemma,
  kVicuna,
  kPhi3,
  // Named and detected as llama.cpp names and detects them: each message
  // "prefix content suffix" by its role (chat_template.cpp's table).
  kPhi4,
  kFalcon3,
  kMistralV7,
  kDeepseek,    // DeepSeek Coder's instruct format
  kDeepseek2,   // DeepSeek V2
  kDeepseek3,   // DeepSeek V3
  kDeepseekR1,  // the DeepSeek R1 distills' own template (<think> opened)
  kCommandR,
  kExaone3,
  kGranite,
  kOpenchat,
  kVicunaOrca,
  kMonarch,
  kOrion,
  kChatglm3,
  kChatglm4,
  kGlmedge,
  kMinicpm,
  kRwkvWorld,
  kGigachat,
  kMegrez
};
inline constexpr int kChatTemplateCount = static_cast<int>(ChatTemplate::kMegrez) + 1;

struct ChatMessage {
  // system | user | assistant; and the roles tool conversations are written
  // with (chat_tools.h): ipython (llama3: a tool's result), available_tools,
  // tool_calls and tool_results (mistral-v3: inside the family's markers).
  std::string role;
  std::string content;
};

const char* ChatTemplateName(ChatTemplate t);
// The names --chat-template takes, comma-separated (for errors and help).
const char* ChatTemplateNames();
// A name (ChatTemplateNames()) into *out; an error listing the names otherwise.
Status ParseChatTemplateName(const std::string& name, ChatTemplate* out);
// The family of a GGUF's tokenizer.chat_template: its name, or Jinja text
// with the family's markers; an error saying the template is not one of
// the known families (and how to choose one) otherwise.
Status DetectChatTemplate(const std::string& text, ChatTemplate* out);

// The model's own template (its GGUF's tokenizer.chat_template), detected;
// an error saying the model has none, or an unknown one, and how to choose
// one (--chat-template NAME) otherwise.
Status ChatTemplateOfModel(const GgufFile& file, ChatTemplate* out);

// `s` without the whitespace around it: Jinja's trim, as templates apply it
// to messages.
std::string TrimSpace(const std::string& s);

// Renders `messages` (roles system, user, assistant, and the family's tool
// roles; a system message only first) and, with add_generation_prompt, opens
// the assistant's turn.
// *content_spans (when given): where the messages' contents are in *out,
// in order.
Status RenderChat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                  bool add_generation_prompt, std::string* out,
                  std::vector<TextSpan>* content_spans = nullptr);

}  // namespace pi
