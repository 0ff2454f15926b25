package conv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/checkpoint/conv"
)

// An agent tracks live, message by message, and checkpoints twice through a real daemon; another
// client restores each version and rebuilds the trackers from the messages alone: they are the
// ones the live tracker had at that save. What is stored is the conversation only.
func TestTracker_LiveEqualsRestored(t *testing.T) {
	ctx := context.Background()
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		t.Fatal(err)
	}
	source, err := conv.Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := checkpoint.Connect(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	key := checkpoint.Key{Session: "tracked"}

	live := &conv.Tracker{Window: 200000}
	held := &conv.Conversation{}
	var atSave []conv.Trackers
	var saved [][]byte
	save := func() {
		body, err := held.Encode("native")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agent.Save(ctx, key, body); err != nil {
			t.Fatal(err)
		}
		atSave, saved = append(atSave, live.Trackers()), append(saved, body)
	}
	for i := range source.Messages {
		held.Messages = append(held.Messages, source.Messages[i])
		live.Add(&held.Messages[len(held.Messages)-1])
		if i == len(source.Messages)/2 {
			save()
		}
	}
	save()
	if got := atSave[1]; len(got.Compactions) != 2 || len(got.TurnStarts) != 55 || got.Cost == 0 || got.Context.Left == nil {
		t.Fatalf("live trackers of the corpus: %d compactions, %d turns, cost %v", len(got.Compactions), len(got.TurnStarts), got.Cost)
	}

	other, err := checkpoint.Connect(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for i, want := range atSave {
		restored, v, err := other.Restore(ctx, key, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(restored, saved[i]) {
			t.Fatalf("version %d: the stored conversation is not what was saved", i+1)
		}
		c, err := conv.Decode(v.Dialect, restored)
		if err != nil {
			t.Fatal(err)
		}
		if got := conv.Track(c, 200000); !reflect.DeepEqual(got, want) {
			t.Fatalf("version %d: rebuilt trackers differ from the live ones:\n got %+v\nwant %+v", i+1, got, want)
		}
		// No tracker in the version record either.
		record, _ := json.Marshal(v)
		for _, name := range []string{`"turnStarts"`, `"turns"`, `"tools"`, `"compactions"`, `"lastResponse"`, `"context"`, `"cost"`} {
			if bytes.Contains(record, []byte(name)) {
				t.Fatalf("version record holds %s: %s", name, record)
			}
		}
	}
}

// The stored format has no tracker field: tracking reads messages and adds nothing to them; the
// messages saved have exactly the members they came with.
func TestTracker_NothingStored(t *testing.T) {
	in, err := os.ReadFile("../../testdata/corpus/claude_code_spotter_258c7280.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := conv.Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := c.Encode("native")
	tr := &conv.Tracker{}
	for i := range c.Messages {
		tr.Add(&c.Messages[i])
	}
	_ = tr.Trackers()
	after, err := c.Encode("native")
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("tracking changed the conversation: %v", err)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(after, &msgs); err != nil {
		t.Fatal(err)
	}
	var orig []map[string]json.RawMessage
	_ = json.Unmarshal(in, &orig)
	for i := range msgs {
		for k := range msgs[i] {
			if _, ok := orig[i][k]; !ok {
				t.Fatalf("message %d gained member %q", i, k)
			}
		}
	}
}
