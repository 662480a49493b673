// Tool calls in a chat (common/text/chat_tools.h): a tool conversation
// rendered to the exact text of each syntax (Hermes as Qwen 2.5's template
// writes it, Llama 3.1's and Mistral 7B v0.3's and Nemo's as theirs do, the
// texts rendered by those Jinja templates with python3-jinja2:
// scripts/check_chat_templates.py; the generic JSON one through llama3's
// markers), the calls
// parsed back out of replies whole and malformed, the reply grammar against
// calls the grammar matcher takes and refuses, and the helpers (Python's
// json.dumps spelling, rule prefixes) against hand-written expectations.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/text/chat_tools.h"
#include "common/text/grammar.h"
#include "common/text/grammar_matcher.h"
#include "common/text/vocab_trie.h"

namespace pi {
namespace {

using ojson = nlohmann::ordered_json;

ToolRequest Weather() {
  ToolRequest r;
  ToolDef t;
  t.name = "get_weather";
  t.description = "The weather in a city";
  t.parameters = ojson::parse(
      R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},)"
      R"( "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]})");
  r.tools.push_back(t);
  ToolDef time;
  time.name = "now";
  time.parameters = ojson::parse(R"({"type": "object", "properties": {}})");
  r.tools.push_back(time);
  return r;
}

std::vector<ChatTurn> Conversation() {
  ChatTurn calls{
      "assistant",
      "",
      {{"call_1", "get_weather", R"({"city":"Paris","unit":"c"})"}, {"call_2", "now", "{}"}},
      ""};
  return {{"system", "Be brief.", {}, ""},
          {"user", "Weather in Paris?", {}, ""},
          calls,
          {"tool", "18 C", {}, "call_1"},
          {"tool", "noon", {}, "call_2"},
          {"user", "And Rome?", {}, ""}};
}

std::string Render(ChatTemplate t, ToolSyntax syntax) {
  std::vector<ChatMessage> messages;
  const Status st = ToolMessages(syntax, Weather(), Conversation(), &messages);
  EXPECT_TRUE(st.ok()) << st.message();
  std::string text;
  EXPECT_TRUE(RenderChat(t, messages, true, &text).ok());
  return text;
}

TEST(ChatTools, HermesAsQwenTemplateWritesIt) {
  const std::string tools =
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
      "weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
      "{\"type\": \"string\", \"maxLength\": 8}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, "
      "\"required\": [\"city\", \"unit\"]}}}\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {\"type\": "
      "\"object\", \"properties\": {}}}}";
  const std::string want =
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
      "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
      "XML tags:\n<tools>\n" +
      tools +
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
      "\"arguments\": {}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\nnoon\n"
      "</tool_response><|im_end|>\n"
      "<|im_start|>user\nAnd Rome?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(Render(ChatTemplate::kChatml, ToolSyntax::kHermes), want);
}

TEST(ChatTools, GenericThroughLlama3Markers) {
  const std::string text = Render(ChatTemplate::kLlama3, ToolSyntax::kGeneric);
  const std::string want_tail =
      "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{\"tool_calls\": [{\"id\": \"call_1\", "
      "\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}, {\"id\": "
      "\"call_2\", \"name\": \"now\", \"arguments\": {}}]}<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\n{\"tool_response\": {\"tool_call_id\": "
      "\"call_1\", \"name\": \"get_weather\", \"content\": \"18 C\"}}\n{\"tool_response\": "
      "{\"tool_call_id\": \"call_2\", \"name\": \"now\", \"content\": \"noon\"}}<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nAnd Rome?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  ASSERT_GE(text.size(), want_tail.size());
  EXPECT_EQ(text.substr(text.size() - want_tail.size()), want_tail);
  EXPECT_EQ(text.rfind("<|start_header_id|>system<|end_header_id|>\n\nBe brief.\n\nYou can call "
                       "these tools",
                       0),
            0u)
      << text;
}

