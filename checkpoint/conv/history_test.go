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

// An agent holds at most 100 messages of a real 1,003-message session, saving what it appended
// every 50 messages through a real daemon: memory holds the last 100, its trackers count in them
// (turn starts and compactions moved, those that fell off left out; totals over everything), and
// the stored session has every message, byte for byte.
func TestHistory_LimitNeverTouchesWhatIsStored(t *testing.T) {
	ctx := context.Background()
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		t.Fatal(err)
	}
	source, err := conv.Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Connect(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := checkpoint.Key{Session: "held"}

	h := conv.NewHistory()
	if h.Limit != 10000 {
		t.Fatalf("default limit %d", h.Limit)
	}
	h.Limit = 100
	var head uint64
	save := func() {
		v, err := c.Append(ctx, key, head, h.Pending()) // base 0: a new session
		if err != nil {
			t.Fatal(err)
		}
		head = v.Version
		h.MarkSaved()
	}
	for i := range source.Messages {
		if err := h.Append(source.Messages[i]); err != nil {
			t.Fatal(err)
		}
		if len(h.Messages()) > 100 {
			t.Fatalf("holds %d messages", len(h.Messages()))
		}
		if (i+1)%50 == 0 {
			save()
		}
	}
	save()

	stored, _, err := c.Restore(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := compacted(t, in); !bytes.Equal(stored, want) {
		t.Fatalf("stored %d bytes, want the whole session's %d", len(stored), len(want))
	}
	n := len(source.Messages)
	if h.Dropped() != n-100 || len(h.Messages()) != 100 {
		t.Fatalf("dropped %d, holds %d", h.Dropped(), len(h.Messages()))
	}

	// The trackers of the held window: the whole conversation's, moved by what was dropped.
	whole := conv.Track(source, 0)
	got := h.Trackers()
	var wantStarts []int
	for _, s := range whole.TurnStarts {
		if s >= h.Dropped() {
			wantStarts = append(wantStarts, s-h.Dropped())
		}
	}
	if !reflect.DeepEqual(got.TurnStarts, wantStarts) || got.Usage != whole.Usage || got.Cost != whole.Cost ||
		got.LastResponse.Index != whole.LastResponse.Index-h.Dropped() || got.Context.Tokens != whole.Context.Tokens {
		t.Fatalf("held trackers %+v\nwhole %+v", got, whole)
	}
	for i, s := range got.TurnStarts {
		if m := h.Messages()[s]; m.Role != conv.RoleUser {
			t.Fatalf("turn %d starts at a %s message", i, m.Role)
		}
	}
	if len(got.Compactions) != 0 { // both of the corpus' compactions are long gone from memory
		t.Fatalf("compactions %v", got.Compactions)
	}
}

// A limit of 0 holds every message; compaction indices stay those of the conversation.
func TestHistory_Unlimited(t *testing.T) {
	in, _ := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	source, err := conv.Decode("native", in)
	if err != nil {
		t.Fatal(err)
	}
	h := &conv.History{}
	if err := h.Append(source.Messages...); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Trackers(), conv.Track(source, 0); !reflect.DeepEqual(got, want) || len(h.Messages()) != len(source.Messages) {
		t.Fatalf("unlimited history differs from the whole conversation")
	}
	if !bytes.Equal(h.Pending(), compacted(t, in)) {
		t.Fatal("pending is not the conversation")
	}
}

// A message the History's dialect cannot carry is refused at Append, and nothing is added.
func TestHistory_AppendRefusesWhatTheDialectCannotCarry(t *testing.T) {
	h := &conv.History{Dialect: "openai-chat"}
	err := h.Append(conv.Message{Role: conv.RoleUser, Content: []conv.Part{conv.Text("hi")}},
		conv.Message{Role: conv.RoleAssistant, Content: []conv.Part{conv.Thinking("hmm")}})
	if err == nil || len(h.Messages()) != 0 || string(h.Pending()) != "[]" {
		t.Fatalf("got %v, %d held, pending %s", err, len(h.Messages()), h.Pending())
	}
}

func compacted(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
