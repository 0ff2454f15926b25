// CheckpointSession against the OpenAI Agents SDK's own interface (@openai/agents-core): the same
// operations on it and on the SDK's MemorySession give equal results; the SDK's Runner, driven by a
// scripted model (no network), writes its items into checkpointd, and the Go CLI and a fresh session
// in another process read them back. The tests that run the SDK skip, saying why, where it does not
// load (its `openai` dependency declares Node >= 22; it runs on Node 20.20 today).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { AgentInputItem, Model, ModelRequest, ModelResponse, Session, StreamEvent } from "@openai/agents-core";
import { Client, CheckpointError, joinRaw, splitRaw } from "../src/index.js";
import { CheckpointSession, HINT, fromResponsesItem, toResponsesItem } from "../src/agents.js";
import { Daemon, pkgRoot } from "./support/daemon.js";

// The SDK is a devDependency; load it at run time so that a Node it does not run on skips these
// tests instead of failing the suite.
type SDK = typeof import("@openai/agents-core");
let sdk: SDK | undefined;
let whyNot = "";
try {
  sdk = await import("@openai/agents-core");
} catch (e) {
  whyNot = `@openai/agents-core does not load on Node ${process.version}: ${(e as Error).message}`;
  console.log(`# SKIP agents tests: ${whyNot}`);
}
/** For the tests that run the SDK itself; the others need only its types. */
const skip = sdk ? false : whyNot;

// Type-level check: tsc refuses this file unless CheckpointSession implements the SDK's Session.
const _isSession: (s: CheckpointSession) => Session = (s) => s;
void _isSession;

let d: Daemon;
let c: Client;

before(async () => {
  sdk?.setTracingDisabled(true);
  d = await Daemon.start();
  c = await Client.connect({ servers: d.natsURL }, { timeoutMs: 10_000 });
});
after(async () => {
  await c?.close();
  await d?.stop();
});

const session = (name: string) => new CheckpointSession({ client: c, session: name });