// The conversation a tool-calling model's template takes: calls (one for
// Llama 3.1's), their results, the answer, the next question.
std::vector<ChatTurn> AnsweredConversation(size_t n_calls) {
  std::vector<ChatTurn> turns = Conversation();
  turns[2].tool_calls.resize(n_calls);
  turns.erase(turns.begin() + 3 + static_cast<long>(n_calls), turns.begin() + 5);
  turns.insert(turns.end() - 1, ChatTurn{"assistant", "18 C at noon.", {}, ""});
  return turns;
}

std::string Render(ChatTemplate t, const std::vector<ChatTurn>& turns) {
  std::vector<ChatMessage> messages;
  const Status st = ToolMessages(ToolSyntaxOf(t), Weather(), turns, &messages);
  EXPECT_TRUE(st.ok()) << st.message();
  std::string text;
  const Status rendered = RenderChat(t, messages, true, &text);
  EXPECT_TRUE(rendered.ok()) << rendered.message();
  return text;
}

TEST(ChatTools, Llama3AsMetaTemplateWritesIt) {
  const std::string want =
      "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge "
      "Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "
      "with a JSON for a function call with its proper arguments that best answers the given "
      "prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
      "argument name and its value}.Do not use variables.\n\n"
      "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
      "        \"description\": \"The weather in a city\",\n        \"parameters\": {\n"
      "            \"type\": \"object\",\n            \"properties\": {\n"
      "                \"city\": {\n                    \"type\": \"string\",\n"
      "                    \"maxLength\": 8\n                },\n                \"unit\": {\n"
      "                    \"enum\": [\n                        \"c\",\n                        "
      "\"f\"\n                    ]\n                }\n            },\n            \"required\": "
      "[\n"
      "                \"city\",\n                \"unit\"\n            ]\n        }\n    }\n}\n\n"
      "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"now\",\n"
      "        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": "
      "{}\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
      "\"parameters\": "
      "{\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|>"
      "<|start_header_id|>ipython<|end_header_id|>\n\n\"18 C\"<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n18 C at noon.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nAnd Rome?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(Render(ChatTemplate::kLlama3, AnsweredConversation(1)), want);
  // Several calls in one turn: a turn each (the template itself takes one).
  const std::string two = Render(ChatTemplate::kLlama3, AnsweredConversation(2));
  EXPECT_NE(two.find("{\"name\": \"now\", \"parameters\": {}}<|eot_id|><|start_header_id|>"
                     "ipython<|end_header_id|>\n\n\"18 C\"<|eot_id|><|start_header_id|>ipython"),
            std::string::npos)
      << two;
  // The tools go into the first message after the system's: it must be the user's.
  std::vector<ChatMessage> messages;
  const Status st = ToolMessages(ToolSyntax::kLlama3, Weather(),
                                 {{"system", "s", {}, ""}, {"assistant", "a", {}, ""}}, &messages);
  EXPECT_NE(st.message().find("messages[1]: llama3's template writes the tools"), std::string::npos)
      << st.message();
}

