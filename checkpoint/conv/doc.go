// Package conv is a typed, neutral model of a conversation, for Go agents that would rather build
// and read messages than bytes. Every dialect checkpointd stores (docs/format.md §1.1) maps into it,
// and, but antigravity, out of it; what it does not model is kept verbatim and in order.
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
// Decode validates with internal/codec, strictly, and returns its typed errors. Encode writes any
// message in native, openai-chat, anthropic, openai-responses, swift-agent and agentsquad (the
// provider views: a conversation recorded against one provider continues against another);
// antigravity is written only from its own steps, unchanged (ErrNoConversion otherwise). A message
// decoded and left unchanged is always written back to its own dialect as it came.
//
// A view carries everything or refuses: what the model knows and the dialect has no field for is
// carried under its native name (model, usage, timestamp, ...) and read back when decoded; stop
// reasons are translated (stopreason.go); what has no place (thinking in openai-chat, extension
// messages, a system prompt in swift-agent, a part of a kind the dialect has no type for) is refused
// with a *CarryError naming the message and the field, never dropped: every written conversation is
// validated as its dialect first. Writing native from another dialect: a system message becomes an
// extension of kind "system_prompt" carrying its role and content; nested tool results become
// toolResult messages of their own.
//
// # Sending a view
//
// View (and As, from restored bytes) writes a provider view shaped by ViewOptions, on a copy:
// anthropic cache_control markers, a reminder, compaction markers as the user message of their
// summary, and, asked for by name and counted in Omitted, thinking, a runtime's own extension
// messages or the members a provider's API has no field for left out. Nothing stored changes
// (docs/format.md §1.3).
//
// # Trackers
//
// Track (or a Tracker fed message by message while an agent runs) rebuilds what an agent keeps
// count of from the messages alone: turns, tool calls and their errors, tokens and cost per turn and
// in all, compactions, the last response, and the context the request view holds. Nothing of it is
// stored: a process that restores a session rebuilds the same trackers (docs/format.md §1.4).
//
// History holds a running agent's messages, at most Limit of them (NewHistory: 10,000), with its
// live trackers, and the messages not yet saved (Pending, for Client.Append): the limit bounds
// memory, never what is stored.
package conv
