package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// readRequestSeeds: bodies PlainReadRequest takes (the first six), then bodies it must leave to
// encoding/json.
var readRequestSeeds = []string{
	`{"session":"s1","agent":"main","version":0,"encoding":"zstd"}`,
	`{"session":"s1","agent":"main","version":3,"offset":1048576,"encoding":"zstd","view":"request","maxMessages":40}`,
	`{"session":"restore-openhands_gui_todo_app.json","version":123456789012345}`,
	`{}`, `{"session":"s1"}`, `{"agent":"a","session":"s"}`,
	``, `{"session":"s1","session":"s2"}`, // repeated: the last wins in encoding/json
	`{"Session":"s1"}`,                          // encoding/json matches keys case-insensitively
	`{"session":"s\u00e9"}`, `{"session":"sé"}`, // escapes and non-ASCII
	`{"session":"s1","merge":{"a":1}}`, `{"session":"s1","agentPrefix":true}`,
	`{"session":"s1","version":01}`, `{"session":"s1","version":-1}`, `{"session":"s1","version":1.5}`,
	`{"session":"s1","version":1e3}`, `{"session":"s1","version":1234567890123456}`,
	`{"session":"s1","version":99999999999999999999}`, `{"session":null}`, `{"session":1}`,
	`{ "session":"s1"}`, `{"session":"s1"} `, `{"session":"s1",}`, `{"session":"s1"}{}`, `[]`, `{"session":"s1"`,
	`{"session":"s\u0000"}`, "{\"session\":\"s\x7f\"}", `{"offset":9007199254740993,"maxMessages":5}`,
}

// What PlainReadRequest takes, encoding/json reads the same.
func FuzzPlainReadRequest(f *testing.F) {
	for _, s := range readRequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := wire.PlainReadRequest(body)
		if !ok {
			return
		}
		var want wire.ReadRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("PlainReadRequest took %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: PlainReadRequest read %+v, encoding/json %+v", body, got, want)
		}
	})
}

// The bodies the SDKs send take the plain path; the others are left to encoding/json.
func TestPlainReadRequest_TakesWhatTheSDKSends(t *testing.T) {
	sdk, err := json.Marshal(wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: "s1", Agent: "main"}, Version: 7, Offset: 5, Encoding: wire.EncodingZstd})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range append([]string{string(sdk)}, readRequestSeeds[:6]...) {
		if _, ok := wire.PlainReadRequest([]byte(body)); !ok {
			t.Errorf("%s: not taken", body)
		}
	}
	for _, body := range readRequestSeeds[6:] {
		if r, ok := wire.PlainReadRequest([]byte(body)); ok {
			t.Errorf("%s: taken (%+v), left to encoding/json before", body, r)
		}
	}
}

// versions are records as the daemon writes them (json.Marshal), every optional member present in
// some.
func versions() []wire.Version {
	created := time.Date(2026, 11, 24, 8, 0, 0, 123456789, time.UTC)
	v := wire.Version{Format: wire.VersionFormat, Key: wire.Key{Namespace: "default", Session: "restore-openhands_gui_todo_app.json", Agent: "main"},
		Version: 12, Parent: 11, Hash: "sha256:0d5b0f2a1c7f7b0f0d5b0f2a1c7f7b0f0d5b0f2a1c7f7b0f0d5b0f2a1c7f7b0f", SaveID: "0f1e2d3c4b5a6978",
		Reason: "save", Created: created, RawBytes: 19488, StoredBytes: 4500,
		Counts: wire.Counts{Messages: 40, User: 10, Assistant: 20, ToolResult: 9, Extension: 1, ToolCalls: 12}, Gen: 3}
	full := v
	full.Writer, full.Dialect, full.Counts.System = "agent-7", "openai-chat", 2
	full.ForkOf = &wire.ForkRef{Key: wire.Key{Namespace: "default", Session: "src", Agent: "main"}, Version: 4}
	full.Origin = &wire.Origin{Via: "import", Source: "bundle.cpb", At: created.Add(-time.Hour)}
	noAt := full
	noAt.Origin = &wire.Origin{Via: "migrate"}
	local := v
	local.Created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 5*3600))
	return []wire.Version{v, full, noAt, local}
}

// What PlainVersion takes, encoding/json reads the same.
func FuzzPlainVersion(f *testing.F) {
	for _, v := range versions() {
		j, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j)
	}
	for _, s := range []string{`{"format":2,"created":"2026-13-01T00:00:00Z"}`, `{"forkOf":null}`, `{"key":{"session":"s\u00e9"}}`,
		`{"format":2,"format":3}`, `{"counts":{"messages":-1}}`, `{"created":"2026-11-24T08:00:00.1+01:00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.PlainVersion(b)
		if !ok {
			return
		}
		var want wire.Version
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("PlainVersion took %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: PlainVersion read %+v, encoding/json %+v", b, got, want)
		}
	})
}

// Records as the daemon writes them take the plain path.
func TestPlainVersion_TakesWhatTheDaemonSends(t *testing.T) {
	for _, v := range versions() {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := wire.PlainVersion(j)
		if !ok {
			t.Errorf("%s: not taken", j)
			continue
		}
		var want wire.Version
		if err := json.Unmarshal(j, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !got.Created.Equal(v.Created) {
			t.Errorf("%s: read %+v, encoding/json %+v", j, got, want)
		}
	}
}
