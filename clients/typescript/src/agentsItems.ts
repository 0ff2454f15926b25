// The OpenAI Agents SDK's history items (`AgentInputItem` of @openai/agents-core) and the
// `openai-responses` dialect (docs/format.md §1.1): the Responses API's input items, which is what a
// CheckpointSession stores, so that a Go process (checkpointctl, checkpoint/conv) reads the same
// conversation as the Responses API shapes it.
//
// The two are close but not equal: the SDK spells `callId` where the API spells `call_id`, calls a
// tool's result `function_call_result` (the API: `function_call_output`), keeps a reasoning item's
// summary in `content` and its raw text in `rawContent` (the API: `summary` and `content`), and
// names image and file sources `image` / `file` (the API: `image_url`, `file_id`, `file_data`,
// `file_url`). toResponsesItem renames; fromResponsesItem renames back, so that an item read back
// equals the item added (MemorySession's contract). Where the API shape alone cannot tell which SDK
// form it came from (a tool's `{type: "text", text}` result is the API's plain string; a
// `file: {url}` is the API's `file_url`, as is a `file: "https://..."`), the stored item or part
// carries a small `agents_sdk` member saying so; the daemon keeps unknown members and the Go side
// ignores them.
//
// The SDK's tool items (computer, shell, apply_patch, tool search, program calls and their outputs,
// compaction, hosted tool calls) are renamed as the SDK's own OpenAI provider renames them when it
// sends them to the Responses API (@openai/agents-openai, openaiResponsesConverter getInputItems):
// `callId` → `call_id`, a caller's `callerId` → `caller_id`, `timeoutMs` → `timeout_ms`, a hosted
// tool call becomes the API item its `providerData` holds, ... with one difference: nothing is
// invented (the provider fills in `status: "failed"`, `queries: []`, `exit_code: 0` where the SDK
// item has none; here the item stays without, and the daemon refuses what the API requires).
//
// Items with no API form (`unknown`, a hosted tool call of a kind the provider does not know) go as
// the SDK shaped them: the daemon then refuses them with a typed error naming the item and field.
// Nothing is dropped.

import { isDeepStrictEqual } from "node:util";

/** The member holding what the API shape cannot say about the SDK form (see the file comment). */
export const HINT = "agents_sdk";

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

/** rename moves o[from] to o[to] (o is a copy), refusing to overwrite a member already there. */
function rename(o: Obj, from: string, to: string, where: string): void {
  if (!(from in o)) return;
  if (to in o) throw new TypeError(`${where}: has both "${from}" and "${to}"; cannot map one onto the other`);
  o[to] = o[from];
  delete o[from];
}

function refuseHint(o: Obj, where: string): void {
  if (HINT in o) throw new TypeError(`${where}: member "${HINT}" is reserved by CheckpointSession`);
}

// -------------------------------------------------------------------------------------------------
// SDK → API

/** toResponsesItem maps one SDK item to the openai-responses item stored for it (a new object). */
export function toResponsesItem(item: unknown, where = "item"): Obj {
  if (!isObj(item)) throw new TypeError(`${where}: an Agents SDK item is an object, got ${describe(item)}`);
  refuseBytes(item, where);
  refuseHint(item, where);
  const o: Obj = { ...item };
  switch (o.type) {
    case undefined:
    case "message":
      if (Array.isArray(o.content)) {
        const user = o.role === "user";
        o.content = o.content.map((p, i) => partToAPI(p, `${where}.content[${i}]`, user));
      }
      return o;
    case "function_call":
      rename(o, "callId", "call_id", where);
      callerToAPI(o, where);
      return o;
    case "function_call_result":
      o.type = "function_call_output";
      rename(o, "callId", "call_id", where);
      callerToAPI(o, where);
      outputToAPI(o, where);
      return o;
    case "reasoning":
      // The SDK's content is the summary shown to users (input_text parts); rawContent the model's
      // raw reasoning (reasoning_text parts), the API's content.
      if ("summary" in o) throw new TypeError(`${where}: a reasoning item with "summary" cannot be mapped (the SDK's "content" becomes it)`);
      if (Array.isArray(o.content)) {
        o.summary = o.content.map((p, i) => retype(p, "input_text", "summary_text", `${where}.content[${i}]`));
      } else if ("content" in o) {
        o.summary = o.content;
      }
      delete o.content;
      rename(o, "rawContent", "content", where);
      return o;
  }
  return toolItemToAPI(o, where);
}

