package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// results are single saves' results as the daemon writes them, of the versions above.
func results() []wire.SaveResult {
	var rs []wire.SaveResult
	for i, v := range versions() {
		r := wire.SaveResult{SaveID: v.SaveID, Key: v.Key, OK: true, Version: &v}
		if i%2 == 1 {
			r.Duplicate, r.Received, r.Unverified = true, "sha256:ab", "the body"
		}
		rs = append(rs, r)
	}
	return rs
}

// What PlainSaveResult takes, encoding/json reads the same.
func FuzzPlainSaveResult(f *testing.F) {
	for _, r := range results() {
		j, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j)
	}
	for _, s := range []string{`{"saveId":"a","ok":false,"error":{"code":"conflict","message":"m"}}`, `{"version":null}`,
		`{"version":{},"version":{"format":2}}`, `{"saveId":"a","saveid":"b"}`, `{"ok":true} `, `{"ok":true}x`, `{"received":"\u0041"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.PlainSaveResult(b)
		if !ok {
			return
		}
		var want wire.SaveResult
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("PlainSaveResult took %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: PlainSaveResult read %+v, encoding/json %+v", b, got, want)
		}
	})
}

// Results of stored saves as the daemon writes them take the plain path; a refusal does not.
func TestPlainSaveResult_TakesWhatTheDaemonSends(t *testing.T) {
	for _, r := range results() {
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := wire.PlainSaveResult(j)
		if !ok {
			t.Errorf("%s: not taken", j)
			continue
		}
		var want wire.SaveResult
		if err := json.Unmarshal(j, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read %+v, encoding/json %+v", j, got, want)
		}
	}
	refusal, _ := json.Marshal(wire.SaveResult{SaveID: "s", Key: wire.Key{Namespace: "n", Session: "s"}, Error: &wire.Error{Code: "conflict", Message: "m"}})
	if _, ok := wire.PlainSaveResult(refusal); ok {
		t.Errorf("%s: a refusal taken", refusal)
	}
}
