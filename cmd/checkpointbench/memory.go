package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/procfs"
)

// rssFactor: the daemon's peak RSS while saving and restoring a large checkpoint stays under this
// many times its size (issue 12).
const rssFactor = 3.0

// runMemory: the peak RSS (VmHWM) of a fresh daemon process (embedded server included) while a
// large checkpoint built from the corpus is saved and restored.
func runMemory(ctx context.Context, b *bench) error {
	conv := largeCheckpoint(b.corpus.large, b.o.scale.LargeBytes)
	d, err := b.startDaemon(ctx, "memory")
	if err != nil {
		return err
	}
	c, err := b.connect(d)
	if err != nil {
		return err
	}
	idle, err := procfs.PeakRSS(d.pid())
	if err != nil {
		return err
	}
	key := checkpoint.Key{Session: "large"}
	b.logf("memory: saving and restoring a %s checkpoint", mib(int64(len(conv))))
	began := time.Now()
	if _, err := c.cp.Save(ctx, key, conv); err != nil {
		return err
	}
	saved := time.Since(began)
	afterSave, err := procfs.PeakRSS(d.pid())
	if err != nil {
		return err
	}
	began = time.Now()
	got, _, err := c.cp.Restore(ctx, key, 0)
	if err != nil {
		return err
	}
	restored := time.Since(began)
	if len(got) != len(conv) {
		return fmt.Errorf("restored %d bytes of a %d-byte checkpoint", len(got), len(conv))
	}
	peak, err := procfs.PeakRSS(d.pid())
	if err != nil {
		return err
	}
	n := float64(len(conv))
	t := b.report.add("memory", fmt.Sprintf("Peak RSS of the daemon (embedded server included) saving and restoring a %s checkpoint", mib(int64(len(conv)))),
		"moment", "peak RSS (VmHWM)", "× checkpoint size", "took")
	t.row("idle, before", mib(idle), times(float64(idle)/n), "")
	t.row("after the save", mib(afterSave), times(float64(afterSave)/n), saved.Round(time.Millisecond).String())
	t.row("peak, save and restore", mib(peak), times(float64(peak)/n), restored.Round(time.Millisecond).String()).
		check(fmt.Sprintf("< %g×", rssFactor), times(float64(peak)/n), float64(peak) < rssFactor*n).value("bytes", float64(peak))
	t.note("the checkpoint: pairs of a tool call and its result, each result a different stretch of about %s of %s's text; saved with checkpoint.Client.Save, restored with Restore.",
		mib(int64(toolOutputBytes(b.o.scale.LargeBytes))), largeFile)
	return d.stop()
}

// toolOutputBytes is the size of each tool output of a large checkpoint of n bytes: 4 MiB, or
// less for a small one, so that it still has several.
func toolOutputBytes(n int64) int { return int(min(4<<20, n/16)) }

// largeCheckpoint builds a conversation of about n bytes: tool calls whose outputs are
// multi-MiB stretches of the corpus's text, each starting elsewhere so that no two are the same.
// JSON escaping makes the outputs larger than their text, so a first try that overshoots is built
// again with outputs shorter in proportion.
func largeCheckpoint(src conversation, n int64) []byte {
	text, each := corpusText(src), toolOutputBytes(n)
	conv := toolOutputs(text, each, n)
	if over := float64(len(conv)) / float64(n); over > 1.01 {
		conv = toolOutputs(text, int(float64(each)/over), n)
	}
	return conv
}

// toolOutputs makes pairs of a tool call and an output of each bytes of text until the
// conversation holds n bytes (the outputs escaped), or one more pair would exceed it by far.
func toolOutputs(text string, each int, n int64) []byte {
	var msgs []json.RawMessage
	var total int64
	for i := 0; total+int64(each)/2 < n; i++ {
		start := (i * 7919) % len(text)
		var out strings.Builder
		fmt.Fprintf(&out, "tool output %d\n", i)
		for out.Len() < each {
			out.WriteString(text[start:min(len(text), start+each-out.Len())])
			start = 0
		}
		id := fmt.Sprintf("call_%d", i)
		call, _ := json.Marshal(map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "toolCall", "id": id, "name": "read", "arguments": map[string]any{"path": fmt.Sprintf("/data/%d.log", i)}}}})
		result, _ := json.Marshal(map[string]any{"role": "toolResult", "toolCallId": id, "toolName": "read",
			"content": []any{map[string]any{"type": "text", "text": out.String()}}})
		msgs = append(msgs, call, result)
		total += int64(len(call) + len(result))
	}
	return joinMessages(msgs)
}

// corpusText is the conversation's messages as one text.
func corpusText(c conversation) string {
	var b strings.Builder
	for _, m := range c.msgs {
		b.Write(m)
		b.WriteByte('\n')
	}
	return b.String()
}