TEST(ChatTools, MistralAsItsTemplatesWriteIt) {
  // OpenAI's ids ("call_1") become 9 letters and digits, the same in the
  // calls and in their results.
  const std::string tools =
      "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
      "\"The weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": "
      "{\"city\": {\"type\": \"string\", \"maxLength\": 8}, \"unit\": {\"enum\": [\"c\", "
      "\"f\"]}}, \"required\": [\"city\", \"unit\"]}}}, {\"type\": \"function\", \"function\": "
      "{\"name\": \"now\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}]";
  const std::string calls =
      "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, "
      "\"id\": \"rM7gdOtUZ\"}, {\"name\": \"now\", \"arguments\": {}, \"id\": \"OIrznkCVZ\"}]";
  EXPECT_EQ(
      Render(ChatTemplate::kMistralV3, AnsweredConversation(2)),
      "[INST] Weather in Paris?[/INST][TOOL_CALLS] " + calls +
          "</s>[TOOL_RESULTS] {\"content\": 18 C, \"call_id\": \"rM7gdOtUZ\"}[/TOOL_RESULTS]"
          "[TOOL_RESULTS] {\"content\": noon, \"call_id\": \"OIrznkCVZ\"}[/TOOL_RESULTS] 18 C "
          "at noon.</s>[AVAILABLE_TOOLS] " +
          tools + "[/AVAILABLE_TOOLS][INST] Be brief.\n\nAnd Rome?[/INST]");
  EXPECT_EQ(Render(ChatTemplate::kMistralV3Tekken, AnsweredConversation(2)),
            "[INST]Weather in Paris?[/INST][TOOL_CALLS]" + calls +
                "</s>[TOOL_RESULTS]{\"content\": 18 C, \"call_id\": \"rM7gdOtUZ\"}[/TOOL_RESULTS]"
                "[TOOL_RESULTS]{\"content\": noon, \"call_id\": \"OIrznkCVZ\"}[/TOOL_RESULTS]18 C "
                "at noon.</s>[AVAILABLE_TOOLS]" +
                tools + "[/AVAILABLE_TOOLS][INST]Be brief.\n\nAnd Rome?[/INST]");
  // A required call starts after [TOOL_CALLS] in the prompt.
  ToolRequest r = Weather();
  EXPECT_EQ(ToolPrefill(ToolSyntax::kMistral, r), "");
  r.choice = ToolChoice::kRequired;
  EXPECT_EQ(ToolPrefill(ToolSyntax::kMistral, r), "[TOOL_CALLS]");
  EXPECT_EQ(ToolPrefill(ToolSyntax::kHermes, r), "");
}

TEST(ChatTools, NoneLeavesTheToolsOutAndAnOrphanResultIsRefused) {
  ToolRequest none = Weather();
  none.choice = ToolChoice::kNone;
  std::vector<ChatMessage> messages;
  ASSERT_TRUE(ToolMessages(ToolSyntax::kHermes, none, Conversation(), &messages).ok());
  EXPECT_EQ(messages[0].content, "Be brief.");
  std::vector<ChatTurn> orphan = {{"user", "hi", {}, ""}, {"tool", "x", {}, "call_9"}};
  const Status st = ToolMessages(ToolSyntax::kHermes, Weather(), orphan, &messages);
  EXPECT_NE(st.message().find("messages[1]: tool_call_id 'call_9' answers no call"),
            std::string::npos)
      << st.message();
}

TEST(ChatTools, ParsesHermesCalls) {
  std::string content;
  std::vector<ToolCall> calls;
  ParseToolReply(ToolSyntax::kHermes,
                 "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                 "\"Rome\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
                 "\"arguments\": {}}\n</tool_call>",
                 &content, &calls);
  EXPECT_EQ(content, "Let me look.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Rome","unit":"c"})");
  EXPECT_EQ(calls[1].arguments, "{}");
  EXPECT_EQ(calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(calls[0].id.size(), 29u);
  EXPECT_NE(calls[0].id, calls[1].id);
  // Not a call: all of it stays content.
  const std::string broken = "<tool_call>\n{\"name\": \"now\", \"argu";
  ParseToolReply(ToolSyntax::kHermes, broken, &content, &calls);
  EXPECT_EQ(content, broken);
  EXPECT_TRUE(calls.empty());
  ParseToolReply(ToolSyntax::kHermes, "Plain text.", &content, &calls);
  EXPECT_EQ(content, "Plain text.");
  EXPECT_TRUE(calls.empty());
}

