// The official OpenAI Node SDK, the Vercel AI SDK (its openai and openai-compatible
// providers) and LangChain's ChatOpenAI against a running pi-launch --http:
// scripts/sdk_checks.sh starts one and runs this with PI_URL (http://HOST:PORT),
// PI_KEY and PI_MODEL set. Each check prints PASS or FAIL; the exit status is 1
// when any failed.
//
// Made for the demo model, which writes Bible-like text and never ends a free string
// or a list of calls on its own: tool parameters and object fields are enums, tool
// calls ask for one call (parallel_tool_calls false), and a json_object reply cut by
// max_tokens inside a string counts as the model's text, not the server's.
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { generateText, streamText, generateObject, embed, embedMany, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";

const base = process.env.PI_URL;
const key = process.env.PI_KEY;
const model = process.env.PI_MODEL;
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
const results = [];
async function check(name, f) {
  try {
    const detail = await f();
    results.push([name, true, detail ?? ""]);
    console.log(`PASS ${name} ${detail ?? ""}`);
  } catch (e) {
    results.push([name, false, String(e)]);
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e}`);
  }
}
function assert(c, m) { if (!c) throw new Error(m); }
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "London", "Rome"] } }, required: ["city"], additionalProperties: false },
  },
};
const msgs = [{ role: "user", content: "What is the weather in Paris?" }];

// ---------------- OpenAI SDK ----------------
await check("openai models.list", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert(ids.includes(model), `ids ${ids}`);
  return ids.join(",");
});
await check("openai models.retrieve", async () => {
  const m = await client.models.retrieve(model);
  assert(m.id === model, JSON.stringify(m));
});
let wholeText = "";
await check("openai chat.completions whole", async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Who made the heaven?" }], max_completion_tokens: 12, temperature: 0, seed: 1 });
  wholeText = r.choices[0].message.content;
  assert(typeof wholeText === "string" && wholeText.length > 0, "empty");
  assert(r.usage.completion_tokens <= 12, `usage ${JSON.stringify(r.usage)}`);
  assert(r.system_fingerprint, "no fingerprint");
  return JSON.stringify(wholeText);
});
await check("openai chat.completions stream equals whole", async () => {
  const s = await client.chat.completions.create({ model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Who made the heaven?" }], max_completion_tokens: 12, temperature: 0, seed: 1, stream: true, stream_options: { include_usage: true } });
  let text = ""; let usage = null;
  for await (const c of s) { if (c.choices[0]?.delta?.content) text += c.choices[0].delta.content; if (c.usage) usage = c.usage; }
  assert(text === wholeText, `${JSON.stringify(text)} vs ${JSON.stringify(wholeText)}`);
  assert(usage && usage.completion_tokens > 0, "no usage chunk");
});
await check("openai chat.completions n=2 + logprobs", async () => {
  const r = await client.chat.completions.create({ model, messages: msgs, max_tokens: 6, n: 2, seed: 3, logprobs: true, top_logprobs: 2 });
  assert(r.choices.length === 2, `${r.choices.length} choices`);
  assert(r.choices[0].logprobs.content.length > 0 && r.choices[0].logprobs.content[0].top_logprobs.length === 2, "logprobs");
});
await check("openai chat.completions stream n=2", async () => {
  const s = await client.chat.completions.create({ model, messages: msgs, max_tokens: 6, n: 2, seed: 3, stream: true });
  const texts = ["", ""];
  for await (const c of s) for (const ch of c.choices) texts[ch.index] += ch.delta.content ?? "";
  assert(texts[0].length > 0 && texts[1].length > 0, JSON.stringify(texts));
});
let toolCall = null;
await check("openai tools tool_choice required", async () => {
  const r = await client.chat.completions.create({ model, messages: msgs, tools: [weather], tool_choice: "required", parallel_tool_calls: false, max_tokens: 200 });
  const m = r.choices[0].message;
  assert(m.tool_calls && m.tool_calls.length >= 1, JSON.stringify(m));
  toolCall = m.tool_calls[0];
  assert(toolCall.function.name === "get_weather", toolCall.function.name);
  const args = JSON.parse(toolCall.function.arguments);
  assert(typeof args.city === "string", toolCall.function.arguments);
  assert(r.choices[0].finish_reason === "tool_calls", r.choices[0].finish_reason);
  return toolCall.function.arguments;
});
await check("openai tools named, streamed", async () => {
  const s = await client.chat.completions.create({ model, messages: msgs, tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false, max_tokens: 200, stream: true });
  let name = "", args = "", id = "", finish = "";
  for await (const c of s) {
    const d = c.choices[0]?.delta;
    for (const t of d?.tool_calls ?? []) { if (t.id) id = t.id; if (t.function?.name) name += t.function.name; if (t.function?.arguments) args += t.function.arguments; }
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
  }
  assert(name === "get_weather" && id, `${name} ${id}`);
  JSON.parse(args);
  assert(finish === "tool_calls", finish);
});
await check("openai tools: the tool's answer back", async () => {
  assert(toolCall, "no call from before");
  const r = await client.chat.completions.create({ model, max_tokens: 10, tools: [weather], messages: [...msgs, { role: "assistant", content: null, tool_calls: [toolCall] }, { role: "tool", tool_call_id: toolCall.id, content: "22 C, sunny" }] });
  assert(r.choices[0].message.role === "assistant", JSON.stringify(r.choices[0]));
});
await check("openai tools with stream helper runTools", async () => {
  const runner = client.chat.completions.runTools({
    model, messages: msgs, max_tokens: 200, tool_choice: "required", parallel_tool_calls: false,
    tools: [{ type: "function", function: { name: "get_weather", parameters: weather.function.parameters, function: (a) => "22 C", parse: JSON.parse } }],
  });
  // required forces a call every round: stop after the first tool answer.
  let calls = 0;
  runner.on("functionToolCall", () => { calls++; if (calls >= 1) runner.abort(); });
  try { await runner.finalChatCompletion(); } catch (e) { if (calls === 0) throw e; }
  assert(calls >= 1, "no call");
});
await check("openai response_format json_object", async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Give me JSON." }], response_format: { type: "json_object" }, max_tokens: 300 });
  if (r.choices[0].finish_reason === "length") return "cut by max_tokens inside a string (the demo model's text)";
  JSON.parse(r.choices[0].message.content);
});
await check("openai chat.completions.parse zod json_schema", async () => {
  const Person = z.object({ name: z.enum(["Ruth", "Job"]), alive: z.boolean(), tags: z.array(z.enum(["a", "b"])).max(3) });
  const r = await client.chat.completions.parse({ model, messages: [{ role: "user", content: "A person." }], response_format: zodResponseFormat(Person, "person"), max_tokens: 200 });
  const p = r.choices[0].message.parsed;
  assert(p && typeof p.name === "string" && typeof p.alive === "boolean", JSON.stringify(r.choices[0].message));
  return JSON.stringify(p);
});
await check("openai completions n=2, two prompts", async () => {
  const r = await client.completions.create({ model, prompt: ["In the beginning", "And God said"], max_tokens: 5, n: 2, seed: 5 });
  assert(r.choices.length === 4, `${r.choices.length}`);
  assert(r.choices.map((c) => c.index).join() === "0,1,2,3", "indices");
});
await check("openai completions stream + echo", async () => {
  const s = await client.completions.create({ model, prompt: "In the beginning", max_tokens: 5, stream: true, echo: true, temperature: 0 });
  let t = ""; for await (const c of s) t += c.choices[0]?.text ?? "";
  assert(t.startsWith("In the beginning"), t);
});
await check("openai embeddings (SDK default base64)", async () => {
  const r = await client.embeddings.create({ model, input: "In the beginning" });
  assert(r.data.length === 1 && r.data[0].embedding.length > 16, `${r.data[0].embedding.length}`);
  const n = Math.sqrt(r.data[0].embedding.reduce((a, x) => a + x * x, 0));
  assert(Math.abs(n - 1) < 1e-3, `norm ${n}`);
  return `dim ${r.data[0].embedding.length}`;
});
await check("openai embeddings float, several", async () => {
  const r = await client.embeddings.create({ model, input: ["a", "b c"], encoding_format: "float" });
  assert(r.data.length === 2 && r.usage.prompt_tokens > 0, JSON.stringify(r.usage));
});
let respText = "";
await check("openai responses.create text", async () => {
  const r = await client.responses.create({ model, input: "Who made the heaven?", max_output_tokens: 16, temperature: 0 });
  respText = r.output_text;
  assert(r.status === "completed" || r.status === "incomplete", r.status);
  assert(respText.length > 0, JSON.stringify(r.output));
  return JSON.stringify(respText);
});
await check("openai responses stream equals whole", async () => {
  const s = await client.responses.create({ model, input: "Who made the heaven?", max_output_tokens: 16, temperature: 0, stream: true });
  let t = "", done = null;
  for await (const e of s) { if (e.type === "response.output_text.delta") t += e.delta; if (e.type === "response.completed" || e.type === "response.incomplete") done = e.response; }
  assert(t === respText, `${JSON.stringify(t)} vs ${JSON.stringify(respText)}`);
  assert(done, "no response.completed or response.incomplete event");
});
await check("openai responses tools", async () => {
  const r = await client.responses.create({ model, input: "Weather in Paris?", tools: [{ type: "function", name: "get_weather", parameters: weather.function.parameters, strict: true }], tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 200 });
  const call = r.output.find((o) => o.type === "function_call");
  assert(call && call.name === "get_weather", JSON.stringify(r.output));
  JSON.parse(call.arguments);
  const r2 = await client.responses.create({ model, input: [{ role: "user", content: "Weather in Paris?" }, call, { type: "function_call_output", call_id: call.call_id, output: "22 C" }], tools: [{ type: "function", name: "get_weather", parameters: weather.function.parameters, strict: true }], max_output_tokens: 10 });
  assert(r2.output.length > 0, "no output");
});
await check("openai responses.parse zod text.format", async () => {
  const { zodTextFormat } = await import("openai/helpers/zod");
  const Person = z.object({ name: z.enum(["Ruth", "Job"]), alive: z.boolean() });
  const r = await client.responses.parse({ model, input: "A person.", text: { format: zodTextFormat(Person, "person") }, max_output_tokens: 200 });
  assert(r.output_parsed && typeof r.output_parsed.name === "string", JSON.stringify(r.output));
});
await check("openai errors: unknown field is an APIError 400 naming it", async () => {
  try {
    await client.chat.completions.create({ model, messages: msgs, max_tokens: 2, modalities: ["audio"] });
  } catch (e) {
    assert(e instanceof OpenAI.APIError && e.status === 400, String(e));
    assert(String(e.message).includes("modalities"), e.message);
    return e.message;
  }
  throw new Error("accepted");
});
await check("openai errors: wrong key is 401 AuthenticationError", async () => {
  const bad = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-wrong-0123456789abcdef", maxRetries: 0 });
  try { await bad.models.list(); } catch (e) { assert(e instanceof OpenAI.AuthenticationError, String(e)); return; }
  throw new Error("accepted");
});

// ---------------- Vercel AI SDK ----------------
const provider = createOpenAI({ baseURL: base + "/v1", apiKey: key });
await check("ai-sdk generateText (responses API, the provider's default)", async () => {
  const r = await generateText({ model: provider(model), prompt: "Who made the heaven?", maxOutputTokens: 12, temperature: 0 });
  assert(r.text.length > 0, JSON.stringify(r));
  return JSON.stringify(r.text);
});
await check("ai-sdk streamText (responses) equals generateText", async () => {
  const a = await generateText({ model: provider(model), prompt: "Who made the heaven?", maxOutputTokens: 12, temperature: 0 });
  const s = streamText({ model: provider(model), prompt: "Who made the heaven?", maxOutputTokens: 12, temperature: 0, onError: ({ error }) => { throw error; } });
  let t = ""; for await (const d of s.textStream) t += d;
  assert(t === a.text, `${JSON.stringify(t)} vs ${JSON.stringify(a.text)}`);
});
await check("ai-sdk generateText chat API", async () => {
  const r = await generateText({ model: provider.chat(model), prompt: "Who made the heaven?", maxOutputTokens: 12 });
  assert(r.text.length > 0, "empty");
});
await check("ai-sdk streamText chat API", async () => {
  const s = streamText({ model: provider.chat(model), prompt: "Who made the heaven?", maxOutputTokens: 12, onError: ({ error }) => { throw error; } });
  let t = ""; for await (const d of s.textStream) t += d;
  assert(t.length > 0, "empty");
});
await check("ai-sdk completion API", async () => {
  const r = await generateText({ model: provider.completion(model), prompt: "In the beginning", maxOutputTokens: 8 });
  assert(r.text.length > 0, "empty");
});
const weatherTool = tool({ description: "The weather in a city", inputSchema: z.object({ city: z.enum(["Paris", "London"]) }), execute: async ({ city }) => `22 C in ${city}` });
for (const [label, m] of [["responses", () => provider(model)], ["chat", () => provider.chat(model)]]) {
  await check(`ai-sdk tools (${label}), two steps`, async () => {
    const r = await generateText({ model: m(), prompt: "Weather in Paris?", tools: { get_weather: weatherTool }, toolChoice: "required", providerOptions: { openai: { parallelToolCalls: false } }, stopWhen: stepCountIs(1), maxOutputTokens: 200 });
    assert(r.toolCalls.length >= 1 && r.toolResults.length >= 1, JSON.stringify(r.steps.map((s) => s.content)));
    return JSON.stringify(r.toolCalls[0].input);
  });
  await check(`ai-sdk generateObject (${label})`, async () => {
    const r = await generateObject({ model: m(), schema: z.object({ name: z.enum(["Genesis", "Exodus"]), verses: z.array(z.enum(["one", "two"])).max(2) }), prompt: "A book.", maxOutputTokens: 200 });
    assert(typeof r.object.name === "string", JSON.stringify(r.object));
    return JSON.stringify(r.object);
  });
}
await check("ai-sdk embed / embedMany", async () => {
  const a = await embed({ model: provider.embedding(model), value: "In the beginning" });
  const b = await embedMany({ model: provider.embedding(model), values: ["a", "b"] });
  assert(a.embedding.length > 16 && b.embeddings.length === 2, "shapes");
});
const compat = createOpenAICompatible({ name: "pi", baseURL: base + "/v1", apiKey: key, supportsStructuredOutputs: true });
await check("ai-sdk openai-compatible chat + stream + object", async () => {
  const r = await generateText({ model: compat(model), prompt: "Who made the heaven?", maxOutputTokens: 8 });
  const s = streamText({ model: compat(model), prompt: "Who made the heaven?", maxOutputTokens: 8, onError: ({ error }) => { throw error; } });
  let t = ""; for await (const d of s.textStream) t += d;
  const o = await generateObject({ model: compat(model), schema: z.object({ name: z.enum(["Adam", "Eve"]) }), prompt: "A name.", maxOutputTokens: 200 });
  assert(r.text.length > 0 && t.length > 0 && typeof o.object.name === "string", "shapes");
});

// ---------------- LangChain ----------------
const lc = new ChatOpenAI({ model, apiKey: key, configuration: { baseURL: base + "/v1" }, maxTokens: 200, maxRetries: 0 });
await check("langchain invoke + stream", async () => {
  const r = await lc.invoke("Who made the heaven?");
  let t = ""; for await (const c of await lc.stream("Who made the heaven?")) t += c.content;
  assert(typeof r.content === "string" && r.content.length > 0 && t.length > 0, "empty");
});
await check("langchain bindTools", async () => {
  const r = await lc.bindTools([weather], { tool_choice: "required", parallel_tool_calls: false }).invoke("Weather in Paris?");
  assert(r.tool_calls.length >= 1 && r.tool_calls[0].name === "get_weather", JSON.stringify(r.tool_calls));
});
await check("langchain withStructuredOutput", async () => {
  const r = await lc.withStructuredOutput(z.object({ name: z.enum(["Adam", "Eve"]) })).invoke("A name.");
  assert(typeof r.name === "string", JSON.stringify(r));
});

const failed = results.filter((r) => !r[1]);
console.log(`\n${results.length - failed.length} of ${results.length} passed`);
process.exit(failed.length ? 1 : 0);
