package transfer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A fork of a 2.2 MB conversation shares what it forked (issue 12): CP_LOG grows by less than
// 1 KB (a pin on the source and the fork's one entry), the fork restores byte-identical with the
// source's hash, and it still does once the source is deleted (the engine copies it in first).
// Before the fork op, the SDK sent the whole conversation back as a save: a copy of hundreds of KB.
func TestFork_SharesWhatItForked(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	conv, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", "pi_before_compaction.json"))
	require.NoError(t, err)
	src, dst := checkpoint.Key{Session: "big"}, checkpoint.Key{Session: "big-fork"}
	sv, err := env.Client.Save(ctx, src, conv)
	require.NoError(t, err)

	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	before := packedLogBytes(t, ctx, js)
	fv, err := env.Client.Fork(ctx, src, 0, dst)
	require.NoError(t, err)
	after := quietLogBytes(t, ctx, js)
	require.Less(t, after-before, uint64(1024), "CP_LOG grew %d bytes for a fork of %d bytes", after-before, len(conv))

	require.Equal(t, uint64(1), fv.Version)
	require.Equal(t, sv.Hash, fv.Hash)
	require.Equal(t, &wire.ForkRef{Key: sv.Key, Version: sv.Version}, fv.ForkOf)
	want, _, err := env.Client.Restore(ctx, src, 0)
	require.NoError(t, err)
	got, gv, err := env.Client.Restore(ctx, dst, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, sv.Hash, gv.Hash)

	_, err = env.Client.Delete(ctx, src, nil)
	require.NoError(t, err)
	got, gv, err = env.Client.Restore(ctx, dst, 0)
	require.NoError(t, err, "the fork outlives its source")
	require.Equal(t, want, got)
	require.Equal(t, sv.Hash, gv.Hash)
}

// packedLogBytes is CP_LOG's size once the one session it holds is packed: a save this large
// (over engine.Config.PackBytes) is packed after its reply, off its latency, and the packer's
// last write is the delete of the entry it packed. So it waits for that delete (a message fewer
// than the stream's last sequence), not for a quiet spell: under load the delete came after
// 300 ms without appends, and the fork then seemed to shrink CP_LOG.
func packedLogBytes(t *testing.T, ctx context.Context, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, edge.LogStream)
	require.NoError(t, err)
	var bytes uint64
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx)
		require.NoError(t, err)
		bytes = info.State.Bytes
		return info.State.Msgs < info.State.LastSeq
	}, 30*time.Second, 10*time.Millisecond, "the save was never packed")
	return bytes
}

// quietLogBytes is CP_LOG's size once nothing has been appended for a while (the packer packs a
// session after its save is answered, off its latency).
func quietLogBytes(t *testing.T, ctx context.Context, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, edge.LogStream)
	require.NoError(t, err)
	var last uint64
	for {
		info, err := s.Info(ctx)
		require.NoError(t, err)
		if info.State.LastSeq == last {
			return info.State.Bytes
		}
		last = info.State.LastSeq
		select {
		case <-ctx.Done():
			t.Fatal("CP_LOG never went quiet")
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Retention of the source keeps what a fork reads: pruning the forked version away copies it into
// the fork first.
func TestFork_SurvivesPruningItsSource(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	src, dst := checkpoint.Key{Session: "p"}, checkpoint.Key{Session: "p-fork"}
	convs := []string{`[{"role":"user","content":"one"}]`, `[{"role":"user","content":"one"},{"role":"user","content":"two"}]`,
		`[{"role":"user","content":"one"},{"role":"user","content":"two"},{"role":"user","content":"three"}]`}
	for _, c := range convs {
		_, err := env.Client.Save(ctx, src, []byte(c))
		require.NoError(t, err)
	}
	fv, err := env.Client.Fork(ctx, src, 1, dst)
	require.NoError(t, err)
	require.Equal(t, uint64(1), fv.ForkOf.Version)
	res, err := env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: src.Session, KeepLast: 1})
	require.NoError(t, err)
	require.Len(t, res, 1)
	_, err = env.Client.Get(ctx, src, 1)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "version 1 pruned")
	got, _, err := env.Client.Restore(ctx, dst, 0)
	require.NoError(t, err)
	require.Equal(t, convs[0], string(got))
}

