package service

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// readRequestSeeds are bodies canonicalRead takes, and bodies it must leave to encoding/json.
var readRequestSeeds = []string{
	`{"session":"s1","agent":"main","version":0,"encoding":"zstd"}`,
	`{"session":"s1","agent":"main","version":3,"offset":1048576,"encoding":"zstd","view":"request","maxMessages":40}`,
	`{"session":"restore-openhands_gui_todo_app.json","version":123456789012345}`,
	`{}`, ``, `{"session":"s1"}`,
	`{"session":"s1","session":"s2"}`,           // repeated: the last wins in encoding/json
	`{"Session":"s1"}`,                          // encoding/json matches keys case-insensitively
	`{"session":"s\u00e9"}`, `{"session":"sé"}`, // escapes and non-ASCII
	`{"session":"s1","merge":{"a":1}}`, `{"session":"s1","agentPrefix":true}`,
	`{"session":"s1","version":01}`, `{"session":"s1","version":-1}`, `{"session":"s1","version":1.5}`,
	`{"session":"s1","version":1e3}`, `{"session":"s1","version":1234567890123456}`,
	`{"session":"s1","version":99999999999999999999}`, `{"session":null}`, `{"session":1}`,
	`{ "session":"s1"}`, `{"session":"s1"} `, `{"session":"s1",}`, `{"session":"s1"}{}`, `[]`, `{"session":"s1"`,
	`{"session":"s\u0000"}`, "{\"session\":\"s\x7f\"}", `{"offset":9007199254740993,"maxMessages":5}`,
}

// What canonicalRead takes, it reads as encoding/json does: the same request, and valid JSON.
func FuzzCanonicalRead(f *testing.F) {
	for _, s := range readRequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := canonicalRead(body)
		if !ok {
			return
		}
		var want wire.ReadRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("canonicalRead took %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: canonicalRead read %+v, encoding/json %+v", body, got, want)
		}
	})
}

// The bodies the SDKs send take the plain path; the others are left to encoding/json (and so
// are accepted or refused as before).
func TestCanonicalRead_TakesWhatTheSDKSends(t *testing.T) {
	sdk, err := json.Marshal(wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: "s1", Agent: "main"}, Version: 7, Offset: 5, Encoding: wire.EncodingZstd})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{string(sdk), readRequestSeeds[0], readRequestSeeds[1], readRequestSeeds[2], `{}`, readRequestSeeds[5]} {
		if _, ok := canonicalRead([]byte(body)); !ok {
			t.Errorf("%s: not taken", body)
		}
	}
	for _, body := range readRequestSeeds[6:] {
		if r, ok := canonicalRead([]byte(body)); ok {
			t.Errorf("%s: taken (%+v), left to encoding/json before", body, r)
		}
	}
}
