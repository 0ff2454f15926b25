package checkpoint

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// sampleGroupReply is a reply as the daemon writes it: k results of stored saves.
func sampleGroupReply(k int) []byte {
	key := wire.Key{Namespace: "default", Session: "agent-07", Agent: "main"}
	var rs []wire.SaveResult
	for i := 0; i < k; i++ {
		id := fmt.Sprint("save-", i)
		rs = append(rs, wire.SaveResult{SaveID: id, Key: key, OK: true, Duplicate: i%3 == 0, Received: "sha256:9f2c3e0a",
			Version: &wire.Version{Format: 1, Key: key, Version: uint64(100 + i), Parent: uint64(99 + i), Hash: "sha256:1f2c",
				SaveID: id, Writer: "host/12345", Reason: "turn", Created: time.Date(2026, 11, 24, 12, 0, i, 123456789, time.UTC),
				RawBytes: 123456, StoredBytes: 130, Counts: wire.Counts{Messages: 2 * i, User: i, Assistant: i}, Gen: 3}})
	}
	b, _ := json.Marshal(wire.GroupReply{Results: rs})
	return b
}

// The fast decoder takes what the daemon writes, and reads it as encoding/json does.
func TestDecodeGroupReply_TakesTheDaemonsReplies(t *testing.T) {
	for _, k := range []int{1, 2, 64} {
		data := sampleGroupReply(k)
		fast, ok := fastGroupReply(data)
		if !ok {
			t.Fatalf("k=%d: not taken", k)
		}
		var slow groupReply
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("k=%d: %+v, encoding/json %+v", k, fast, slow)
		}
	}
}

// Whatever the fast decoder accepts, encoding/json reads the same; what it does not, goes to
// encoding/json.
func FuzzGroupReply(f *testing.F) {
	f.Add(sampleGroupReply(2))
	f.Add([]byte(`{"results":[{"saveId":"a","version":{"version":1,"created":"2026-01-02T03:04:05Z"},"version":{"parent":7}}]}`))
	f.Add([]byte(`{"results":[{"saveId":"a"}],"results":[{"ok":true}]}`))
	f.Add([]byte(`{"results":[{"saveId":"a","SAVEID":"b","ok":true}]}`))
	f.Add([]byte(`{"error":{"code":"busy","message":"x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := fastGroupReply(data)
		if !ok {
			return
		}
		var slow groupReply
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("taken, but encoding/json refuses it: %v", err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%+v, encoding/json %+v", fast, slow)
		}
	})
}

func BenchmarkDecodeGroupReply(b *testing.B) {
	data := sampleGroupReply(64)
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var rep groupReply
			if err := decodeGroupReply(data, &rep); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var rep groupReply
			if err := json.Unmarshal(data, &rep); err != nil {
				b.Fatal(err)
			}
		}
	})
}
