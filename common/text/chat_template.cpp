#include "common/text/chat_template.h"

namespace pi {
namespace {

struct Named {
  const char* name;
  ChatTemplate t;
};
constexpr Named kNames[] = {
    {"chatml", ChatTemplate::kChatml},        {"llama2", ChatTemplate::kLlama2},
    {"llama3", ChatTemplate::kLlama3},        {"mistral", ChatTemplate::kMistral},
    {"mistral-v3", ChatTemplate::kMistralV3}, {"mistral-v3-tekken", ChatTemplate::kMistralV3Tekken},
    {"zephyr", ChatTemplate::kZephyr},        {"gemma", ChatTemplate::kGemma},
    {"vicuna", ChatTemplate::kVicuna},        {"phi3", ChatTemplate::kPhi3},
};

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
  for (const ChatMessage& m : messages) out->Markup(open(m.role)).Content(m.content).Markup(close);
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
  return "chatml, llama2, llama3, mistral, mistral-v3, mistral-v3-tekken, zephyr, gemma, vicuna, "
         "phi3";
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
    *out = ChatTemplate::kChatml;
  } else if (Has(text, "<|start_header_id|>") && Has(text, "<|end_header_id|>")) {
    *out = ChatTemplate::kLlama3;
  } else if (Has(text, "[INST]") && (Has(text, "[TOOL_CALLS]") || Has(text, "[AVAILABLE_TOOLS]"))) {
    // 7B v0.3 writes "[TOOL_CALLS] [", Nemo "[TOOL_CALLS][".
    *out = Has(text, "[TOOL_CALLS][") || Has(text, "[AVAILABLE_TOOLS][")
               ? ChatTemplate::kMistralV3Tekken
               : ChatTemplate::kMistralV3;
  } else if (Has(text, "[INST]")) {
    *out = Has(text, "<<SYS>>") ? ChatTemplate::kLlama2 : ChatTemplate::kMistral;
  } else if (Has(text, "<|assistant|>") && Has(text, "<|end|>")) {
    *out = ChatTemplate::kPhi3;
  } else if (Has(text, "<|user|>")) {
    *out = ChatTemplate::kZephyr;
  } else if (Has(text, "<start_of_turn>")) {
    *out = ChatTemplate::kGemma;
  } else if (Has(text, "USER: ") && Has(text, "ASSISTANT:")) {
    *out = ChatTemplate::kVicuna;
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
      // No system role: it opens the first user turn; the assistant is "model".
      bool first = true;
      for (const ChatMessage* m : turns) {
        const bool user = m->role == "user";
        out.Markup(std::string("<start_of_turn>") + (user ? "user" : "model") + "\n");
        if (user && first && !system.empty()) out.Content(system).Markup("\n\n");
        out.Content(m->content).Markup("<end_of_turn>\n");
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
