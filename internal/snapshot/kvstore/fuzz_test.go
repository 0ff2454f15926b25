package kvstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// FuzzAppend fuzzes the domain's append: a session holding base, then a save of appended with
// Base set to its version. Whatever the bytes, the save never panics, and it either is refused with
// a typed error or makes version 2, whose restored bytes are base's canonical bytes extended by
// appended's messages, canonically. It runs on the real JetStream store (there is no in-memory one),
// one embedded server per fuzzing process.
//
//	go test -run '^$' -fuzz FuzzAppend -fuzztime 3m ./internal/snapshot/kvstore/
func FuzzAppend(f *testing.F) {
	files, err := filepath.Glob("../../../testdata/corpus/*.json")
	if err != nil || len(files) == 0 {
		f.Fatalf("the corpus: %v (%d files)", err, len(files))
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(data, &msgs); err != nil {
			f.Fatal(err)
		}
		n := min(len(msgs), 6)
		base, _ := json.Marshal(msgs[:n/2])
		tail, _ := json.Marshal(msgs[n/2 : n])
		f.Add(base, tail)
	}
	for _, c := range [][2]string{
		{`[]`, `[{"role":"user","content":"first"}]`},
		{`[{"role":"user","content":"a"}]`, `[]`},
		{`[{"role":"user","content":"a"}]`, ` [ {"role" : "assistant", "content":[{"type":"text","text":"\u0041\ud83d\ude00"}], "usage":{"input":1e3}} ] `},
		{`[{"role":"user","content":"a"}]`, `[{"role":"toolResult","toolCallId":"x","content":[]},{"role":"extension","kind":"compaction","data":{}}]`},
		{`[{"role":"user","content":"a"}]`, `{"role":"user"}`},
		{`[{"role":"user","content":"a"}]`, `[{"role":"user","content":"b"}`},
		{`[{"role":"user","content":"a"}]`, `[{"role":"user","content":"` + string(bytes.Repeat([]byte("x"), 40<<10)) + `"}]`},
		{`[{"role":"user","content":"a"}]`, "[\xff]"},
		{`[{"role":"user","content":"a"}]`, `[1]`},
	} {
		f.Add([]byte(c[0]), []byte(c[1]))
	}

	st := fuzzStore(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, base, appended []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := snapshot.Key{Namespace: "fuzz", Session: fmt.Sprintf("s%d", n.Add(1)), Agent: snapshot.DefaultAgent}
		lim := codec.Limits{MaxBytes: 1 << 20}
		first, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: "base", Payload: base, Limits: lim, Now: time.Now()})
		if err != nil {
			requireTyped(t, err)
			return // not a conversation: nothing to append to
		}
		baseRaw, err := snapshot.Read(ctx, st, first.Head.Version, nil)
		if err != nil {
			t.Fatalf("reading version 1: %v", err)
		}
		v1 := first.Head.Version.Version
		saved, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: "append", Base: &v1, Payload: appended, Limits: lim, Now: time.Now()})
		if err != nil {
			requireTyped(t, err)
			return
		}
		if saved.Duplicate || saved.Head.Version.Version != v1+1 || saved.Head.Version.Parent != v1 {
			t.Fatalf("the append made version %d (parent %d, duplicate %v), not %d", saved.Head.Version.Version, saved.Head.Version.Parent, saved.Duplicate, v1+1)
		}
		got, err := snapshot.Read(ctx, st, saved.Head.Version, nil)
		if err != nil {
			t.Fatalf("reading the appended version: %v", err)
		}
		if want := extended(t, baseRaw, appended); !bytes.Equal(got, want) {
			t.Fatalf("restored %q, want base + appended = %q", got, want)
		}
	})
}

// extended is base's canonical bytes with the messages of appended (a JSON array) added, each in
// the compact form the daemon stores.
func extended(t *testing.T, base, appended []byte) []byte {
	var msgs []json.RawMessage
	d := json.NewDecoder(bytes.NewReader(appended))
	d.UseNumber()
	if err := d.Decode(&msgs); err != nil {
		t.Fatalf("an append that is not a JSON array was accepted: %v", err)
	}
	out := bytes.Clone(base[:len(base)-1])
	for _, m := range msgs {
		if len(out) > 1 {
			out = append(out, ',')
		}
		var c bytes.Buffer
		if err := json.Compact(&c, m); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Bytes()...)
	}
	return append(out, ']')
}

// requireTyped fails unless err is one of the domain's typed refusals.
func requireTyped(t *testing.T, err error) {
	t.Helper()
	var ve *codec.ValidationError
	var ce *snapshot.ConflictError
	if errors.As(err, &ve) || errors.As(err, &ce) || errors.Is(err, snapshot.ErrBadRequest) {
		return
	}
	t.Fatalf("untyped error: %T %v", err, err)
}

// fuzzStore is a JetStream store on an embedded server of its own, for the whole fuzzing process.
func fuzzStore(f *testing.F) snapshot.Store {
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: f.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		f.Fatal(err)
	}
	st, err := kvstore.OpenStore(context.Background(), js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	return st
}
