package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// The corpus transcripts the sections use (testdata/corpus; SOURCES.md says where they come from).
const (
	smallFile  = "openhands_gui_todo_app.json"       // 19.5 KB
	mediumFile = "claude_code_spotter_258c7280.json" // 599 KB
	largeFile  = "pi_before_compaction.json"         // 2.3 MB, 1,003 messages, 484 assistant turns
)

// corpus holds the transcripts in their canonical (compact) form, as the daemon stores them.
type corpus struct {
	small, medium, large conversation
}

// conversation is a transcript's messages, each compact JSON.
type conversation struct {
	name string
	msgs []json.RawMessage
}

// bytes is the compact JSON array of the messages.
func (c conversation) bytes() []byte { return joinMessages(c.msgs) }

// pair returns the i-th pair of consecutive messages (wrapping around), as a JSON array: the
// "two real messages" an agent appends after a turn.
func (c conversation) pair(i int) []byte {
	n := len(c.msgs) / 2
	j := (i % n) * 2
	return joinMessages(c.msgs[j : j+2])
}

func loadCorpus(dir string) (*corpus, error) {
	if dir == "" {
		var err error
		if dir, err = findCorpus(); err != nil {
			return nil, err
		}
	}
	var c corpus
	for _, f := range []struct {
		name string
		dst  *conversation
	}{{smallFile, &c.small}, {mediumFile, &c.medium}, {largeFile, &c.large}} {
		msgs, err := readMessages(filepath.Join(dir, f.name))
		if err != nil {
			return nil, err
		}
		*f.dst = conversation{name: f.name, msgs: msgs}
	}
	return &c, nil
}

// findCorpus looks for testdata/corpus in the working directory and its parents (go run and go
// test run from inside the module).
func findCorpus() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "testdata", "corpus")
		if _, err := os.Stat(filepath.Join(p, largeFile)); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no testdata/corpus/%s here or above: run from the checkpointd module, or give --corpus", largeFile)
		}
		dir = parent
	}
}

func readMessages(path string) ([]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(data, &msgs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, m := range msgs {
		var c bytes.Buffer
		if err := json.Compact(&c, m); err != nil {
			return nil, fmt.Errorf("%s: message %d: %w", path, i, err)
		}
		msgs[i] = c.Bytes()
	}
	return msgs, nil
}

// joinMessages is the compact JSON array of msgs.
func joinMessages(msgs []json.RawMessage) []byte {
	n := 2
	for _, m := range msgs {
		n += len(m) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}

// role returns a message's role ("" when it has none).
func role(m json.RawMessage) string {
	var r struct {
		Role string `json:"role"`
	}
	_ = json.Unmarshal(m, &r)
	return r.Role
}
