// Package conv is a typed, neutral model of a conversation, for Go agents that would rather build
// and read messages than bytes. Every dialect checkpointd stores (docs/format.md §1.1) maps into it,
// and it writes native conversations; what it does not model is kept verbatim and in order.
//
// # The model
//
// A Conversation is a list of Message, each with a Role:
//
//   - RoleSystem: a system or developer prompt (Content);
//   - RoleUser: Content;
//   - RoleAssistant: Content, and the response's Model, Provider, API, StopReason, ErrorMessage and
//     Usage (Input, Output, CacheRead, CacheWrite, Total; both spellings of native usage are read
//     and written back as they came);
//   - RoleToolResult: the result of one tool call, paired with it by ToolCallID, with ToolName,
//     IsError and Content;
//   - RoleExtension: anything else a runtime records, by Kind, with its Data; KindCompaction marks a
//     compaction (native: the extension of kind "compaction"; antigravity: a Compaction step).
//
// Content is a list of Part: PartText (Text), PartThinking (Thinking), PartImage (base64 Data with
// its MIMEType, or a URL), PartToolCall (ID, Name, Arguments: the raw JSON value) and PartToolResult
// (a result nested in a message, as anthropic, swift-agent and agentsquad carry them: ID of the call,
// Result, IsError). A part of a kind the model does not know keeps its dialect's type as Type and its
// members in Extra. Every message has a Timestamp as it came.
//
// # Fidelity
//
// Numbers (timestamps, token counts) are json.Number and every value the model does not read is a
// json.RawMessage: nothing goes through a float64, big integers and astral-plane text survive. Every
// member the model does not know is in Extra (of the message, the part or the usage), in order.
// Decoding remembers each object's members as they came; encoding writes each member whose typed
// value is unchanged as its exact bytes (escapes, number spellings, nulls, duplicates included), a
// changed one anew in its place, a new one at the end. So Decode then Encode in the same dialect
// gives back the canonical form (docs/format.md, "Fidelity and the canonical form") byte for byte.
//
// # Dialects
//
// Decode validates with internal/codec, strictly, and returns its typed errors. Encode writes native,
// openai-chat and anthropic from any message (the provider views: a conversation recorded against
// one provider continues against another); in the other dialects it writes a message decoded from
// that dialect and left unchanged as it came, and refuses anything else with ErrNoConversion.
// A message decoded and left unchanged is always written back to its own dialect as it came.
// Writing openai-chat or anthropic carries what the model knows and the dialect has no field for
// under its native name (model, usage, timestamp, ...), read back when decoded, and refuses by name
// what has no place (thinking in openai-chat, extension messages). Writing native from another
// dialect: a system message becomes an
// extension of kind "system_prompt" carrying its role and content; a message's nested tool results
// become toolResult messages of their own; members native does not know are carried as unknown
// members. What native cannot hold (a part of a kind it has no type for, such as anthropic's
// redacted_thinking or agentsquad's json block) is refused with a *CarryError naming the message and
// the field, never dropped: every written conversation is validated as its dialect first.
package conv
