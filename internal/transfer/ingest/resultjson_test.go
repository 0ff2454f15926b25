package ingest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

func sampleResult(s string, n uint64, at time.Time) wire.SaveResult {
	key := wire.Key{Namespace: "ns" + s, Session: s, Agent: "main"}
	return wire.SaveResult{SaveID: s, Key: key, OK: true, Duplicate: n%2 == 0, Received: "sha256:" + s, Unverified: s,
		Version: &wire.Version{Format: 1, Key: key, Version: n, Parent: n / 2, Hash: "sha256:" + s, SaveID: s, Writer: s,
			Reason: "turn", Created: at, RawBytes: int64(n), StoredBytes: -int64(n % 7), Gen: n * 3, Dialect: s,
			Counts: wire.Counts{Messages: int(n % 1000), User: 1, Assistant: 2, ToolResult: 3, Extension: 4, ToolCalls: 5, System: int(n % 2)}}}
}

// A result written by hand is byte for byte what encoding/json writes.
func TestAppendResult_WritesWhatEncodingJSONWrites(t *testing.T) {
	zone := time.FixedZone("x", -7*3600)
	for _, r := range []wire.SaveResult{
		sampleResult("plain", 7, time.Date(2026, 11, 24, 12, 0, 1, 0, time.UTC)),
		sampleResult(`quote " back \ <html> & é`+"\u2028\x01", 1<<53-1, time.Date(2026, 1, 2, 3, 4, 5, 600, zone)),
		sampleResult("", 0, time.Time{}),
		{SaveID: "x", Error: &wire.Error{Code: "invalid", Message: "m"}},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendResult(nil, r); string(got) != string(want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	}
}

// Each optional field present or not (blank's bits), and a creation time in any zone of whole
// minutes within a day, as time.Parse reads one (offset).
func FuzzAppendResult(f *testing.F) {
	f.Add("plain", uint64(7), int64(1764000000), int64(5), uint8(0), int16(0))
	f.Add("plain", uint64(8), int64(1764000000), int64(5), uint8(0xff), int16(-420))
	f.Fuzz(func(t *testing.T, s string, n uint64, sec, nsec int64, blank uint8, offset int16) {
		r := sampleResult(s, n, time.Unix(sec, nsec).In(time.FixedZone("", int(offset)%(24*60)*60)))
		v := r.Version
		for i, field := range []*string{&r.Received, &r.Unverified, &v.Writer, &v.Dialect, &v.SaveID, &v.Hash, &v.Reason} {
			if blank&(1<<i) != 0 {
				*field = ""
			}
		}
		if blank&0x80 != 0 {
			v.Counts.System = 0
		}
		want, err := json.Marshal(r)
		if err != nil {
			return // a time outside years 0-9999: encoding/json refuses it, and so does appendResult's fallback
		}
		if got := appendResult(nil, r); string(got) != string(want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// A group's reply is {"results":[...]} of the results as encoding/json writes them, and each
// result announced is its own slice of it.
func TestEncodeGroupReply(t *testing.T) {
	results := []wire.SaveResult{sampleResult("a", 1, time.Unix(1, 0).UTC()), {SaveID: "b", Error: &wire.Error{Code: "conflict", Message: "m"}},
		sampleResult("c", 3, time.Unix(3, 0).UTC())}
	encoded, reply := encodeGroupReply(results)
	want, err := json.Marshal(wire.GroupReply{Results: results})
	if err != nil {
		t.Fatal(err)
	}
	if string(reply) != string(want) {
		t.Fatalf("\n got %s\nwant %s", reply, want)
	}
	for i, r := range results {
		one, _ := json.Marshal(r)
		if string(encoded[i]) != string(one) {
			t.Fatalf("result %d: %s, want %s", i, encoded[i], one)
		}
	}
}