/** A function result's output: a string stays; `{type: "text", text}` (what the runner makes of a tool's return value) becomes the string, the rest of the object kept in the hint; an array of input_* parts is mapped part by part. */
function outputToAPI(o: Obj, where: string): void {
  const out = o.output;
  if (Array.isArray(out)) {
    o.output = out.map((p, i) => partToAPI(p, `${where}.output[${i}]`));
  } else if (isObj(out) && out.type === "text" && typeof out.text === "string") {
    const { text, ...rest } = out;
    o.output = text;
    o[HINT] = { output: rest };
  }
  // Other single objects ({type: "image"}, {type: "file"}) have no API form: sent as they are, the
  // daemon refuses them (output: want a string or an array).
}

function retype(p: unknown, from: string, to: string, where: string): unknown {
  if (!isObj(p) || p.type !== from) return p;
  refuseHint(p, where);
  return { ...p, type: to };
}

/** partToAPI maps one content part (a message's, or a function output's; user: a user message's). */
function partToAPI(p: unknown, where: string, user = false): unknown {
  if (!isObj(p)) return p;
  refuseHint(p, where);
  const o: Obj = { ...p };
  switch (o.type) {
    case "input_image": {
      const img = o.image;
      if (typeof img === "string") {
        rename(o, "image", "image_url", where);
      } else if (isObj(img) && Object.keys(img).length === 1 && typeof img.id === "string") {
        if ("file_id" in o) throw new TypeError(`${where}: has both "image" and "file_id"`);
        o.file_id = img.id;
        delete o.image;
      }
      return o;
    }
    case "input_file": {
      const f = o.file;
      if (typeof f === "string") {
        rename(o, "file", /^https?:\/\//i.test(f) ? "file_url" : "file_data", where);
      } else if (isObj(f) && Object.keys(f).length === 1 && typeof f.id === "string") {
        if ("file_id" in o) throw new TypeError(`${where}: has both "file" and "file_id"`);
        o.file_id = f.id;
        delete o.file;
      } else if (isObj(f) && Object.keys(f).length === 1 && typeof f.url === "string") {
        if ("file_url" in o) throw new TypeError(`${where}: has both "file" and "file_url"`);
        o.file_url = f.url;
        o[HINT] = { file: "url" };
        delete o.file;
      }
      return o;
    }
    case "audio":
      // The SDK's audio part in a user message is the API's input_audio when it carries data and a
      // format. (An assistant's audio has no input form: sent as it is, the daemon refuses it.)
      if (user && typeof o.audio === "string" && typeof o.format === "string") {
        if ("input_audio" in o) throw new TypeError(`${where}: has both "audio" and "input_audio"`);
        o.type = "input_audio";
        o.input_audio = { data: o.audio, format: o.format };
        delete o.audio;
        delete o.format;
      }
      return o;
  }
  return o;
}

// -------------------------------------------------------------------------------------------------
// API → SDK

/**
 * fromResponsesItem maps a stored openai-responses item back to the SDK's shape (a new object). An
 * item that toResponsesItem made comes back equal to what was added; an item another writer stored
 * (a Go process) comes back in the SDK's spelling with only the members it has: a
 * function_call_output without `name` or `status` gets none (nothing is invented).
 */
export function fromResponsesItem(stored: unknown): Obj {
  if (!isObj(stored)) throw new TypeError(`a stored item is an object, got ${describe(stored)}`);
  const o: Obj = { ...stored };
  const hint = isObj(o[HINT]) ? (o[HINT] as Obj) : undefined;
  delete o[HINT];
  switch (o.type) {
    case undefined:
    case "message":
      if (Array.isArray(o.content)) o.content = o.content.map(partFromAPI);
      return o;
    case "function_call":
      rename(o, "call_id", "callId", "stored function_call");
      callerFromAPI(o);
      return o;
    case "function_call_output":
      o.type = "function_call_result";
      rename(o, "call_id", "callId", "stored function_call_output");
      callerFromAPI(o);
      if (hint && isObj(hint.output) && typeof o.output === "string") {
        o.output = { ...hint.output, text: o.output };
      } else if (Array.isArray(o.output)) {
        o.output = o.output.map(partFromAPI);
      }
      return o;
    case "reasoning": {
      const raw = o.content;
      const summary = o.summary;
      delete o.content;
      delete o.summary;
      if (Array.isArray(summary)) {
        o.content = summary.map((p) => (isObj(p) && p.type === "summary_text" ? { ...p, type: "input_text" } : p));
      } else if (summary !== undefined) {
        o.content = summary;
      }
      if (raw !== undefined) o.rawContent = raw;
      return o;
    }
  }
  const tool = toolItemFromAPI(o, hint);
  if (tool) return tool;
  if (hint) o[HINT] = hint; // not ours: kept as stored
  return o;
}

function partFromAPI(p: unknown): unknown {
  if (!isObj(p)) return p;
  const o: Obj = { ...p };
  const hint = isObj(o[HINT]) ? (o[HINT] as Obj) : undefined;
  delete o[HINT];
  switch (o.type) {
    case "input_image":
      if (typeof o.image_url === "string") {
        o.image = o.image_url;
        delete o.image_url;
      } else if (typeof o.file_id === "string") {
        o.image = { id: o.file_id };
        delete o.file_id;
      }
      return o;
    case "input_file":
      if (typeof o.file_url === "string") {
        o.file = hint?.file === "url" ? { url: o.file_url } : o.file_url;
        delete o.file_url;
      } else if (typeof o.file_data === "string") {
        o.file = o.file_data;
        delete o.file_data;
      } else if (typeof o.file_id === "string") {
        o.file = { id: o.file_id };
        delete o.file_id;
      }
      return o;
    case "input_audio": {
      const a = o.input_audio;
      if (isObj(a) && Object.keys(a).length === 2 && typeof a.data === "string" && typeof a.format === "string") {
        delete o.input_audio;
        o.type = "audio";
        o.audio = a.data;
        o.format = a.format;
      }
      return o;
    }
  }
  if (hint) o[HINT] = hint;
  return o;
}

// -------------------------------------------------------------------------------------------------
// Tool items: computer, shell, apply_patch, tool search, programs, hosted tools (SDK ⇄ API)

function addHint(o: Obj, key: string, value: unknown): void {
  o[HINT] = { ...(isObj(o[HINT]) ? (o[HINT] as Obj) : {}), [key]: value };
}

/** A tool call's caller ({type: "program", callerId}): the API spells it caller_id. */
function callerToAPI(o: Obj, where: string): void {
  if (isObj(o.caller)) o.caller = renamed(o.caller, "callerId", "caller_id", `${where}.caller`);
}

function callerFromAPI(o: Obj): void {
  if (isObj(o.caller)) o.caller = renamed(o.caller, "caller_id", "callerId", "stored caller");
}

/** renamed is a copy of o with o[from] moved to o[to] (see rename). */
function renamed(o: Obj, from: string, to: string, where: string): Obj {
  const c = { ...o };
  rename(c, from, to, where);
  return c;
}

/** renameIn renames a member of the object o[member] (a copy), if it is an object. */
function renameIn(o: Obj, member: string, from: string, to: string, where: string): void {
  if (isObj(o[member])) o[member] = renamed(o[member] as Obj, from, to, `${where}.${member}`);
}

/** A shell command's outcome: the SDK's exitCode is the API's exit_code (null stays null: nothing is invented). */
function shellOutputs(o: Obj, from: string, to: string, where: string): void {
  if (!Array.isArray(o.output)) return;
  o.output = o.output.map((e, i) => {
    if (!isObj(e)) return e;
    const c = { ...e };
    renameIn(c, "outcome", from, to, `${where}.output[${i}]`);
    return c;
  });
}

/**
 * liftFromProviderData moves a member the API requires, which the SDK keeps in providerData (under
 * one of keys), to the top of the item, recording under which key it was; lowerToProviderData puts
 * it back. A member already at the top stays there (hint false).
 */
function liftFromProviderData(o: Obj, api: string, keys: string[]): void {
  if (api in o) {
    addHint(o, "providerData", { ...hintOf(o, "providerData"), [api]: false });
    return;
  }
  if (!isObj(o.providerData)) return;
  const pd = o.providerData as Obj;
  const key = keys.find((k) => k in pd);
  if (key === undefined) return;
  const { [key]: value, ...rest } = pd;
  o[api] = value;
  o.providerData = rest;
  addHint(o, "providerData", { ...hintOf(o, "providerData"), [api]: key });
}

function hintOf(o: Obj, key: string): Obj {
  const h = isObj(o[HINT]) ? (o[HINT] as Obj) : {};
  return isObj(h[key]) ? (h[key] as Obj) : {};
}

/**
 * lowerToProviderData undoes liftFromProviderData. An item another writer stored (no hint) has the
 * member moved to providerData[foreignKey] when given, which is where the SDK's own provider puts
 * the API's members that its item schema does not have.
 */
function lowerToProviderData(o: Obj, api: string, hint: Obj | undefined, foreignKey?: string): void {
  const lifted = hint === undefined ? foreignKey : isObj(hint.providerData) ? hint.providerData[api] : undefined;
  if (typeof lifted !== "string" || !(api in o)) return;
  const pd = isObj(o.providerData) ? { ...(o.providerData as Obj) } : o.providerData === undefined ? {} : undefined;
  if (pd === undefined || lifted in pd) return; // never overwrite: kept as stored
  pd[lifted] = o[api];
  delete o[api];
  o.providerData = pd;
}

/** toolItemToAPI maps the SDK's tool items (o is a copy); other types come back as they are. */
function toolItemToAPI(o: Obj, where: string): Obj {
  switch (o.type) {
    case "computer_call":
      rename(o, "callId", "call_id", where);
      // The API requires pending_safety_checks; the SDK keeps the model's in providerData.
      liftFromProviderData(o, "pending_safety_checks", ["pending_safety_checks", "pendingSafetyChecks"]);
      return o;
    case "computer_call_result":
      o.type = "computer_call_output";
      rename(o, "callId", "call_id", where);
      if (isObj(o.output) && o.output.type === "computer_screenshot") renameIn(o, "output", "data", "image_url", where);
      return o;
    case "shell_call":
      rename(o, "callId", "call_id", where);
      callerToAPI(o, where);
      renameIn(o, "action", "timeoutMs", "timeout_ms", where);
      renameIn(o, "action", "maxOutputLength", "max_output_length", where);
      return o;
    case "shell_call_output":
      rename(o, "callId", "call_id", where);
      rename(o, "maxOutputLength", "max_output_length", where);
      callerToAPI(o, where);
      shellOutputs(o, "exitCode", "exit_code", where);
      return o;
    case "apply_patch_call":
      rename(o, "callId", "call_id", where);
      callerToAPI(o, where);
      renameIn(o, "operation", "moveTo", "move_to", where);
      return o;
    case "apply_patch_call_output":
      rename(o, "callId", "call_id", where);
      callerToAPI(o, where);
      return o;
    case "tool_search_call":
    case "tool_search_output":
      toolSearchToAPI(o, where);
      return o;
    case "program":
      rename(o, "callId", "call_id", where);
      return o;
    case "program_output":
      rename(o, "callId", "call_id", where);
      rename(o, "output", "result", where);
      return o;
    case "hosted_tool_call":
      return hostedToAPI(o, where);
  }
  return o; // compaction is in the API's spelling already; unknown and the rest have no API form
}

/** toolItemFromAPI maps a stored tool item back (o is a copy without the hint); undefined: not a tool item. */
function toolItemFromAPI(o: Obj, hint: Obj | undefined): Obj | undefined {
  const where = `stored ${String(o.type)}`;
  switch (o.type) {
    case "computer_call":
      rename(o, "call_id", "callId", where);
      lowerToProviderData(o, "pending_safety_checks", hint, "pending_safety_checks");
      return o;
    case "computer_call_output":
      o.type = "computer_call_result";
      rename(o, "call_id", "callId", where);
      if (isObj(o.output) && o.output.type === "computer_screenshot") renameIn(o, "output", "image_url", "data", where);
      return o;
    case "shell_call":
      rename(o, "call_id", "callId", where);
      callerFromAPI(o);
      renameIn(o, "action", "timeout_ms", "timeoutMs", where);
      renameIn(o, "action", "max_output_length", "maxOutputLength", where);
      return o;
    case "shell_call_output":
      rename(o, "call_id", "callId", where);
      rename(o, "max_output_length", "maxOutputLength", where);
      callerFromAPI(o);
      shellOutputs(o, "exit_code", "exitCode", where);
      return o;
    case "apply_patch_call":
      rename(o, "call_id", "callId", where);
      callerFromAPI(o);
      renameIn(o, "operation", "move_to", "moveTo", where);
      return o;
    case "apply_patch_call_output":
      rename(o, "call_id", "callId", where);
      callerFromAPI(o);
      return o;
    case "tool_search_call":
    case "tool_search_output":
      toolSearchFromAPI(o, hint);
      return o;
    case "program":
      rename(o, "call_id", "callId", where);
      return o;
    case "program_output":
      rename(o, "call_id", "callId", where);
      rename(o, "result", "output", where);
      return o;
  }
  return typeof o.type === "string" && Object.hasOwn(hostedMembers, o.type) ? hostedFromAPI(o, hint) : undefined;
}

// Tool search. The SDK's items may spell the call id call_id or callId (its provider also looks in
// providerData); the tools found are records in the SDK's camelCase for the members its provider
// renames.

const toolSearchKeys: Record<string, [string, string][]> = {
  tool_reference: [["functionName", "function_name"]],
  function: [
    ["deferLoading", "defer_loading"],
    ["allowedCallers", "allowed_callers"],
    ["outputSchema", "output_schema"],
  ],
};

function toolSearchToAPI(o: Obj, where: string): void {
  if ("callId" in o && !("call_id" in o)) {
    rename(o, "callId", "call_id", where);
    addHint(o, "call_id", "callId");
  } else if (!("callId" in o)) {
    liftFromProviderData(o, "call_id", ["call_id", "callId"]);
  } // both: kept as they are
  if (o.type === "tool_search_output" && Array.isArray(o.tools)) {
    const asIs: string[] = []; // members already in the API's spelling (they would come back camelCased)
    o.tools = toolsToAPI(o.tools, "", asIs, `${where}.tools`);
    if (asIs.length > 0) addHint(o, "tools", asIs);
  }
}

function toolSearchFromAPI(o: Obj, hint: Obj | undefined): void {
  if (hint?.call_id === "callId") rename(o, "call_id", "callId", `stored ${String(o.type)}`);
  else lowerToProviderData(o, "call_id", hint); // another writer's call_id stays: the SDK's item has one
  if (o.type === "tool_search_output" && Array.isArray(o.tools)) {
    const asIs = new Set(Array.isArray(hint?.tools) ? hint.tools.filter((p) => typeof p === "string") : []);
    o.tools = toolsFromAPI(o.tools, "", asIs);
  }
}

function toolsToAPI(tools: unknown[], path: string, asIs: string[], where: string): unknown[] {
  return tools.map((t, i) => {
    if (!isObj(t)) return t;
    const o: Obj = { ...t };
    const at = `${path}${i}`;
    for (const [camel, snake] of toolSearchKeys[String(o.type)] ?? []) {
      if (snake in o && !(camel in o)) asIs.push(`${at}.${snake}`);
      else rename(o, camel, snake, `${where}[${i}]`);
    }
    if (o.type === "namespace" && Array.isArray(o.tools)) o.tools = toolsToAPI(o.tools, `${at}.`, asIs, `${where}[${i}].tools`);
    return o;
  });
}

function toolsFromAPI(tools: unknown[], path: string, asIs: Set<unknown>): unknown[] {
  return tools.map((t, i) => {
    if (!isObj(t)) return t;
    const o: Obj = { ...t };
    const at = `${path}${i}`;
    for (const [camel, snake] of toolSearchKeys[String(o.type)] ?? []) {
      if (!asIs.has(`${at}.${snake}`)) rename(o, snake, camel, "stored tool_search_output.tools");
    }
    if (o.type === "namespace" && Array.isArray(o.tools)) o.tools = toolsFromAPI(o.tools, `${at}.`, asIs);
    return o;
  });
}

// Hosted tool calls. The SDK keeps the model's web_search_call, file_search_call, code_interpreter_call,
// image_generation_call and MCP items as a hosted_tool_call whose providerData is the API item (less
// what the SDK lifted out: status, an image's result as output, a caller); its provider sends
// providerData's members, typed by providerData.type (or the name, for MCP items), with the SDK's
// id, status, ... on top. Stored: that API item; the hint lists which members were providerData's
// and which the SDK item's, so that it reads back equal.

/** The API item of each hosted tool call type (older SDKs spell some without "_call"). */
const hostedTypes: Record<string, string> = {
  web_search_call: "web_search_call",
  web_search: "web_search_call",
  file_search_call: "file_search_call",
  file_search: "file_search_call",
  code_interpreter_call: "code_interpreter_call",
  code_interpreter: "code_interpreter_call",
  image_generation_call: "image_generation_call",
  image_generation: "image_generation_call",
  mcp_list_tools: "mcp_list_tools",
  mcp_approval_request: "mcp_approval_request",
  mcp_approval_response: "mcp_approval_response",
  mcp_call: "mcp_call",
};

/** Where the SDK item's own members go in each API item (as the SDK's provider places them). */
const hostedMembers: Record<string, Record<string, string>> = {
  web_search_call: { id: "id", status: "status" },
  file_search_call: { id: "id", status: "status" },
  code_interpreter_call: { id: "id", status: "status", caller: "caller" },
  image_generation_call: { id: "id", status: "status", output: "result" },
  mcp_list_tools: { id: "id", caller: "caller" },
  mcp_approval_request: { id: "id", caller: "caller" },
  mcp_approval_response: { caller: "caller" },
  mcp_call: { id: "id", caller: "caller", output: "output" },
};

function hostedType(o: Obj): string | undefined {
  const t = isObj(o.providerData) ? o.providerData.type : undefined;
  if (typeof t === "string" && Object.hasOwn(hostedTypes, t)) return hostedTypes[t];
  if (typeof o.name === "string" && o.name.startsWith("mcp_") && Object.hasOwn(hostedTypes, o.name)) return o.name;
  return undefined; // the SDK's provider does not send it either ("Unsupported built-in tool call type")
}

function hostedToAPI(o: Obj, where: string): Obj {
  const api = hostedType(o);
  if (api === undefined) return o; // no API form: the daemon refuses its type
  const pd = isObj(o.providerData) ? (o.providerData as Obj) : undefined;
  if (pd) refuseHint(pd, `${where}.providerData`);
  const out: Obj = { ...pd, type: api };
  const h: Obj = {};
  if (pd) {
    h.providerData = Object.keys(pd);
    if ("type" in pd && pd.type !== api) h.providerDataType = pd.type;
  }
  const top: string[] = [];
  const keep: Obj = {};
  for (const [k, v] of Object.entries(o)) {
    if (k === "type" || (k === "providerData" && pd) || v === undefined) continue;
    const to = hostedMembers[api][k];
    const value = k === "caller" && isObj(v) ? renamed(v, "callerId", "caller_id", `${where}.caller`) : v;
    if (to !== undefined && (!(to in out) || isDeepStrictEqual(out[to], value))) {
      out[to] = value;
      top.push(k);
    } else {
      keep[k] = v; // the SDK's name, arguments, ...: no place in the API item
    }
  }
  h.top = top;
  if (Object.keys(keep).length > 0) h.keep = keep;
  out[HINT] = { hosted_tool_call: h };
  return out;
}

function hostedFromAPI(o: Obj, hint: Obj | undefined): Obj {
  const api = o.type as string;
  const h = isObj(hint?.hosted_tool_call) ? (hint.hosted_tool_call as Obj) : undefined;
  if (!h) return hostedForeign(o, api);
  const item: Obj = { type: "hosted_tool_call" };
  for (const k of strings(h.top)) {
    const to = hostedMembers[api][k];
    if (to === undefined || !(to in o)) continue;
    item[k] = k === "caller" && isObj(o[to]) ? renamed(o[to] as Obj, "caller_id", "callerId", "stored caller") : o[to];
  }
  if (Array.isArray(h.providerData)) {
    const pd: Obj = {};
    for (const k of strings(h.providerData)) if (k in o) pd[k] = o[k];
    if ("providerDataType" in h) pd.type = h.providerDataType;
    item.providerData = pd;
  }
  if (isObj(h.keep)) Object.assign(item, h.keep);
  return item;
}

/** An API item another writer stored, as the SDK's provider reads the model's (convertToOutputItem); no status is invented. */
function hostedForeign(o: Obj, api: string): Obj {
  const pd: Obj = { ...o };
  const item: Obj = { type: "hosted_tool_call" };
  if (typeof o.id === "string") item.id = o.id;
  item.name = api;
  if (!api.startsWith("mcp_") && "status" in pd) {
    item.status = pd.status;
    delete pd.status;
  }
  if (isObj(pd.caller) && hostedMembers[api].caller) {
    item.caller = renamed(pd.caller as Obj, "caller_id", "callerId", "stored caller");
    delete pd.caller;
  }
  const output = hostedMembers[api].output;
  if (output !== undefined && typeof pd[output] === "string") {
    item.output = pd[output];
    delete pd[output];
  }
  item.providerData = pd;
  return item;
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
}

/**
 * refuseBytes throws on a Uint8Array anywhere in v (the SDK allows raw bytes for inline image and
 * file data): JSON.stringify would store it as an object of numbered bytes, which reads back as
 * something else. Its runner passes base64 strings there.
 */
function refuseBytes(v: unknown, where: string): void {
  if (v instanceof Uint8Array) throw new TypeError(`${where}: raw bytes (Uint8Array) have no JSON form; give them as base64`);
  if (Array.isArray(v)) v.forEach((x, i) => refuseBytes(x, `${where}[${i}]`));
  else if (typeof v === "object" && v !== null) for (const [k, x] of Object.entries(v)) refuseBytes(x, `${where}.${k}`);
}

function describe(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "an array" : typeof v;
}