// A reply cut by its token cap (cut: true) mid-call keeps the calls before
// the cut one, in each syntax with several calls; a call cut alone, or a
// malformed one before the cut, leaves the text content as a whole reply
// does; an uncut reply with a broken last call stays content.
TEST(ChatTools, ACutReplyKeepsItsWholeCalls) {
  std::string content;
  std::vector<ToolCall> calls;
  const std::string hermes =
      "Two.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {\"tz\": \"a}\\\"\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci";
  ParseToolReply(ToolSyntax::kHermes, hermes, &content, &calls, /*cut=*/true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "now");
  EXPECT_EQ(calls[0].arguments, R"({"tz":"a}\""})");
  EXPECT_EQ(content, "Two.");
  ParseToolReply(ToolSyntax::kHermes, hermes, &content, &calls);  // not cut: text
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, hermes);
  const std::string one = "<tool_call>\n{\"name\": \"now\", \"argu";
  ParseToolReply(ToolSyntax::kHermes, one, &content, &calls, true);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, one);
  // A closed block that is no call before the cut one: all text.
  const std::string bad = "<tool_call>\n{\"nam\": 1}\n</tool_call>\n<tool_call>\n{\"na";
  ParseToolReply(ToolSyntax::kHermes, bad, &content, &calls, true);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, bad);

  const std::string mistral =
      " [{\"name\": \"now\", \"arguments\": {\"s\": \"[{\"}}, {\"name\": \"now\", \"arguments\": "
      "{}}, "
      "{\"name\": \"get_we";
  ParseToolReply(ToolSyntax::kMistral, mistral, &content, &calls, true);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].arguments, R"({"s":"[{"})");
  EXPECT_EQ(content, "");
  ParseToolReply(ToolSyntax::kMistral, " [{\"name\": \"now\", \"argum", &content, &calls, true);
  EXPECT_TRUE(calls.empty());

  const std::string generic =
      "{\"tool_calls\": [{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"argu";
  ParseToolReply(ToolSyntax::kGeneric, generic, &content, &calls, true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(content, "");
  ParseToolReply(ToolSyntax::kGeneric, generic, &content, &calls);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, generic);
  ParseToolReply(ToolSyntax::kGeneric, "{\"response\": \"It is", &content, &calls, true);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "{\"response\": \"It is");

  const std::string llama = "{\"name\": \"now\", \"parameters\": {\"tz";
  ParseToolReply(ToolSyntax::kLlama3, llama, &content, &calls, true);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, llama);
}

TEST(ChatTools, ParsesGenericReplies) {
  std::string content;
  std::vector<ToolCall> calls;
  ParseToolReply(ToolSyntax::kGeneric,
                 R"({"tool_call": {"name": "now", "arguments": {"tz": "UTC"}}})", &content, &calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"({"tz":"UTC"})");
  EXPECT_EQ(content, "");
  ParseToolReply(ToolSyntax::kGeneric,
                 R"({"tool_calls": [{"name": "now", "arguments": {}}, {"name": "now"}]})", &content,
                 &calls);
  EXPECT_EQ(calls.size(), 2u);
  ParseToolReply(ToolSyntax::kGeneric, R"({"response": "It is \"noon\"."})", &content, &calls);
  EXPECT_EQ(content, "It is \"noon\".");
  EXPECT_TRUE(calls.empty());
  ParseToolReply(ToolSyntax::kGeneric, R"({"tool_call": 5})", &content, &calls);
  EXPECT_EQ(content, R"({"tool_call": 5})");
  EXPECT_TRUE(calls.empty());
}

TEST(ChatTools, ParsesLlama3AndMistralCalls) {
  std::string content;
  std::vector<ToolCall> calls;
  ParseToolReply(ToolSyntax::kLlama3,
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"unit\": "
                 "\"c\"}}",
                 &content, &calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Rome","unit":"c"})");
  EXPECT_EQ(content, "");
  ParseToolReply(ToolSyntax::kLlama3, "Looking.\n{\"name\": \"now\", \"parameters\": {}}", &content,
                 &calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(content, "Looking.");
  ParseToolReply(ToolSyntax::kLlama3, "{\"name\": \"now\", \"param", &content, &calls);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "{\"name\": \"now\", \"param");
  // Mistral: [TOOL_CALLS] is a control token, not in the text; where a
  // vocabulary spells it, it is no content.
  for (const std::string& lead : {std::string(" "), std::string("[TOOL_CALLS] ")}) {
    ParseToolReply(ToolSyntax::kMistral,
                   lead +
                       "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", "
                       "\"unit\": \"f\"}}, {\"name\": \"now\", \"arguments\": {}}]",
                   &content, &calls);
    ASSERT_EQ(calls.size(), 2u) << lead;
    EXPECT_EQ(calls[1].name, "now");
    EXPECT_EQ(content, "");
  }
  ParseToolReply(ToolSyntax::kMistral, "[{\"name\": 5}]", &content, &calls);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "[{\"name\": 5}]");
  EXPECT_EQ(SettledToolContent(ToolSyntax::kLlama3, "Hi {\"na"), 2u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kMistral, "Hi [{"), 2u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kMistral, "Hi [1]"), 6u);
}

