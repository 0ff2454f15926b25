// Command saverestore shows an agent's conversation moving between processes with the checkpoint
// SDK. Run it twice, as two processes (a daemon must be running: go run ./cmd/checkpointd):
//
//	go run ./examples/saverestore save demo      # process 1: two turns, checkpointed after each
//	go run ./examples/saverestore resume demo    # process 2: restore the head, continue, save
//
// The second process knows nothing but the session name: the conversation, and the counters it
// rebuilds from it, come back from checkpointd.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func main() {
	server := flag.String("server", "nats://127.0.0.1:4222", "NATS URL of the checkpointd deployment")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: saverestore [--server URL] save|resume SESSION")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*server, flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "saverestore:", err)
		os.Exit(1)
	}
}

// message is the part of the native format this example writes; checkpointd keeps every field of
// real messages, including ones this struct does not have.
type message struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	StopReason string `json:"stopReason,omitempty"`
	Model      string `json:"model,omitempty"`
	Provider   string `json:"provider,omitempty"`
	Usage      *usage `json:"usage,omitempty"`
	Timestamp  int64  `json:"timestamp"`
}

type usage struct {
	Input       int `json:"input"`
	Output      int `json:"output"`
	TotalTokens int `json:"totalTokens"`
}

func run(server, mode, session string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := checkpoint.Connect(server, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	key := checkpoint.Key{Session: session}

	switch mode {
	case "save":
		var conv []message
		for turn := 1; turn <= 2; turn++ {
			conv = append(conv, userMsg(fmt.Sprintf("question %d", turn)), assistantMsg(fmt.Sprintf("answer %d", turn)))
			v, err := save(ctx, c, key, conv)
			if err != nil {
				return err
			}
			fmt.Printf("process %d saved version %d (%d messages)\n", os.Getpid(), v.Version, v.Counts.Messages)
		}
	case "resume":
		raw, v, err := c.Restore(ctx, key, 0)
		if err != nil {
			return err
		}
		var conv []message
		if err := json.Unmarshal(raw, &conv); err != nil {
			return err
		}
		turns, tokens := rebuildTrackers(conv)
		fmt.Printf("process %d restored version %d: %d messages, %d assistant turns, %d tokens so far\n",
			os.Getpid(), v.Version, len(conv), turns, tokens)
		conv = append(conv, userMsg("and one more"), assistantMsg(fmt.Sprintf("continuing after %d turns", turns)))
		// ExpectVersion: had another process moved the session on meanwhile, this save is refused
		// instead of silently forking the conversation.
		next, err := save(ctx, c, key, conv, checkpoint.ExpectVersion(v.Version))
		if err != nil {
			return err
		}
		fmt.Printf("process %d continued the conversation as version %d\n", os.Getpid(), next.Version)
	default:
		return fmt.Errorf("unknown mode %q (want save or resume)", mode)
	}
	return nil
}

func save(ctx context.Context, c *checkpoint.Client, key checkpoint.Key, conv []message, opts ...checkpoint.SaveOption) (checkpoint.Version, error) {
	data, err := json.Marshal(conv)
	if err != nil {
		return checkpoint.Version{}, err
	}
	return c.Save(ctx, key, data, opts...)
}

// rebuildTrackers recomputes execution accounting from the messages: it is never persisted.
func rebuildTrackers(conv []message) (turns, tokens int) {
	for _, m := range conv {
		if m.Role == "assistant" {
			turns++
			if m.Usage != nil {
				tokens += m.Usage.TotalTokens
			}
		}
	}
	return turns, tokens
}

func userMsg(text string) message {
	return message{Role: "user", Content: text, Timestamp: time.Now().UnixMilli()}
}

func assistantMsg(text string) message {
	return message{Role: "assistant", Content: []map[string]string{{"type": "text", "text": text}},
		StopReason: "stop", Model: "example-model", Provider: "example",
		Usage: &usage{Input: 10, Output: 5, TotalTokens: 15}, Timestamp: time.Now().UnixMilli()}
}