/** Every item shape the mapping handles, as the SDK spells them (AgentInputItem). */
const catalogue: AgentInputItem[] = [
  { role: "system", content: "Be brief." },
  { type: "message", role: "user", content: "Weather in Paris?" },
  {
    role: "user",
    content: [
      { type: "input_text", text: "and this?", providerData: { cache: true } },
      { type: "input_image", image: "https://example.com/a.png", detail: "low" },
      { type: "input_image", image: { id: "file-img1" } },
      { type: "input_file", file: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" },
      { type: "input_file", file: "https://example.com/b.pdf" },
      { type: "input_file", file: { url: "https://example.com/c.pdf" } },
      { type: "input_file", file: { id: "file-doc1" }, filename: "d.txt" },
      { type: "audio", audio: "UklGRg==", format: "wav", transcript: "hi" },
    ],
  },
  {
    type: "reasoning",
    id: "rs_1",
    content: [{ type: "input_text", text: "call the tool" }],
    rawContent: [{ type: "reasoning_text", text: "the user wants weather" }],
    providerData: { encryptedContent: "gAAAA" },
  },
  { type: "function_call", id: "fc_1", callId: "call_1", name: "get_weather", arguments: '{"city":"Paris"}', status: "completed" },
  { type: "function_call_result", name: "get_weather", callId: "call_1", status: "completed", output: { type: "text", text: "22C" } },
  { type: "function_call_result", name: "lookup", callId: "call_2", status: "completed", output: "plain" },
  {
    type: "function_call_result",
    name: "shot",
    callId: "call_3",
    status: "completed",
    output: [
      { type: "input_text", text: "a screenshot" },
      { type: "input_image", image: "data:image/png;base64,iVBORw0KGgo=" },
    ],
  },
  {
    type: "message",
    id: "msg_1",
    role: "assistant",
    status: "completed",
    phase: "final_answer",
    content: [
      { type: "output_text", text: "22 °C" },
      { type: "refusal", refusal: "no more" },
    ],
  },
  // Tool items, as the SDK's OpenAI provider makes them of the model's output (the API's members
  // that the SDK item has no place for are in providerData).
  {
    type: "function_call",
    callId: "call_4",
    name: "lookup",
    namespace: "crm",
    arguments: "{}",
    caller: { type: "program", callerId: "prog_1" },
  },
  {
    type: "computer_call",
    id: "cu_1",
    callId: "call_c1",
    status: "completed",
    action: { type: "click", x: 10, y: 20, button: "left" },
    providerData: { id: "cu_1", type: "computer_call", pending_safety_checks: [] },
  },
  {
    type: "computer_call",
    id: "cu_2",
    callId: "call_c2",
    status: "completed",
    action: { type: "screenshot" },
    actions: [{ type: "screenshot" }, { type: "wait" }],
    providerData: { pendingSafetyChecks: [{ id: "sc_1", code: "malicious_instructions", message: "check" }] },
  },
  {
    type: "computer_call_result",
    callId: "call_c1",
    output: { type: "computer_screenshot", data: "data:image/png;base64,iVBORw0KGgo=" },
    providerData: { acknowledged_safety_checks: [] },
  },
  {
    type: "shell_call",
    id: "sh_1",
    callId: "call_s1",
    status: "completed",
    action: { commands: ["ls -la", "pwd"], timeoutMs: 5000, maxOutputLength: 4096 },
    caller: { type: "program", callerId: "prog_1" },
    providerData: { environment: { type: "local" } },
  },
  {
    type: "shell_call_output",
    id: "sho_1",
    callId: "call_s1",
    status: "completed",
    maxOutputLength: 4096,
    output: [
      { stdout: "a\n", stderr: "", outcome: { type: "exit", exitCode: 0 } },
      { stdout: "", stderr: "", outcome: { type: "timeout" } },
      { stdout: "", stderr: "killed", outcome: { type: "exit", exitCode: null } },
    ],
  },
  {
    type: "apply_patch_call",
    id: "ap_1",
    callId: "call_p1",
    status: "completed",
    operation: { type: "update_file", path: "a.go", diff: "@@ -1 +1 @@\n-a\n+b\n", moveTo: "b.go" },
  },
  { type: "apply_patch_call_output", callId: "call_p1", status: "failed", output: "no such file" },
  {
    type: "tool_search_call",
    id: "tsc_1",
    status: "completed",
    arguments: { query: "weather", paths: [] },
    providerData: { call_id: "call_t1", execution: "server" },
  },
  { type: "tool_search_call", callId: "call_t2", execution: "client", arguments: { q: "crm" } },
  {
    type: "tool_search_output",
    id: "tso_1",
    callId: "call_t2",
    execution: "client",
    status: "completed",
    tools: [
      { type: "tool_reference", functionName: "get_weather" },
      { type: "function", name: "get_time", parameters: {}, strict: true, deferLoading: true, outputSchema: { type: "object" } },
      {
        type: "namespace",
        name: "crm",
        tools: [
          { type: "tool_reference", functionName: "lookup", namespace: "crm" },
          { type: "function", name: "f", defer_loading: false },
        ],
      },
    ],
  },
  { type: "program", id: "prog_1", callId: "call_g1", code: "print(1)", fingerprint: "fp1" },
  { type: "program_output", id: "progo_1", callId: "call_g1", output: "1", status: "completed" },
  { type: "compaction", id: "cmp_1", encrypted_content: "gAAAA", created_by: "server" },
  {
    type: "hosted_tool_call",
    id: "ws_1",
    name: "web_search_call",
    status: "completed",
    providerData: { id: "ws_1", type: "web_search_call", action: { type: "search", query: "weather paris" } },
  },
  {
    type: "hosted_tool_call",
    id: "fs_1",
    name: "file_search_call",
    status: "completed",
    providerData: { type: "file_search", queries: ["q"], results: null },
  },
  {
    type: "hosted_tool_call",
    id: "ci_1",
    name: "code_interpreter_call",
    status: "completed",
    caller: { type: "program", callerId: "prog_1" },
    providerData: { id: "ci_1", type: "code_interpreter_call", code: "1+1", container_id: "cntr_1", outputs: [{ type: "logs", logs: "2" }] },
  },
  {
    type: "hosted_tool_call",
    id: "ig_1",
    name: "image_generation_call",
    status: "completed",
    output: "iVBORw0KGgo=",
    providerData: { id: "ig_1", type: "image_generation_call", revised_prompt: "a cat" },
  },
  {
    type: "hosted_tool_call",
    id: "mcpl_1",
    name: "mcp_list_tools",
    status: "completed",
    providerData: { id: "mcpl_1", type: "mcp_list_tools", server_label: "crm", tools: [{ name: "lookup", input_schema: {} }] },
  },
  {
    type: "hosted_tool_call",
    id: "mcpr_1",
    name: "mcp_approval_request",
    status: "completed",
    providerData: { id: "mcpr_1", type: "mcp_approval_request", name: "lookup", arguments: "{}", server_label: "crm" },
  },
  { type: "hosted_tool_call", name: "mcp_approval_response", providerData: { approve: true, approval_request_id: "mcpr_1", reason: "ok" } },
  {
    type: "hosted_tool_call",
    id: "mcp_1",
    name: "mcp_call",
    status: "completed",
    output: "found",
    providerData: { id: "mcp_1", type: "mcp_call", name: "lookup", arguments: "{}", server_label: "crm", status: "failed" },
  },
];

/** The catalogue's items by type (the message items by role), for the assertions on one of them. */
const byType = (type: string, n = 0) => catalogue.filter((it) => ("type" in it && it.type) === type)[n];

test("mapping: every SDK item comes back equal, stored in the Responses API's spelling", () => {
  for (const [i, item] of catalogue.entries()) {
    const stored = toResponsesItem(item);
    assert.deepEqual(fromResponsesItem(JSON.parse(JSON.stringify(stored))), item, `item ${i}`);
  }
  // The API shapes the Go side reads.
  assert.deepEqual(toResponsesItem(catalogue[4]), {
    type: "function_call",
    id: "fc_1",
    call_id: "call_1",
    name: "get_weather",
    arguments: '{"city":"Paris"}',
    status: "completed",
  });
  assert.deepEqual(toResponsesItem(catalogue[5]), {
    type: "function_call_output",
    name: "get_weather",
    call_id: "call_1",
    status: "completed",
    output: "22C",
    [HINT]: { output: { type: "text" } },
  });
  const reasoning = toResponsesItem(catalogue[3]);
  assert.deepEqual(reasoning.summary, [{ type: "summary_text", text: "call the tool" }]);
  assert.deepEqual(reasoning.content, [{ type: "reasoning_text", text: "the user wants weather" }]);
  const parts = toResponsesItem(catalogue[2]).content as Record<string, unknown>[];
  assert.deepEqual(parts.slice(1), [
    { type: "input_image", image_url: "https://example.com/a.png", detail: "low" },
    { type: "input_image", file_id: "file-img1" },
    { type: "input_file", file_data: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" },
    { type: "input_file", file_url: "https://example.com/b.pdf" },
    { type: "input_file", file_url: "https://example.com/c.pdf", [HINT]: { file: "url" } },
    { type: "input_file", file_id: "file-doc1", filename: "d.txt" },
    { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" }, transcript: "hi" },
  ]);
  // Tool items: renamed as the SDK's OpenAI provider renames them for the API.
  assert.deepEqual(toResponsesItem(byType("function_call", 1)), {
    type: "function_call",
    call_id: "call_4",
    name: "lookup",
    namespace: "crm",
    arguments: "{}",
    caller: { type: "program", caller_id: "prog_1" },
  });
  assert.deepEqual(toResponsesItem(byType("computer_call")), {
    type: "computer_call",
    id: "cu_1",
    call_id: "call_c1",
    status: "completed",
    action: { type: "click", x: 10, y: 20, button: "left" },
    pending_safety_checks: [],
    providerData: { id: "cu_1", type: "computer_call" },
    [HINT]: { providerData: { pending_safety_checks: "pending_safety_checks" } },
  });
  assert.deepEqual(toResponsesItem(byType("computer_call", 1)).pending_safety_checks, [
    { id: "sc_1", code: "malicious_instructions", message: "check" },
  ]);
  assert.deepEqual(toResponsesItem(byType("computer_call_result")), {
    type: "computer_call_output",
    call_id: "call_c1",
    output: { type: "computer_screenshot", image_url: "data:image/png;base64,iVBORw0KGgo=" },
    providerData: { acknowledged_safety_checks: [] },
  });
  assert.deepEqual(toResponsesItem(byType("shell_call")), {
    type: "shell_call",
    id: "sh_1",
    call_id: "call_s1",
    status: "completed",
    action: { commands: ["ls -la", "pwd"], timeout_ms: 5000, max_output_length: 4096 },
    caller: { type: "program", caller_id: "prog_1" },
    providerData: { environment: { type: "local" } },
  });
  const shellOut = toResponsesItem(byType("shell_call_output"));
  assert.equal(shellOut.call_id, "call_s1");
  assert.equal(shellOut.max_output_length, 4096);
  assert.deepEqual(
    (shellOut.output as { outcome: unknown }[]).map((e) => e.outcome),
    [{ type: "exit", exit_code: 0 }, { type: "timeout" }, { type: "exit", exit_code: null }],
  );
  assert.deepEqual(toResponsesItem(byType("apply_patch_call")).operation, {
    type: "update_file",
    path: "a.go",
    diff: "@@ -1 +1 @@\n-a\n+b\n",
    move_to: "b.go",
  });
  assert.deepEqual(toResponsesItem(byType("apply_patch_call_output")), {
    type: "apply_patch_call_output",
    call_id: "call_p1",
    status: "failed",
    output: "no such file",
  });
  assert.deepEqual(toResponsesItem(byType("tool_search_call")), {
    type: "tool_search_call",
    id: "tsc_1",
    status: "completed",
    arguments: { query: "weather", paths: [] },
    call_id: "call_t1",
    providerData: { execution: "server" },
    [HINT]: { providerData: { call_id: "call_id" } },
  });
  assert.deepEqual(toResponsesItem(byType("tool_search_output")), {
    type: "tool_search_output",
    id: "tso_1",
    call_id: "call_t2",
    execution: "client",
    status: "completed",
    tools: [
      { type: "tool_reference", function_name: "get_weather" },
      { type: "function", name: "get_time", parameters: {}, strict: true, defer_loading: true, output_schema: { type: "object" } },
      {
        type: "namespace",
        name: "crm",
        tools: [
          { type: "tool_reference", function_name: "lookup", namespace: "crm" },
          { type: "function", name: "f", defer_loading: false },
        ],
      },
    ],
    [HINT]: { call_id: "callId", tools: ["2.1.defer_loading"] },
  });
  assert.deepEqual(toResponsesItem(byType("program_output")), {
    type: "program_output",
    id: "progo_1",
    call_id: "call_g1",
    result: "1",
    status: "completed",
  });
  assert.deepEqual(toResponsesItem(byType("hosted_tool_call")), {
    type: "web_search_call",
    id: "ws_1",
    status: "completed",
    action: { type: "search", query: "weather paris" },
    [HINT]: { hosted_tool_call: { providerData: ["id", "type", "action"], top: ["id", "status"], keep: { name: "web_search_call" } } },
  });
  // (an older SDK's providerData.type "file_search": the API's file_search_call, the old spelling kept in the hint)
  const { [HINT]: fileSearchHint, ...fileSearch } = toResponsesItem(byType("hosted_tool_call", 1));
  assert.deepEqual(fileSearch, { type: "file_search_call", id: "fs_1", status: "completed", queries: ["q"], results: null });
  assert.equal((fileSearchHint as { hosted_tool_call: { providerDataType: string } }).hosted_tool_call.providerDataType, "file_search");
  const image = toResponsesItem(byType("hosted_tool_call", 3));
  assert.equal(image.type, "image_generation_call");
  assert.equal(image.result, "iVBORw0KGgo=");
  const mcpCall = toResponsesItem(byType("hosted_tool_call", 7));
  assert.equal(mcpCall.status, "failed"); // providerData's; the SDK item's "completed" waits in the hint
  assert.equal(mcpCall.output, "found");
  // An item another writer stored reads as the SDK's provider reads the model's output.
  assert.deepEqual(
    fromResponsesItem({ type: "web_search_call", id: "ws_9", status: "completed", action: { type: "search", query: "q" } }),
    { type: "hosted_tool_call", id: "ws_9", name: "web_search_call", status: "completed", providerData: { id: "ws_9", type: "web_search_call", action: { type: "search", query: "q" } } },
  );
  assert.deepEqual(
    fromResponsesItem({ type: "computer_call", id: "cu_9", call_id: "c9", status: "completed", action: { type: "wait" }, pending_safety_checks: [] }),
    { type: "computer_call", id: "cu_9", callId: "c9", status: "completed", action: { type: "wait" }, providerData: { pending_safety_checks: [] } },
  );
  // ...and goes back to the API shape it was stored in (plus the hint), so a Go writer's tool items
  // survive a turn of the SDK unchanged.
  const foreign: Record<string, unknown>[] = [
    { type: "shell_call", call_id: "s9", action: { commands: ["ls"], timeout_ms: null }, caller: { type: "program", caller_id: "p9" } },
    { type: "shell_call_output", call_id: "s9", output: [{ stdout: "", stderr: "", outcome: { type: "exit", exit_code: 1 } }] },
    { type: "computer_call_output", call_id: "c9", output: { type: "computer_screenshot", file_id: "file-9" } },
    { type: "tool_search_output", call_id: "t9", tools: [{ type: "tool_reference", function_name: "f" }] },
    { type: "image_generation_call", id: "ig_9", status: "failed", result: null },
    { type: "mcp_call", id: "mcp_9", name: "f", arguments: "{}", server_label: "s", output: "x", status: "completed" },
    { type: "mcp_approval_response", approval_request_id: "r9", approve: false },
    { type: "program_output", id: "po_9", call_id: "g9", result: "2", status: "incomplete" },
  ];
  for (const item of foreign) {
    const { [HINT]: _hint, ...again } = toResponsesItem(fromResponsesItem(item));
    assert.deepEqual(again, item, String(item.type));
  }
  // A member it would overwrite, or the reserved one, is refused before anything is sent.
  assert.throws(() => toResponsesItem({ ...catalogue[4], call_id: "x" } as AgentInputItem), /both "callId" and "call_id"/);
  assert.throws(() => toResponsesItem({ ...catalogue[1], [HINT]: 1 }), /reserved/);
  const bytes = { type: "function_call_result", name: "f", callId: "c", status: "completed", output: { type: "image", image: { data: new Uint8Array([1]) } } };
  assert.throws(() => toResponsesItem(bytes, "items[0]"), /items\[0\]\.output\.image\.data: raw bytes/);
});

test("contract: the same operations on CheckpointSession and the SDK's MemorySession give the same results", { skip }, async () => {
  const mem = new sdk!.MemorySession();
  const cp = session("contract");
  const both = async <T>(what: string, op: (s: Session) => Promise<T>): Promise<T> => {
    const want = await op(mem);
    const got = await op(cp);
    assert.deepEqual(got, want, what);
    return got;
  };
  const all = async (what: string) => {
    await both(`${what}: getItems()`, (s) => s.getItems());
    for (const n of [0, 1, 2, 5, 100, -1]) await both(`${what}: getItems(${n})`, (s) => s.getItems(n));
  };

  await all("empty");
  assert.equal(await both("pop empty", (s) => s.popItem()), undefined);
  await both("add nothing", (s) => s.addItems([]));
  await both("add 3", (s) => s.addItems(catalogue.slice(0, 3)));
  await all("3 items");
  await both("add the rest", (s) => s.addItems(catalogue.slice(3)));
  await all(`${catalogue.length} items`);
  const popped = await both("pop", (s) => s.popItem());
  assert.deepEqual(popped, catalogue.at(-1));
  await both("pop again", (s) => s.popItem());
  await all("after 2 pops");
  await both("clear", (s) => s.clearSession());
  await all("cleared");
  assert.equal(await both("pop cleared", (s) => s.popItem()), undefined);
  await both("add after clear", (s) => s.addItems(catalogue.slice(1, 2)));
  await all("after clear");
  assert.equal(await cp.getSessionId(), "contract");

  // Each change was a version; the history keeps them all, in the openai-responses dialect.
  const hist = await c.history("contract");
  assert.deepEqual(
    hist.map((v) => [v.version, v.counts.messages, v.dialect]),
    [
      [1, 3, "openai-responses"],
      [2, catalogue.length, "openai-responses"],
      [3, catalogue.length - 1, "openai-responses"],
      [4, catalogue.length - 2, "openai-responses"],
      [5, 0, "openai-responses"],
      [6, 1, "openai-responses"],
    ],
  );
});

/** A scripted Model: returns the given outputs in order and records the input of every call. */
class ScriptedModel implements Model {
  readonly inputs: unknown[] = [];
  constructor(private readonly outputs: ModelResponse["output"][]) {}
  async getResponse(req: ModelRequest): Promise<ModelResponse> {
    this.inputs.push(structuredClone(req.input));
    const output = this.outputs.shift();
    if (!output) throw new Error("the script has no more responses");
    return { usage: new sdk!.Usage(), output, responseId: `resp_${this.inputs.length}` };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("not streamed");
  }
}

/** Two turns of a weather agent: a tool call, its result and an answer; then a plain answer. */
function script(): ModelResponse["output"][] {
  return [
    [
      { type: "reasoning", id: "rs_1", content: [{ type: "input_text", text: "call get_weather" }], providerData: { encryptedContent: "gAAAA" } },
      { type: "function_call", id: "fc_1", callId: "call_1", name: "get_weather", arguments: '{"city":"Paris"}', status: "completed" },
    ],
    [{ type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "22 °C in Paris." }] }],
    [{ type: "message", id: "msg_2", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Bring a light jacket." }] }],
  ];
}

async function runTwoTurns(s: Session): Promise<ScriptedModel> {
  const model = new ScriptedModel(script());
  const weather = sdk!.tool({
    name: "get_weather",
    description: "the weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
    strict: true,
    execute: async (args: unknown) => `{"city":"${(args as { city: string }).city}","temp_c":22,"station":9007199254740993}`,
  });
  const agent = new sdk!.Agent({ name: "weather", instructions: "Answer briefly.", model, tools: [weather] });
  const r1 = await sdk!.run(agent, "Weather in Paris?", { session: s });
  assert.equal(r1.finalOutput, "22 °C in Paris.");
  const r2 = await sdk!.run(agent, "What should I wear?", { session: s });
  assert.equal(r2.finalOutput, "Bring a light jacket.");
  return model;
}

test("runner: the SDK writes its items into checkpointd; the Go CLI and another process read them back", { skip }, async () => {
  const mem = new sdk!.MemorySession();
  const cp = session("runner");
  const memModel = await runTwoTurns(mem);
  const cpModel = await runTwoTurns(cp);

  // The model saw the same history both times (the second turn's from checkpointd), and the
  // session holds the same items.
  assert.deepEqual(cpModel.inputs, memModel.inputs);
  const items = await mem.getItems();
  assert.deepEqual(await cp.getItems(), items);
  assert.deepEqual(
    items.map((it) => ("type" in it && it.type) || "message"),
    ["message", "reasoning", "function_call", "function_call_result", "message", "message", "message"],
  );

  // The Go CLI restores exactly the bytes stored, which are openai-responses items...
  const stored = await c.restore("runner");
  assert.equal(stored.record.dialect, "openai-responses");
  assert.deepEqual(stored.record.counts, { messages: 7, user: 2, assistant: 4, toolResult: 1, extension: 0, toolCalls: 1 });
  const fromGo = (await d.ctl(["restore", "runner"])).toString();
  assert.equal(fromGo, stored.text());
  assert.deepEqual(splitRaw(fromGo).map((r) => fromResponsesItem(JSON.parse(r))), items);
  const toolResult = JSON.parse(splitRaw(fromGo)[3]);
  assert.equal(toolResult.type, "function_call_output");
  assert.equal(toolResult.call_id, "call_1");
  // (the tool's big number is inside its output string: kept digit for digit)
  assert.match(toolResult.output, /"station":9007199254740993/);

  // ...which the Go side converts like any Responses history (here to Anthropic messages: the
  // reasoning summary becomes a thinking block, the call a tool_use, its output a tool_result).
  const anth = JSON.parse((await d.ctl(["restore", "runner", "--as", "anthropic"])).toString());
  assert.deepEqual(
    anth.map((m: { role: string; content: string | { type: string }[] }) =>
      [m.role, typeof m.content === "string" ? "string" : m.content.map((b) => b.type).join("+")].join(":"),
    ),
    ["user:string", "assistant:thinking", "assistant:tool_use", "user:tool_result", "assistant:text", "user:string", "assistant:text"],
  );

  // A fresh CheckpointSession in another process reads the same items.
  const run = promisify(execFile);
  const { stdout } = await run(process.execPath, [join(pkgRoot, "dist/test/support/agents-read.js"), d.natsURL, "runner"]);
  const other = JSON.parse(stdout);
  assert.deepEqual(other.all, items);
  assert.deepEqual(other.last2, items.slice(-2));
  assert.equal(other.version, stored.record.version);
});

/**
 * A coding agent's turn with the SDK's local tools: the model asks for a shell command, a patch and
 * a click; the SDK runs them (on fakes that record what they were asked) and answers; a second turn
 * reads the history back.
 */
function toolScript(): ModelResponse["output"][] {
  return [
    [{ type: "shell_call", id: "sh_1", callId: "call_s1", status: "completed", action: { commands: ["go test ./..."], timeoutMs: 60_000 } }],
    [{ type: "apply_patch_call", id: "ap_1", callId: "call_p1", status: "completed", operation: { type: "update_file", path: "sum.go", diff: "@@\n-a - b\n+a + b\n" } }],
    [
      {
        type: "computer_call",
        id: "cu_1",
        callId: "call_c1",
        status: "completed",
        action: { type: "click", x: 10, y: 20, button: "left" },
        // as the SDK's OpenAI provider hands the model's computer_call over
        providerData: { id: "cu_1", type: "computer_call", pending_safety_checks: [] },
      },
    ],
    [{ type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Fixed: tests pass." }] }],
    [{ type: "message", id: "msg_2", role: "assistant", status: "completed", content: [{ type: "output_text", text: "sum.go, one line." }] }],
  ];
}

async function runToolTurns(s: Session): Promise<{ model: ScriptedModel; done: string[] }> {
  const done: string[] = [];
  const model = new ScriptedModel(toolScript());
  const shell = sdk!.shellTool({
    shell: {
      run: async (action) => {
        done.push(`shell ${action.commands.join(";")}`);
        return { output: [{ stdout: "ok\n", stderr: "", outcome: { type: "exit", exitCode: 0 } }] };
      },
    },
  });
  const patch = sdk!.applyPatchTool({
    editor: {
      createFile: async () => ({ status: "failed", output: "unexpected" }),
      updateFile: async (op) => {
        done.push(`patch ${op.path}`);
        return { status: "completed", output: "patched" };
      },
      deleteFile: async () => ({ status: "failed", output: "unexpected" }),
    },
  });
  const noop = () => undefined;
  const computer = sdk!.computerTool({
    computer: {
      environment: "browser",
      dimensions: [800, 600],
      screenshot: () => "iVBORw0KGgo=",
      click: (x, y) => void done.push(`click ${x},${y}`),
      doubleClick: noop,
      scroll: noop,
      type: noop,
      wait: noop,
      move: noop,
      keypress: noop,
      drag: noop,
    },
  });
  const agent = new sdk!.Agent({ name: "coder", instructions: "Fix the tests.", model, tools: [shell, patch, computer] });
  assert.equal((await sdk!.run(agent, "Fix sum.go", { session: s })).finalOutput, "Fixed: tests pass.");
  assert.equal((await sdk!.run(agent, "What changed?", { session: s })).finalOutput, "sum.go, one line.");
  return { model, done };
}

test("runner with shell, apply_patch and computer tools: the calls and their outputs are stored as API items and restored", { skip }, async () => {
  const mem = new sdk!.MemorySession();
  const cp = session("tools-runner");
  const memRun = await runToolTurns(mem);
  const cpRun = await runToolTurns(cp);
  assert.deepEqual(cpRun.done, ["shell go test ./...", "patch sum.go", "click 10,20"]);
  assert.deepEqual(cpRun.done, memRun.done);

  // The model saw the same history both times (the second turn's from checkpointd)...
  assert.deepEqual(cpRun.model.inputs, memRun.model.inputs);
  const items = await mem.getItems();
  assert.deepEqual(await cp.getItems(), items);
  const types = (xs: { type?: unknown }[]) => xs.map((it) => it.type ?? "message");
  assert.deepEqual(types(items as { type?: unknown }[]), [
    "message",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "computer_call",
    "computer_call_result",
    "message",
    "message",
    "message",
  ]);

  // ...stored as the Responses API's input items, which the Go CLI restores as they are.
  const stored = await c.restore("tools-runner");
  const fromGo = splitRaw((await d.ctl(["restore", "tools-runner"])).toString()).map((r) => JSON.parse(r) as Record<string, unknown>);
  assert.equal(stored.record.dialect, "openai-responses");
  assert.deepEqual(types(fromGo), [
    "message",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "computer_call",
    "computer_call_output",
    "message",
    "message",
    "message",
  ]);
  assert.deepEqual(stored.record.counts, { messages: 10, user: 2, assistant: 5, toolResult: 3, extension: 0, toolCalls: 3 });
  assert.deepEqual(fromGo[1].action, { commands: ["go test ./..."], timeout_ms: 60_000 });
  assert.deepEqual((fromGo[2].output as unknown[])[0], { stdout: "ok\n", stderr: "", outcome: { type: "exit", exit_code: 0 } });
  assert.equal(fromGo[4].call_id, "call_p1");
  assert.equal(fromGo[4].status, "completed");
  assert.deepEqual(fromGo[5].pending_safety_checks, []);
  assert.equal(fromGo[6].call_id, "call_c1");
  assert.deepEqual(fromGo[6].output, { type: "computer_screenshot", image_url: "data:image/png;base64,iVBORw0KGgo=" });
  if (process.env.CP_AGENTS_REPORT) console.log(JSON.stringify({ sdk: items, stored: fromGo }, null, 1));
});

test("pause in Node, resume in Go, continue in Node: the lease's epoch rides on every write", { skip }, async () => {
  const key = { session: "handover" };
  // Node: the agent holds the lease; its session's writes carry the epoch.
  const lease = await c.acquire(key, "node-agent", 60_000);
  const node = new CheckpointSession({ client: c, session: key, saveOptions: { epoch: lease.epoch } });
  await runTwoTurns(node);
  await lease.release(); // pause: every item is already stored
  const paused = await c.get(key);

  // Go: take the lease, restore, answer one more turn in the Responses API's shape, append it.
  const goLease = JSON.parse((await d.ctl(["lease", "acquire", "handover", "--owner", "go-process", "-o", "json"])).toString());
  assert.equal((await d.ctl(["restore", "handover"])).toString(), (await c.restore(key)).text());
  const goItems = [
    '{"type":"message","role":"user","content":[{"type":"input_text","text":"And tomorrow?"}]}',
    '{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Rain: take the umbrella.","annotations":[]}]}',
  ];
  const dir = mkdtempSync(join(tmpdir(), "cp-agents-"));
  try {
    writeFileSync(join(dir, "turn.json"), joinRaw(goItems));
    const args = ["--append-to", String(paused.version), "--epoch", String(goLease.epoch), "--dialect", "openai-responses", "--reason", "turn"];
    await d.ctl(["put", "handover", join(dir, "turn.json"), ...args]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  await d.ctl(["lease", "release", "handover", "--epoch", String(goLease.epoch)]);

  // Node's old session object is fenced: its epoch is over.
  await assert.rejects(node.addItems([{ role: "user", content: "late" }]), (e: unknown) => e instanceof CheckpointError && e.code === "fenced");

  // Node again: a new lease, a new session object; the model sees Go's turn in the SDK's shape.
  const again = await c.acquire(key, "node-agent", 60_000);
  const resumed = new CheckpointSession({ client: c, session: key, saveOptions: { epoch: again.epoch } });
  const model = new ScriptedModel([[{ type: "message", id: "msg_3", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Yes." }] }]]);
  const agent = new sdk!.Agent({ name: "weather", instructions: "Answer briefly.", model });
  const r = await sdk!.run(agent, "Really?", { session: resumed });
  assert.equal(r.finalOutput, "Yes.");
  const seen = model.inputs[0] as AgentInputItem[];
  assert.deepEqual(seen.slice(-3), [
    { type: "message", role: "user", content: [{ type: "input_text", text: "And tomorrow?" }] },
    { type: "message", role: "assistant", content: [{ type: "output_text", text: "Rain: take the umbrella.", annotations: [] }] },
    { type: "message", role: "user", content: "Really?" },
  ]);
  const items = await resumed.getItems();
  assert.equal(items.length, 7 + 2 + 2);
  await again.release();
});

test("writes build on the head last seen: a stale writer gets conflict, never overwrites", async () => {
  const a = session("two-writers");
  const b = session("two-writers");
  await a.addItems([catalogue[1]]);
  assert.equal((await b.getItems()).length, 1);
  await a.addItems([catalogue[8]]); // b has not seen this version
  for (const op of [() => b.addItems([catalogue[6]]), () => b.popItem(), () => b.clearSession()]) {
    await assert.rejects(op(), (e: unknown) => e instanceof CheckpointError && e.code === "conflict" && e.head === 2);
  }
  assert.deepEqual(await b.getItems(), [catalogue[1], catalogue[8]]); // reading catches up
  assert.deepEqual(await b.popItem(), catalogue[8]);
  assert.equal(a.version, 2);
  await assert.rejects(a.addItems([catalogue[6]]), (e: unknown) => e instanceof CheckpointError && e.code === "conflict");
});

test("one object's operations run one at a time: concurrent calls neither conflict nor lose items", async () => {
  const s = session("concurrent");
  const adds = Array.from({ length: 5 }, (_, i) => s.addItems([{ role: "user", content: `q${i}` }]));
  const popped = s.popItem();
  await Promise.all(adds);
  assert.deepEqual(await popped, { role: "user", content: "q4" });
  assert.deepEqual(await s.getItems(), [0, 1, 2, 3].map((i) => ({ role: "user", content: `q${i}` })));
  assert.equal(s.version, 6);
  // A failed operation does not stop the next ones.
  await assert.rejects(s.addItems([null as unknown as AgentInputItem]), /items\[0\]: an Agents SDK item is an object, got null/);
  await s.addItems([{ role: "user", content: "q5" }]);
  assert.equal((await s.getItems()).length, 5);
});

test("popItem rewrites the other items' JSON text as stored, every digit kept", async () => {
  // A Go writer's items, with a number beyond 2^53 in a member the dialect does not know.
  const first = '{"type":"message","role":"user","content":"hi","meta":{"trace":9007199254740993,"x":1.50}}';
  const second = '{"type":"function_call","call_id":"c9","name":"f","arguments":"{}"}';
  await c.save("digits", joinRaw([first, second]), { dialect: "openai-responses" });
  const s = session("digits");
  assert.deepEqual(await s.popItem(), { type: "function_call", callId: "c9", name: "f", arguments: "{}" });
  await s.addItems([catalogue[1]]);
  const raw = (await c.restore("digits")).rawMessages();
  assert.equal(raw[0], first);
  assert.deepEqual(JSON.parse(raw[1]), catalogue[1]);
});

test("a session in another dialect is refused whole, not misread", async () => {
  await c.save("native", '[{"role":"user","content":"hi","timestamp":1}]');
  const s = session("native");
  for (const op of [() => s.getItems(), () => s.addItems([catalogue[1]]), () => s.popItem()]) {
    await assert.rejects(op(), (e: unknown) => e instanceof CheckpointError && e.code === "bad_request" && /holds native/.test(e.message));
  }
  assert.equal((await c.get("native")).version, 1);
});

/**
 * SDK items the Responses API has no input item for, or whose API item lacks a member the API
 * requires: the daemon refuses them, typed, naming the item and field, and stores nothing. (The
 * SDK's OpenAI provider invents some of those members, e.g. a web search's status "failed"; the
 * session does not.)
 */
const refusedItems: [string, AgentInputItem, string][] = [
  // The provider refuses it too ("Unsupported built-in tool call type"): providerData says no kind.
  ["hosted_tool_call of no known kind", { type: "hosted_tool_call", name: "web_search_call", status: "completed" }, "type"],
  ["unknown", { type: "unknown", providerData: { x: 1 } }, "type"],
  [
    "hosted web search without a status",
    { type: "hosted_tool_call", id: "ws_2", name: "web_search_call", providerData: { type: "web_search_call", action: { type: "search", query: "q" } } },
    "status",
  ],
  // The API's computer_call requires pending_safety_checks, which the model's carry (providerData).
  ["computer_call without pending_safety_checks", { type: "computer_call", id: "cu_3", callId: "cc1", status: "completed", action: { type: "screenshot" } }, "pending_safety_checks"],
  [
    "computer_call without an id",
    { type: "computer_call", callId: "cc1", status: "completed", action: { type: "screenshot" }, providerData: { pending_safety_checks: [] } },
    "id",
  ],
  ["program without an id", { type: "program", callId: "p1", code: "1", fingerprint: "f" }, "id"],
  ["program_output without an id", { type: "program_output", callId: "p1", output: "1", status: "completed" }, "id"],
  [
    "assistant image part",
    { role: "assistant", status: "completed", content: [{ type: "image", image: "iVBO" }] },
    "content[0].type",
  ],
  [
    "assistant audio part",
    { role: "assistant", status: "completed", content: [{ type: "audio", audio: "UklG", format: "wav" }] },
    "content[0].type",
  ],
  ["user audio part without a format", { role: "user", content: [{ type: "audio", audio: "UklG" }] }, "content[0].type"],
  ["user audio part by file id", { role: "user", content: [{ type: "audio", audio: { id: "file-a" }, format: "wav" }] }, "content[0].type"],
  [
    "function result {type: image}",
    { type: "function_call_result", name: "f", callId: "c1", status: "completed", output: { type: "image", image: "https://example.com/a.png" } },
    "output",
  ],
  [
    "function result {type: file}",
    { type: "function_call_result", name: "f", callId: "c1", status: "completed", output: { type: "file", file: { id: "file-1" } } },
    "output",
  ],
];

/**
 * Every type of the SDK's AgentInputItem (tsc refuses this object when the SDK adds or drops one),
 * each of which the catalogue stores or refusedItems shows refused.
 */
const sdkItemTypes = {
  message: true,
  reasoning: true,
  function_call: true,
  function_call_result: true,
  computer_call: true,
  computer_call_result: true,
  shell_call: true,
  shell_call_output: true,
  apply_patch_call: true,
  apply_patch_call_output: true,
  tool_search_call: true,
  tool_search_output: true,
  program: true,
  program_output: true,
  hosted_tool_call: true,
  compaction: true,
  unknown: true,
} satisfies Record<NonNullable<AgentInputItem["type"]>, true>;

test("every SDK item type is in the catalogue (stored) or among the refused", () => {
  const typeOf = (it: AgentInputItem): string => ("type" in it && it.type) || "message";
  const stored = new Set(catalogue.map(typeOf));
  const refused = new Set(refusedItems.map(([, it]) => typeOf(it)));
  for (const t of Object.keys(sdkItemTypes)) assert.ok(stored.has(t) || refused.has(t), t);
  assert.deepEqual([...refused].filter((t) => !stored.has(t)), ["unknown"]);
});

/** The daemon's counts of the catalogue (docs/format.md: how each item counts). */
const COUNTS = { messages: 31, system: 1, user: 3, assistant: 18, toolResult: 8, extension: 1, toolCalls: 14 };

test("the catalogue is stored in the Responses API's shape, which the daemon accepts and Go reads", async () => {
  const s = session("api-shape");
  await s.addItems(catalogue);
  const r = await c.restore("api-shape");
  assert.equal(r.record.dialect, "openai-responses");
  const raw = r.rawMessages().map((m) => JSON.parse(m) as Record<string, unknown>);
  assert.deepEqual(raw, JSON.parse(JSON.stringify(catalogue.map((it) => toResponsesItem(it)))));
  // No SDK spelling outside providerData and the hint: every member the API names is snake_case.
  const sdkSpelling = /^(callId|callerId|exitCode|timeoutMs|maxOutputLength|moveTo|functionName|deferLoading|allowedCallers|outputSchema|rawContent)$/;
  const walk = (v: unknown, at: string): void => {
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${at}[${i}]`));
    else if (typeof v === "object" && v !== null)
      for (const [k, x] of Object.entries(v)) {
        assert.doesNotMatch(k, sdkSpelling, `${at}.${k}`);
        if (k !== "providerData" && k !== HINT) walk(x, `${at}.${k}`);
      }
  };
  raw.forEach((it, i) => walk(it, `item ${i}`));
  const apiTypes = raw.map((it) => it.type ?? "message");
  for (const t of ["function_call_result", "computer_call_result", "hosted_tool_call"]) assert.ok(!apiTypes.includes(t), t);
  for (const t of ["computer_call_output", "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response", "mcp_call"]) {
    assert.ok(apiTypes.includes(t), t);
  }
  // The Go CLI restores the same bytes, and its counts see the tool calls and their results.
  assert.equal((await d.ctl(["restore", "api-shape"])).toString(), r.text());
  assert.deepEqual(r.record.counts, COUNTS);
  assert.deepEqual(await s.getItems(), catalogue);
});

test("SDK items the openai-responses dialect does not know are refused, typed, and nothing is stored", async () => {
  const s = session("refusals");
  await s.addItems([catalogue[1]]);
  const found: string[] = [];
  for (const [what, item, field] of refusedItems) {
    const e = await s.addItems([catalogue[1], item]).then(
      () => assert.fail(`${what}: stored`),
      (e: unknown) => e,
    );
    assert.ok(e instanceof CheckpointError, `${what}: ${e}`);
    assert.equal(e.code, "invalid", `${what}: ${e.message}`);
    assert.equal(e.index, 2, `${what}: ${e.message}`);
    assert.equal(e.field, field, `${what}: ${e.message}`);
    found.push(`${what}: ${e.field}: ${e.message}`);
  }
  assert.equal((await c.get("refusals")).version, 1);
  assert.equal((await s.getItems()).length, 1);
  if (process.env.CP_AGENTS_REPORT) console.log(found.join("\n"));
});
