#include "common/text/chat_template.h"

namespace pi {
namespace {

struct Named {
  const char* name;
  ChatTemplate t;
};
constexpr Named kNames[] = {
    {"chatml", ChatTemplate::kChatml},
    {"llama2", ChatTemplate::kLlama2},
    {"llama3", ChatTemplate::kLlama3},
    {"mistral", ChatTemplate::kMistral},
    {"mistral-v3", ChatTemplate::kMistralV3},
    {"mistral-v3-tekken", ChatTemplate::kMistralV3Tekken},
    {"zephyr", ChatTemplate::kZephyr},
    {"gemma", ChatTemplate::kGemma},
    {"vicuna", ChatTemplate::kVicuna},
    {"phi3", ChatTemplate::kPhi3},
    {"phi4", ChatTemplate::kPhi4},
    {"falcon3", ChatTemplate::kFalcon3},
    {"mistral-v7", ChatTemplate::kMistralV7},
    {"deepseek", ChatTemplate::kDeepseek},
    {"deepseek2", ChatTemplate::kDeepseek2},
    {"deepseek3", ChatTemplate::kDeepseek3},
    {"deepseek-r1", ChatTemplate::kDeepseekR1},
    {"command-r", ChatTemplate::kCommandR},
    {"exaone3", ChatTemplate::kExaone3},
    {"granite", ChatTemplate::kGranite},
    {"openchat", ChatTemplate::kOpenchat},
    {"vicuna-orca", ChatTemplate::kVicunaOrca},
    {"monarch", ChatTemplate::kMonarch},
    {"orion", ChatTemplate::kOrion},
    {"chatglm3", ChatTemplate::kChatglm3},
    {"chatglm4", ChatTemplate::kChatglm4},
    {"glmedge", ChatTemplate::kGlmedge},
    {"minicpm", ChatTemplate::kMinicpm},
    {"rwkv-world", ChatTemplate::kRwkvWorld},
    {"gigachat", ChatTemplate::kGigachat},
    {"megrez", ChatTemplate::kMegrez},
};

// The families whose messages are each "prefix content suffix" by role.
struct TurnFormat {
  ChatTemplate t;
  const char* start;      // before the first message
  const char* prefix[3];  // system, user, assistant
  const char* suffix[3];
  const char* generation;       // opens the assistant's turn ("": none)
  bool trim = false;            // contents trimmed (Jinja's trim)
  bool bos_between = false;     // "<s>" before every message but the first, and the opening
  bool system_in_user = false;  // the system message opens the first user message, + "\n\n"
  bool drop_thinking = false;   // an assistant message from after its last "</think>"
};
// DeepSeek's markers, in UTF-8 (full-width bars, U+2581); macros, as the
// table joins them to other literals (undefined at the file's end).
#define PI_DS_USER \
  "<\xef\xbd\x9c"  \
  "User\xef\xbd\x9c>"
#define PI_DS_ASSISTANT \
  "<\xef\xbd\x9c"       \
  "Assistant\xef\xbd\x9c>"
#define PI_DS_EOS \
  "<\xef\xbd\x9c" \
  "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
const TurnFormat kTurnFormats[] = {
    {ChatTemplate::kPhi4,
     "",
     {"<|im_start|>system<|im_sep|>", "<|im_start|>user<|im_sep|>",
      "<|im_start|>assistant<|im_sep|>"},
     {"<|im_end|>", "<|im_end|>", "<|im_end|>"},
     "<|im_start|>assistant<|im_sep|>"},
    {ChatTemplate::kFalcon3,
     "",
     {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"},
     {"\n", "\n", "\n"},
     "<|assistant|>\n"},
    {ChatTemplate::kMistralV7,
     "",
     {"[SYSTEM_PROMPT] ", "[INST] ", " "},
     {"[/SYSTEM_PROMPT]", "[/INST]", "</s>"},
     ""},
    {ChatTemplate::kDeepseek,
     "",
     {"", "### Instruction:\n", "### Response:\n"},
     {"", "\n", "\n<|EOT|>\n"},
     "### Response:\n"},
    {ChatTemplate::kDeepseek2,
     "",
     {"", "User: ", "Assistant: "},
     {"\n\n", "\n\n", PI_DS_EOS},
     "Assistant:"},
    {ChatTemplate::kDeepseek3,
     "",
     {"", PI_DS_USER, PI_DS_ASSISTANT},
     {"\n\n", "", PI_DS_EOS},
     PI_DS_ASSISTANT},
    {ChatTemplate::kDeepseekR1,
     "",
     {"", PI_DS_USER, PI_DS_ASSISTANT},
     {"", "", PI_DS_EOS},
     PI_DS_ASSISTANT "<think>\n",
     false,
     false,
     false,
     true},
    {ChatTemplate::kCommandR,
     "",
     {"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
      "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
     {"<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
     true},
    {ChatTemplate::kExaone3,
     "",
     {"[|system|]", "[|user|]", "[|assistant|]"},
     {"[|endofturn|]\n", "\n", "[|endofturn|]\n"},
     "[|assistant|]",
     true},
    {ChatTemplate::kGranite,
     "",
     {"<|start_of_role|>system<|end_of_role|>", "<|start_of_role|>user<|end_of_role|>",
      "<|start_of_role|>assistant<|end_of_role|>"},
     {"<|end_of_text|>\n", "<|end_of_text|>\n", "<|end_of_text|>\n"},
     "<|start_of_role|>assistant<|end_of_role|>\n"},
    {ChatTemplate::kOpenchat,
     "",
     {"", "GPT4 Correct User: ", "GPT4 Correct Assistant: "},
     {"<|end_of_turn|>", "<|end_of_turn|>", "<|end_of_turn|>"},
     "GPT4 Correct Assistant:"},
    {ChatTemplate::kVicunaOrca,
     "",
     {"SYSTEM: ", "USER: ", "ASSISTANT: "},
     {"\n", "\n", "</s>\n"},
     "ASSISTANT:"},
    {ChatTemplate::kMonarch,
     "",
     {"system\n", "user\n", "assistant\n"},
     {"</s>\n", "</s>\n", "</s>\n"},
     "assistant\n",
     false,
     true},
    {ChatTemplate::kOrion,
     "",
     {"", "Human: ", ""},
     {"", "\n\nAssistant: </s>", "</s>"},
     "",
     false,
     false,
     true},
    {ChatTemplate::kChatglm3,
     "[gMASK]sop",
     {"<|system|>\n ", "<|user|>\n ", "<|assistant|>\n "},
     {"", "", ""},
     "<|assistant|>"},
    {ChatTemplate::kChatglm4,
     "[gMASK]<sop>",
     {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"},
     {"", "", ""},
     "<|assistant|>"},
    {ChatTemplate::kGlmedge,
     "",
     {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"},
     {"", "", ""},
     "<|assistant|>"},
    {ChatTemplate::kMinicpm,
     "",
     {"", "<\xe7\x94\xa8\xe6\x88\xb7>", ""},
     {"", "<AI>", ""},
     "",
     true},
    {ChatTemplate::kRwkvWorld, "", {"", "User: ", ""}, {"\n\n", "\n\nAssistant:", "\n\n"}, ""},
    {ChatTemplate::kGigachat,
     "<s>",
     {"", "user<|role_sep|>", "assistant<|role_sep|>"},
     {"<|message_sep|>", "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>",
      "<|message_sep|>"},
     "assistant<|role_sep|>"},
    {ChatTemplate::kMegrez,
     "",
     {"<|role_start|>system<|role_end|>", "<|role_start|>user<|role_end|>",
      "<|role_start|>assistant<|role_end|>"},
     {"<|turn_end|>", "<|turn_end|>", "<|turn_end|>"},
     "<|role_start|>assistant<|role_end|>"},
};
const TurnFormat* TurnFormatOf(ChatTemplate t) {
  for (const TurnFormat& f : kTurnFormats) {
    if (f.t == t) return &f;
  }
  return nullptr;
}

bool Has(const std::string& s, const char* marker) {
  return s.find(marker) != std::string::npos;
}

bool IsMistralV3(ChatTemplate t) {
  return t == ChatTemplate::kMistralV3 || t == ChatTemplate::kMistralV3Tekken;
}

// The roles a family writes besides system, user and assistant.
bool ToolRole(ChatTemplate t, const std::string& role) {
  if (t == ChatTemplate::kLlama3) return role == "ipython";
  return IsMistralV3(t) &&
         (role == "available_tools" || role == "tool_calls" || role == "tool_results");
}

// The system message (if first) apart from the turns.
Status Split(ChatTemplate t, const std::vector<ChatMessage>& messages, std::string* system,
             bool* has_system, std::vector<const ChatMessage*>* turns) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      if (i != 0) return Status::Error("messages[%zu]: a system message must come first", i);
      *system = m.content;
      *has_system = true;
    } else if (m.role == "user" || m.role == "assistant" || ToolRole(t, m.role)) {
      turns->push_back(&m);
    } else {
      return Status::Error("messages[%zu]: role '%s' is not system, user or assistant", i,
                           m.role.c_str());
    }
  }
  return Status::Ok();
}

// The rendered text, with where each message's own text lies in it.
struct Rendered {
  std::string* text;
  std::vector<TextSpan>* spans;  // may be null
  Rendered& Markup(const std::string& s) {
    *text += s;
    return *this;
  }
  Rendered& Content(const std::string& s) {
    if (spans && !s.empty()) spans->push_back({text->size(), text->size() + s.size()});
    *text += s;
    return *this;
  }
};

// A TurnFormat family: the system message (first, if any) and the turns.
void RenderTurns(const TurnFormat& f, const std::string& system, bool has_system,
                 const std::vector<const ChatMessage*>& turns, bool gen, Rendered* out) {
  auto text = [&f](const std::string& content) { return f.trim ? TrimSpace(content) : content; };
  out->Markup(f.start);
  bool first = true;
  auto open = [&](int role) {
    if (f.bos_between && !first) out->Markup("<s>");
    first = false;
    out->Markup(f.prefix[role]);
  };
  bool system_pending = has_system && f.system_in_user;
  if (has_system && !f.system_in_user) {
    open(0);
    out->Content(text(system)).Markup(f.suffix[0]);
  }
  for (const ChatMessage* m : turns) {
    const int role = m->role == "user" ? 1 : 2;
    open(role);
    if (role == 1 && system_pending) {
      out->Content(system).Markup("\n\n");
      system_pending = false;
    }
    std::string content = text(m->content);
    const size_t think =
        f.drop_thinking && role == 2 ? content.rfind("</think>") : std::string::npos;
    if (think != std::string::npos) content = content.substr(think + sizeof "</think>" - 1);
    out->Content(content).Markup(f.suffix[role]);
  }
  if (gen && f.generation[0] != '\0') {
    if (f.bos_between && !first) out->Markup("<s>");
    out->Markup(f.generation);
  }
}

// Families whose turns are "<open role>content<close>": chatml, llama3,
// zephyr, phi3 (the system message is a turn of its own).
void RenderTagged(ChatTemplate t, const std::vector<ChatMessage>& messages, bool gen,
                  Rendered* out) {
  auto open = [t](const std::string& role) {
    switch (t) {
      case ChatTemplate::kChatml:
        return "<|im_start|>" + role + "\n";
      case ChatTemplate::kLlama3:
        return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
      default:
        return "<|" + role + "|>\n";  // zephyr, phi3
    }
  };
  const char* close = t == ChatTemplate::kChatml   ? "<|im_end|>\n"
                      : t == ChatTemplate::kLlama3 ? "<|eot_id|>"
                      : t == ChatTemplate::kPhi3   ? "<|end|>\n"
                                                   : "</s>\n";  // zephyr
  for (const ChatMessage& m : messages) {
    // (Llama 3's templates trim the messages, not a tool's result.)
    const bool trim = t == ChatTemplate::kLlama3 && m.role != "ipython";
    out->Markup(open(m.role)).Content(trim ? TrimSpace(m.content) : m.content).Markup(close);
  }
  if (gen) out->Markup(open("assistant"));
}

// Mistral's formats with tool tokens (7B v0.3's template; Nemo's without the
// spaces after the markers): the system message opens the last message when
// that is the user's (and is left out otherwise, as those templates do); the
// tools go before the last user message; no generation prompt.
void RenderMistralV3(ChatTemplate t, const std::string& system, bool has_system,
                     const std::vector<const ChatMessage*>& turns, Rendered* out) {
  const std::string sp = t == ChatTemplate::kMistralV3 ? " " : "";
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& m = *turns[i];
    if (m.role == "user") {
      out->Markup("[INST]" + sp);
      if (i + 1 == turns.size() && has_system) out->Content(system).Markup("\n\n");
      out->Content(m.content).Markup("[/INST]");
    } else if (m.role == "assistant") {
      if (sp.empty()) {
        out->Content(m.content);
      } else {
        out->Markup(" ").Content(TrimSpace(m.content));
      }
      out->Markup("</s>");
    } else if (m.role == "available_tools") {
      out->Markup("[AVAILABLE_TOOLS]" + sp).Content(m.content).Markup("[/AVAILABLE_TOOLS]");
    } else if (m.role == "tool_calls") {
      out->Markup("[TOOL_CALLS]" + sp).Content(m.content).Markup("</s>");
    } else {  // tool_results
      out->Markup("[TOOL_RESULTS]" + sp).Content(m.content).Markup("[/TOOL_RESULTS]");
    }
  }
}

}  // namespace

const char* ChatTemplateName(ChatTemplate t) {
  for (const Named& n : kNames) {
    if (n.t == t) return n.name;
  }
  return "?";
}

const char* ChatTemplateNames() {
  static const std::string names = [] {
    std::string list;
    for (const Named& n : kNames) list += std::string(list.empty() ? "" : ", ") + n.name;
    return list;
  }();
  return names.c_str();
}

Status ParseChatTemplateName(const std::string& name, ChatTemplate* out) {
  for (const Named& n : kNames) {
    if (name == n.name) {
      *out = n.t;
      return Status::Ok();
    }
  }
  return Status::Error("unknown chat template '%s' (known: %s)", name.c_str(), ChatTemplateNames());
}

Status DetectChatTemplate(const std::string& text, ChatTemplate* out) {
  if (ParseChatTemplateName(text, out).ok()) return Status::Ok();
  // The markers llama.cpp keys on, most specific first.
  if (Has(text, "<|im_start|>")) {
    *out = Has(text, "<|im_sep|>") ? ChatTemplate::kPhi4 : ChatTemplate::kChatml;
  } else if (Has(text, "<|start_header_id|>") && Has(text, "<|end_header_id|>")) {
    *out = ChatTemplate::kLlama3;
  } else if (Has(text, "[INST]") && Has(text, "[SYSTEM_PROMPT]")) {
    *out = ChatTemplate::kMistralV7;
  } else if (Has(text, "[INST]") && (Has(text, "[TOOL_CALLS]") || Has(text, "[AVAILABLE_TOOLS]"))) {
    // 7B v0.3 writes "[TOOL_CALLS] [", Nemo "[TOOL_CALLS][".
    *out = Has(text, "[TOOL_CALLS][") || Has(text, "[AVAILABLE_TOOLS][")
               ? ChatTemplate::kMistralV3Tekken
               : ChatTemplate::kMistralV3;
  } else if (Has(text, "[INST]")) {
    *out = Has(text, "<<SYS>>") ? ChatTemplate::kLlama2 : ChatTemplate::kMistral;
  } else if (Has(text, "<|assistant|>") && Has(text, "<|end|>")) {
    *out = ChatTemplate::kPhi3;
  } else if (Has(text, "[gMASK]sop")) {  // (GLM's roles are also zephyr's markers)
    *out = ChatTemplate::kChatglm3;
  } else if (Has(text, "[gMASK]<sop>")) {
    *out = ChatTemplate::kChatglm4;
  } else if (Has(text, "<|assistant|>") && Has(text, "<|user|>") && Has(text, "</s>")) {
    *out = ChatTemplate::kFalcon3;
  } else if (Has(text, "<|user|>")) {
    *out = ChatTemplate::kZephyr;
  } else if (Has(text, "bos_token + message['role']")) {
    *out = ChatTemplate::kMonarch;
  } else if (Has(text, "<start_of_turn>")) {
    *out = ChatTemplate::kGemma;
  } else if (Has(text, "'\\n\\nAssistant: ' + eos_token")) {
    *out = ChatTemplate::kOrion;
  } else if (Has(text, "GPT4 Correct ")) {
    *out = ChatTemplate::kOpenchat;
  } else if (Has(text, "USER: ") && Has(text, "ASSISTANT:")) {
    *out = Has(text, "SYSTEM: ") ? ChatTemplate::kVicunaOrca : ChatTemplate::kVicuna;
  } else if (Has(text, "### Instruction:") && Has(text, "<|EOT|>")) {
    *out = ChatTemplate::kDeepseek;
  } else if (Has(text, "<|START_OF_TURN_TOKEN|>") && Has(text, "<|USER_TOKEN|>")) {
    *out = ChatTemplate::kCommandR;
  } else if (Has(text, "<\xe7\x94\xa8\xe6\x88\xb7>")) {  // "<用户>"
    *out = ChatTemplate::kMinicpm;
  } else if (Has(text, "'Assistant: ' + message['content'] + eos_token")) {
    *out = ChatTemplate::kDeepseek2;
  } else if (Has(text, PI_DS_USER) && Has(text, PI_DS_ASSISTANT)) {
    // The R1 distills' template opens the reply with <think>.
    *out = Has(text, "<think>") ? ChatTemplate::kDeepseekR1 : ChatTemplate::kDeepseek3;
  } else if (Has(text, "[|system|]") && Has(text, "[|assistant|]") && Has(text, "[|endofturn|]")) {
    *out = ChatTemplate::kExaone3;
  } else if (Has(text, "rwkv-world")) {
    *out = ChatTemplate::kRwkvWorld;
  } else if (Has(text, "<|start_of_role|>")) {
    *out = ChatTemplate::kGranite;
  } else if (Has(text,
                 "additional_special_tokens[0] + message['content'] + "
                 "additional_special_tokens[1]")) {
    *out = ChatTemplate::kGigachat;
  } else if (Has(text, "<|role_start|>")) {
    *out = ChatTemplate::kMegrez;
  } else {
    return Status::Error(
        "the model's chat template is not one of the known families (%s); choose one with "
        "--chat-template",
        ChatTemplateNames());
  }
  return Status::Ok();
}

Status RenderChat(ChatTemplate t, const std::vector<ChatMessage>& messages, bool gen,
                  std::string* text, std::vector<TextSpan>* content_spans) {
  text->clear();
  if (content_spans) content_spans->clear();
  Rendered out{text, content_spans};
  std::string system;
  bool has_system = false;
  std::vector<const ChatMessage*> turns;
  PI_RETURN_IF_ERROR(Split(t, messages, &system, &has_system, &turns));
  switch (t) {
    case ChatTemplate::kChatml:
    case ChatTemplate::kLlama3:
    case ChatTemplate::kZephyr:
    case ChatTemplate::kPhi3:
      RenderTagged(t, messages, gen, &out);
      return Status::Ok();
    case ChatTemplate::kLlama2: {
      // Meta's format: the system block inside the first [INST]; each
      // answer closed by </s> and the next exchange opened by <s>.
      bool first = true;
      for (const ChatMessage* m : turns) {
        if (m->role == "user") {
          if (!first) out.Markup("<s>");
          out.Markup("[INST] ");
          if (first && !system.empty()) {
            out.Markup("<<SYS>>\n").Content(system).Markup("\n<</SYS>>\n\n");
          }
          out.Content(m->content).Markup(" [/INST]");
          first = false;
        } else {
          out.Markup(" ").Content(m->content).Markup(" </s>");
        }
      }
      return Status::Ok();
    }
    case ChatTemplate::kMistral: {
      // Mistral's v1 format; a system message goes before the first user's.
      bool first = true;
      for (const ChatMessage* m : turns) {
        if (m->role == "user") {
          out.Markup("[INST] ");
          if (first && !system.empty()) out.Content(system).Markup("\n\n");
          out.Content(m->content).Markup(" [/INST]");
          first = false;
        } else {
          out.Markup(" ").Content(m->content).Markup("</s>");
        }
      }
      return Status::Ok();
    }
    case ChatTemplate::kMistralV3:
    case ChatTemplate::kMistralV3Tekken:
      RenderMistralV3(t, system, has_system, turns, &out);
      return Status::Ok();
    case ChatTemplate::kGemma: {
      // No system role: it opens the first user turn; the assistant is "model";
      // the messages trimmed.
      bool first = true;
      for (const ChatMessage* m : turns) {
        const bool user = m->role == "user";
        out.Markup(std::string("<start_of_turn>") + (user ? "user" : "model") + "\n");
        if (user && first && !system.empty()) out.Content(TrimSpace(system)).Markup("\n\n");
        out.Content(TrimSpace(m->content)).Markup("<end_of_turn>\n");
        if (user) first = false;
      }
      if (gen) out.Markup("<start_of_turn>model\n");
      return Status::Ok();
    }
    case ChatTemplate::kVicuna: {
      if (!system.empty()) out.Content(system).Markup("\n\n");
      for (const ChatMessage* m : turns) {
        if (m->role == "user") {
          out.Markup("USER: ").Content(m->content).Markup("\n");
        } else {
          out.Markup("ASSISTANT: ").Content(m->content).Markup("</s>\n");
        }
      }
      if (gen) out.Markup("ASSISTANT:");
      return Status::Ok();
    }
    default:
      break;
  }
  if (const TurnFormat* f = TurnFormatOf(t)) {
    RenderTurns(*f, system, has_system, turns, gen, &out);
    return Status::Ok();
  }
  return Status::Error("unknown chat template");
}

std::string TrimSpace(const std::string& s) {
  const char* ws = " \t\n\r";
  const size_t b = s.find_first_not_of(ws);
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(ws) + 1 - b);
}

Status ChatTemplateOfModel(const GgufFile& file, ChatTemplate* out) {
  std::string jinja;
  if (!file.GetStringOpt("tokenizer.chat_template", &jinja).ok() || jinja.empty()) {
    return Status::Error(
        "the model has no chat template: choose one with --chat-template NAME (%s)",
        ChatTemplateNames());
  }
  return DetectChatTemplate(jinja, out);
}

}  // namespace pi

#undef PI_DS_USER
#undef PI_DS_ASSISTANT
#undef PI_DS_EOS
