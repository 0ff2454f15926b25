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
// Items the mapping does not know (hosted tool calls, computer/shell/apply_patch calls, tool search,
// compaction, `unknown`, ...) go as the SDK shaped them: the daemon then validates them and refuses
// what its dialect does not know, with a typed error naming the item and field. Nothing is dropped.

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
      return o;
    case "function_call_result":
      o.type = "function_call_output";
      rename(o, "callId", "call_id", where);
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
  return o;
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
      return o;
    case "function_call_output":
      o.type = "function_call_result";
      rename(o, "call_id", "callId", "stored function_call_output");
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
