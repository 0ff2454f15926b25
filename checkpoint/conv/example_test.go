package conv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"testing"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/checkpoint/conv"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// url is where the example's checkpointd listens: a real embedded nats-server and daemon started
// by TestMain on a random port and a temporary directory.
var url string

func TestMain(m *testing.M) { testenv.RunWithDaemon(m, &url) }

// Build a conversation with the model, save it, restore it anywhere and read it back typed.
func Example() {
	ctx := context.Background()
	history := &conv.Conversation{Messages: []conv.Message{
		{Role: conv.RoleUser, Content: []conv.Part{conv.Text("Weather in Paris? 🌦")}, Timestamp: "1700000000000"},
		{Role: conv.RoleAssistant, Model: "claude-sonnet-4", Provider: "anthropic", StopReason: "toolUse",
			Content: []conv.Part{conv.ToolCall("call_1", "get_weather", json.RawMessage(`{"city":"Paris"}`))},
			Usage:   &conv.Usage{Input: "812", Output: "41", Total: "853"}},
		{Role: conv.RoleToolResult, ToolCallID: "call_1", ToolName: "get_weather", Content: []conv.Part{conv.Text("22°C")}},
	}}
	body, err := history.Encode("native") // validated: a message native cannot hold is refused here
	if err != nil {
		log.Fatal(err)
	}

	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	key := checkpoint.Key{Session: "weather"}
	if _, err := c.Save(ctx, key, body); err != nil {
		log.Fatal(err)
	}

	restored, v, err := c.Restore(ctx, key, 0)
	if err != nil {
		log.Fatal(err)
	}
	back, err := conv.Decode(v.Dialect, restored)
	if err != nil {
		log.Fatal(err)
	}
	call := back.Messages[1].ToolCalls()[0]
	result := back.Messages[2]
	fmt.Println(back.Messages[0].TextOf())
	fmt.Println(call.Name, string(call.Arguments), "->", result.TextOf(), "paired:", result.ToolCallID == call.ID)
	fmt.Println("output tokens:", back.Messages[1].Usage.Output)
	// Output:
	// Weather in Paris? 🌦
	// get_weather {"city":"Paris"} -> 22°C paired: true
	// output tokens: 41
}

// A conversation recorded against Anthropic continues against OpenAI: restore it, write it as
// openai-chat (everything carried, or a *CarryError naming what cannot be), and read its trackers.
func ExampleAs() {
	ctx := context.Background()
	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	key := checkpoint.Key{Session: "switch-provider"}
	recorded := []byte(`[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}}],` +
		`"model":"claude-sonnet-4","stop_reason":"tool_use","usage":{"input_tokens":20,"output_tokens":9}},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"22°C","is_error":false}]}]`)
	if _, err := c.Save(ctx, key, recorded, checkpoint.WithDialect("anthropic")); err != nil {
		log.Fatal(err)
	}

	restored, v, err := c.Restore(ctx, key, 0)
	if err != nil {
		log.Fatal(err)
	}
	view, _, err := conv.As(restored, v.Dialect, "openai-chat", conv.ViewOptions{})
	if err != nil {
		log.Fatal(err) // a *conv.CarryError: the message and what openai-chat cannot carry
	}
	var msgs []map[string]any
	_ = json.Unmarshal(view, &msgs)
	call := msgs[2]["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
	fmt.Println(msgs[0]["role"], "|", call["name"], call["arguments"], "|", msgs[2]["finish_reason"], "|", msgs[3]["role"], msgs[3]["tool_call_id"])

	history, _ := conv.Decode(v.Dialect, restored)
	t := conv.Track(history, 200000)
	fmt.Println("turns at", t.TurnStarts, "get_weather calls:", t.Tools["get_weather"].Calls, "context tokens:", t.Context.Tokens, "left:", *t.Context.Left)
	// Output:
	// system | get_weather {"city":"Paris"} | tool_calls | tool t1
	// turns at [1] get_weather calls: 1 context tokens: 30 left: 199970
}