// Whole texts through the reply grammar: a valid call is taken, a call
// that breaks its schema or names another tool is not.
bool Takes(const std::string& gbnf, const std::string& text, bool* whole) {
  std::shared_ptr<const Grammar> g;
  const Status st = Grammar::Parse(gbnf, &g);
  EXPECT_TRUE(st.ok()) << st.message() << "\n" << gbnf;
  if (!st.ok()) return false;
  VocabTrie trie({"x"});
  GrammarMatcher m(g, &trie);
  if (!m.Accept(text).ok()) return false;
  *whole = m.CanEnd();
  return true;
}

TEST(ChatTools, ReplyGrammarHoldsCallsToTheirSchemas) {
  ToolRequest r = Weather();
  r.choice = ToolChoice::kRequired;
  r.parallel = false;
  std::string gbnf, trigger;
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kHermes, r, &gbnf, &trigger).ok());
  EXPECT_EQ(trigger, "");
  const std::string good =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": "
      "\"f\"}}\n</tool_call>";
  bool whole = false;
  EXPECT_TRUE(Takes(gbnf, good, &whole) && whole);
  EXPECT_FALSE(Takes(gbnf, good + "\n<tool_call>", &whole));  // one call only
  EXPECT_FALSE(Takes(gbnf,
                     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                     "\"Rome\", \"unit\": \"k\"",
                     &whole));
  EXPECT_FALSE(Takes(gbnf, "<tool_call>\n{\"name\": \"other\"", &whole));
  EXPECT_FALSE(Takes(gbnf, "Sure", &whole));
  // Auto: the grammar starts at its trigger; parallel calls follow each other.
  r.choice = ToolChoice::kAuto;
  r.parallel = true;
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kHermes, r, &gbnf, &trigger).ok());
  EXPECT_EQ(trigger, "<tool_call>");
  EXPECT_TRUE(Takes(gbnf,
                    good + "\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
                    &whole) &&
              whole);
  // Named: that tool alone.
  r.choice = ToolChoice::kNamed;
  r.named = "now";
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kGeneric, r, &gbnf, &trigger).ok());
  EXPECT_TRUE(Takes(gbnf, R"({"tool_call": {"name": "now", "arguments": {}}})", &whole) && whole);
  EXPECT_FALSE(Takes(gbnf, R"({"tool_call": {"name": "get_weather")", &whole));
  EXPECT_FALSE(Takes(gbnf, R"({"response")", &whole));
  r.choice = ToolChoice::kAuto;
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kGeneric, r, &gbnf, &trigger).ok());
  EXPECT_TRUE(Takes(gbnf, R"({"response": "Noon."})", &whole) && whole);
  EXPECT_TRUE(Takes(gbnf,
                    R"({"tool_calls": [{"name": "now", "arguments": {}}, {"name": "get_weather", )"
                    R"("arguments": {"city": "Oslo", "unit": "c"}}]})",
                    &whole) &&
              whole);
}

