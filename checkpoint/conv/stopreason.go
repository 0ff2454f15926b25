package conv

// Stop reasons. The model keeps a stop reason in native's vocabulary (pi's: "stop", "length",
// "toolUse", "error", "aborted"); each provider view writes it in its provider's own and reads it
// back. A value a table does not name passes through as it is (anthropic's "stop_sequence" or
// "refusal", openai's "content_filter", native's "error"): a view never invents or drops one.

// The native stop reasons that have a counterpart at a provider.
const (
	StopEndTurn   = "stop"    // the model finished its turn
	StopMaxTokens = "length"  // the output hit its token limit
	StopToolUse   = "toolUse" // the model asks for tool calls
)

// stopReasons is one provider's vocabulary: native name → the provider's.
type stopReasons map[string]string

var (
	anthropicStops  = stopReasons{StopEndTurn: "end_turn", StopMaxTokens: "max_tokens", StopToolUse: "tool_use"}
	openAIChatStops = stopReasons{StopEndTurn: "stop", StopMaxTokens: "length", StopToolUse: "tool_calls"}
)

// out is the provider's name for native stop reason s (s itself when the provider has none).
func (t stopReasons) out(s string) string {
	if p, ok := t[s]; ok {
		return p
	}
	return s
}

// in is the native name of the provider's stop reason s (s itself when it has none).
func (t stopReasons) in(s string) string {
	for n, p := range t {
		if p == s {
			return n
		}
	}
	return s
}