// The fork op as a hostile client sends it (raw NATS): every bad request gets its typed refusal,
// the daemon keeps serving, and the sessions stored are untouched.
func TestFork_RawRequests(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	for _, c := range []string{`[{"role":"user","content":"one"}]`, `[{"role":"user","content":"one"},{"role":"user","content":"two"}]`} {
		_, err := env.Client.Save(ctx, checkpoint.Key{Session: "src"}, []byte(c))
		require.NoError(t, err)
	}
	_, err := env.Client.Save(ctx, checkpoint.Key{Session: "taken"}, []byte(`[{"role":"user","content":"mine"}]`))
	require.NoError(t, err)
	_, err = env.Client.Save(ctx, checkpoint.Key{Namespace: "other", Session: "theirs"}, []byte(`[{"role":"user","content":"secret"}]`))
	require.NoError(t, err)
	huge := strings.Repeat("x", 100_000)

	for _, row := range []struct {
		name, ns, body, code string
	}{
		{"other namespace as destination", "default", `{"session":"src","saveId":"a1","to":{"namespace":"other","session":"f1"}}`, wire.CodeBadRequest},
		{"source of another namespace", "default", `{"session":"theirs","saveId":"a2","to":{"session":"f2"}}`, wire.CodeNotFound},
		{"into another namespace's session by its subject", "other", `{"session":"src","saveId":"a3","to":{"session":"f3"}}`, wire.CodeNotFound},
		{"missing source", "default", `{"session":"nope","saveId":"a4","to":{"session":"f4"}}`, wire.CodeNotFound},
		{"existing destination", "default", `{"session":"src","saveId":"a5","to":{"session":"taken"}}`, wire.CodeConflict},
		{"into itself", "default", `{"session":"src","saveId":"a6","to":{"session":"src"}}`, wire.CodeBadRequest},
		{"version beyond the head", "default", `{"session":"src","version":3,"saveId":"a7","to":{"session":"f7"}}`, wire.CodeNotFound},
		{"version out of range", "default", `{"session":"src","version":18446744073709551615,"saveId":"a8","to":{"session":"f8"}}`, wire.CodeBadRequest},
		{"negative version", "default", `{"session":"src","version":-1,"saveId":"a9","to":{"session":"f9"}}`, wire.CodeBadRequest},
		{"huge source id", "default", `{"session":"` + huge + `","saveId":"a10","to":{"session":"f10"}}`, wire.CodeBadRequest},
		{"huge destination id", "default", `{"session":"src","saveId":"a11","to":{"session":"` + huge + `"}}`, wire.CodeBadRequest},
		{"empty destination", "default", `{"session":"src","saveId":"a12","to":{}}`, wire.CodeBadRequest},
		{"invalid UTF-8 agent", "default", `{"session":"src","saveId":"a13","to":{"session":"f13","agent":"\xff"}}`, wire.CodeBadRequest},
		{"no save id", "default", `{"session":"src","to":{"session":"f14"}}`, wire.CodeBadRequest},
		{"huge writer", "default", `{"session":"src","saveId":"a15","writer":"` + huge + `","to":{"session":"f15"}}`, wire.CodeBadRequest},
		{"not JSON", "default", `{"session":`, wire.CodeBadRequest},
		{"epoch on a session without lease", "default", `{"session":"src","saveId":"a17","epoch":5,"to":{"session":"f17"}}`, wire.CodeFenced},
	} {
		t.Run(row.name, func(t *testing.T) {
			we := forkRaw(t, nc, row.ns, row.body)
			require.NotNil(t, we, "the fork was made")
			require.Equal(t, row.code, we.Code, we.Message)
			require.NotEmpty(t, we.Message)
		})
	}

	// A fork into a session that exists costs the source nothing (no pin written and removed).
	log, err := jetstream.New(nc)
	require.NoError(t, err)
	before := quietLogBytes(t, ctx, log)
	we := forkRaw(t, nc, "default", `{"session":"src","saveId":"again","to":{"session":"taken"}}`)
	require.NotNil(t, we)
	require.Equal(t, wire.CodeConflict, we.Code)
	require.NotNil(t, we.Head)
	require.Equal(t, uint64(1), *we.Head)
	require.Equal(t, before, quietLogBytes(t, ctx, log), "a refused fork wrote to CP_LOG")

	// Version 0 is the head; a retry with the same save id is answered with the same version.
	for range 2 {
		var v wire.Version
		require.Nil(t, forkRawReply(t, nc, "default", `{"session":"src","saveId":"ok","to":{"session":"f0"}}`, &v))
		require.Equal(t, wire.Key{Namespace: "default", Session: "f0", Agent: "main"}, v.Key)
		require.Equal(t, uint64(1), v.Version)
		require.Equal(t, &wire.ForkRef{Key: wire.Key{Namespace: "default", Session: "src", Agent: "main"}, Version: 2}, v.ForkOf)
		require.Equal(t, "fork", v.Reason)
	}
	got, _, err := env.Client.Restore(ctx, checkpoint.Key{Session: "f0"}, 0)
	require.NoError(t, err)
	require.Equal(t, `[{"role":"user","content":"one"},{"role":"user","content":"two"}]`, string(got))

	// Untouched: the sessions' heads are what they were, and no refused fork made a session.
	for session, head := range map[string]uint64{"src": 2, "taken": 1} {
		v, err := env.Client.Get(ctx, checkpoint.Key{Session: session}, 0)
		require.NoError(t, err)
		require.Equal(t, head, v.Version, session)
	}
	v, err := env.Client.Get(ctx, checkpoint.Key{Namespace: "other", Session: "theirs"}, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	for _, key := range []checkpoint.Key{{Session: "f1"}, {Session: "f7"}, {Namespace: "other", Session: "f3"}, {Namespace: "other", Session: "f1"}} {
		_, err := env.Client.Get(ctx, key, 0)
		require.ErrorIs(t, err, checkpoint.ErrNotFound, key.Session)
	}
}

// forkRaw sends a fork request with a hand-made body on namespace ns's fork subject and returns the
// error reply, or nil when the fork was made.
func forkRaw(t *testing.T, nc *nats.Conn, ns, body string) *wire.Error {
	t.Helper()
	var v wire.Version
	return forkRawReply(t, nc, ns, body, &v)
}

func forkRawReply(t *testing.T, nc *nats.Conn, ns, body string, v *wire.Version) *wire.Error {
	t.Helper()
	m, err := nc.Request(wire.APISubject(ns, wire.OpFork), []byte(body), 15*time.Second)
	require.NoError(t, err)
	if m.Header.Get(wire.HdrServiceErrorCode) == "" {
		require.NoError(t, json.Unmarshal(m.Data, v), string(m.Data))
		return nil
	}
	var we wire.Error
	require.NoError(t, json.Unmarshal(m.Data, &we), string(m.Data))
	return &we
}

// A fork goes on like any session: its own saves extend it, it can be forked, and its versions
// outlive the source.
func TestFork_SavesOnAForkOutliveTheSource(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	src, dst := checkpoint.Key{Session: "s"}, checkpoint.Key{Session: "s-fork"}
	one := `[{"role":"user","content":"one"}]`
	two := `[{"role":"user","content":"one"},{"role":"user","content":"two"}]`
	_, err := env.Client.Save(ctx, src, []byte(one))
	require.NoError(t, err)
	_, err = env.Client.Fork(ctx, src, 0, dst)
	require.NoError(t, err)
	v2, err := env.Client.Save(ctx, dst, []byte(two), checkpoint.ExpectVersion(1))
	require.NoError(t, err)
	require.Equal(t, uint64(2), v2.Version)
	_, err = env.Client.Fork(ctx, dst, 1, checkpoint.Key{Session: "s-fork-fork"}) // a fork of a fork
	require.NoError(t, err)
	_, err = env.Client.Delete(ctx, src, nil)
	require.NoError(t, err)
	got, _, err := env.Client.Restore(ctx, checkpoint.Key{Session: "s-fork-fork"}, 0)
	require.NoError(t, err)
	require.Equal(t, one, string(got))
	for n, want := range map[uint64]string{1: one, 2: two} {
		got, _, err := env.Client.Restore(ctx, dst, n)
		require.NoError(t, err)
		require.Equal(t, want, string(got), "version %d", n)
	}
}