TEST(ChatTools, Llama3AndMistralGrammars) {
  ToolRequest r = Weather();
  r.choice = ToolChoice::kRequired;
  std::string gbnf, trigger;
  bool whole = false;
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kLlama3, r, &gbnf, &trigger).ok());
  EXPECT_EQ(trigger, "");
  const std::string call = "{\"name\": \"now\", \"parameters\": {}}";
  EXPECT_TRUE(Takes(gbnf, call, &whole) && whole);
  EXPECT_FALSE(Takes(gbnf, call + ";", &whole));  // one call a reply
  EXPECT_FALSE(Takes(gbnf, "{\"name\": \"now\", \"arguments\"", &whole));
  r.choice = ToolChoice::kAuto;
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kLlama3, r, &gbnf, &trigger).ok());
  EXPECT_EQ(trigger, "{\"name\": \"");
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kMistral, r, &gbnf, &trigger).ok());
  EXPECT_EQ(trigger, "[{\"name\": \"");
  const std::string calls =
      "[{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Oslo\", \"unit\": \"c\"}}]";
  EXPECT_TRUE(Takes(gbnf, calls, &whole) && whole);
  EXPECT_TRUE(Takes(gbnf, " " + calls, &whole) && whole);  // 7B v0.3's space
  EXPECT_FALSE(Takes(gbnf, "[{\"name\": \"now\", \"parameters\"", &whole));
  r.parallel = false;
  ASSERT_TRUE(ToolGrammar(ToolSyntax::kMistral, r, &gbnf, &trigger).ok());
  EXPECT_FALSE(Takes(gbnf, calls, &whole));
}

TEST(ChatTools, SettledContentStopsBeforeWhatMayBeACall) {
  EXPECT_EQ(SettledToolContent(ToolSyntax::kHermes, "Hello"), 5u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kHermes, "Hello <tool_c"), 5u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kHermes, "Hello\n<tool_call>\n{\"na"), 5u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kHermes, "Hi <"), 2u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kHermes, "a<b"), 3u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kHermes, "a \n"), 1u);
  EXPECT_EQ(SettledToolContent(ToolSyntax::kGeneric, "{\"response\": \"Hi"), 0u);
  // What is settled is where the parsed content starts, whatever came after.
  const std::string reply = "Let me see.\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>";
  std::string content;
  std::vector<ToolCall> calls;
  ParseToolReply(ToolSyntax::kHermes, reply, &content, &calls);
  for (size_t n = 0; n <= reply.size(); ++n) {
    const size_t settled = SettledToolContent(ToolSyntax::kHermes, reply.substr(0, n));
    EXPECT_EQ(content.compare(0, settled, reply, 0, settled), 0) << n;
    EXPECT_LE(settled, content.size()) << n;
  }
}

TEST(ChatTools, PythonJsonSpelling) {
  const ojson j = ojson::parse(R"({"b": [1, 2.5, true, null], "a": {"é": "x\ny\"", "z": {}}})");
  EXPECT_EQ(PythonJson(j),
            "{\"b\": [1, 2.5, true, null], \"a\": {\"é\": \"x\\ny\\\"\", \"z\": {}}}");
}

TEST(ChatTools, PythonJsonIndentedAsJsonDumps) {
  // json.dumps(..., indent=4): "," ends an item's line, empty containers stay "{}" "[]".
  const ojson j = ojson::parse(R"({"a": [1, {}], "b": {"c": []}})");
  EXPECT_EQ(PythonJson(j, 4),
            "{\n    \"a\": [\n        1,\n        {}\n    ],\n    \"b\": {\n        \"c\": []\n"
            "    }\n}");
}

TEST(ChatTools, PrefixesRuleNamesOnly) {
  const std::string g =
      "root ::= item{1,3} \"root ws\" [a-z] # root comment\nitem ::= ws [^\\]root] ws\n"
      "ws ::= \" \"?\n";
  EXPECT_EQ(PrefixGbnfRules(g, "t0-"),
            "t0-root ::= t0-item{1,3} \"root ws\" [a-z] # root comment\n"
            "t0-item ::= t0-ws [^\\]root] t0-ws\nt0-ws ::= \" \"?\n");
}

}  // namespace
}  // namespace pi
