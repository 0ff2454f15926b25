package transfer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// serverQuestions counts the requests to read CP_LOG or CP_INGEST that reach the server from any
// connection from the call on (as logReads does for CP_LOG): each call of the function it returns
// gives those since its last call.
func serverQuestions(t *testing.T, nc *nats.Conn) func() []string {
	t.Helper()
	var subs []*nats.Subscription
	for _, stream := range []string{edge.LogStream, wire.StreamIngest} {
		for _, subject := range []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream} {
			sub, err := nc.SubscribeSync(subject)
			require.NoError(t, err)
			require.NoError(t, sub.SetPendingLimits(-1, -1))
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			subs = append(subs, sub)
		}
	}
	require.NoError(t, nc.Flush())
	return func() []string {
		require.NoError(t, nc.Flush())
		var asked []string
		for _, sub := range subs {
			for m, err := sub.NextMsg(0); err == nil; m, err = sub.NextMsg(0) {
				asked = append(asked, m.Subject+" "+string(m.Data))
			}
		}
		return asked
	}
}

// A head restore served from the read cache, of a session this daemon saved, asks the server
// nothing: the streams' notes (docs/format.md §8.15o, edge/notes.go) tell the daemon that no save
// is queued for the session and that no entry came after its cached head. Yet every write
// acknowledged before a restore is seen by it: a save sent as a request, one queued on CP_INGEST
// and one made by another daemon on the same server; after each, the restores ask again until they
// know, then ask nothing (after the other daemon's save, the one get of the head's entry that
// this daemon's engine asks for a head it does not hold, and nothing of the ingest queue).
func TestRestore_RepeatedHeadAsksNothingYetSeesEveryWrite(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "restored again and again"}
	asked := serverQuestions(t, env.Conn())
	conv := turn(nil, "w", 1)
	restoresAskNothing := func(version uint64) {
		t.Helper()
		askedNothing(t, asked, func() {
			got, v, err := env.Client.Restore(ctx, key, 0)
			require.NoError(t, err)
			require.Equal(t, version, v.Version)
			require.Equal(t, string(conv), string(got))
		}, "a repeated restore of version %d asks the server nothing", version)
	}
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	restoresAskNothing(1)

	// A save sent as a request.
	conv = turn(conv, "w", 2)
	_, err = env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version, "the save answered before the restore")
	require.Equal(t, string(conv), string(got))
	restoresAskNothing(2)

	// A save queued on CP_INGEST (held there by a full ingest budget, then let go).
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	release := transfer.HoldIngestBudget(env.Daemon, 10*time.Second)
	conv = turn(conv, "w", 3)
	m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
	m.Header.Set(wire.HdrSaveID, "queued")
	m.Data = conv
	_, err = js.PublishMsg(ctx, m, jetstream.WithMsgID("queued"))
	require.NoError(t, err)
	go func() { time.Sleep(300 * time.Millisecond); release() }()
	got, v, err = env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), v.Version, "the save queued before the restore")
	require.Equal(t, string(conv), string(got))
	restoresAskNothing(3)

	// A save made by another daemon on the same server: an engine of its own on a connection of
	// its own (a whole second daemon would also answer this test's restores).
	nc2, err := nats.Connect(env.URL())
	require.NoError(t, err)
	defer nc2.Close()
	log, err := logstore.OpenLog(ctx, nc2, logstore.LogConfig{Stream: edge.LogStream})
	require.NoError(t, err)
	other := engine.New(log, engine.Config{})
	conv = turn(conv, "w", 4)
	_, err = other.Save(ctx, engine.SaveRequest{Key: engine.Key{Namespace: "default", Session: key.Session, Agent: "main"},
		SaveID: "other", Writer: "t", Now: time.Now(), Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
	require.NoError(t, err)
	got, v, err = env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(4), v.Version, "the other daemon's save")
	require.Equal(t, string(conv), string(got))
	// This daemon's engine forgot the session when the log moved past its head (docs/format.md
	// §8.6): its restores read the last entry, one get, and, once the notes trust the streams
	// again (the other's opening of CP_LOG was an update, whose advisory made them check), ask
	// the ingest queue nothing.
	require.Eventually(t, func() bool {
		asked()
		got, v, err = env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(4), v.Version)
		require.Equal(t, string(conv), string(got))
		return !anyContains(asked(), wire.StreamIngest)
	}, 10*time.Second, 20*time.Millisecond, "the queue known empty")

}

// Notes are not a client's to give: anyone who can publish on the notes' subjects can only make
// the daemon ask. A forged note of a queued save makes the next restore ask the ingest queue, one
// of an entry far ahead makes it ask the log; a note without headers, or of a subject no stream
// has, is ignored. The restores return the head throughout.
func TestRestore_ForgedNotesOnlyMakeTheDaemonAsk(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "forged notes"}
	conv := turn(nil, "w", 1)
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	asked := serverQuestions(t, env.Conn())
	restoreOnly := func() {
		t.Helper()
		got, v, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(1), v.Version)
		require.Equal(t, string(conv), string(got))
	}
	restore := func() []string { // what the restore asked
		t.Helper()
		asked()
		restoreOnly()
		return asked()
	}
	askedNothing(t, asked, restoreOnly, "known: nothing asked")

	hostile, err := nats.Connect(env.URL())
	require.NoError(t, err)
	defer hostile.Close()
	forge := func(subject string, hdr map[string]string) {
		m := nats.NewMsg(subject)
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		require.NoError(t, hostile.PublishMsg(m))
		require.NoError(t, hostile.Flush())
		require.NoError(t, env.NC.Flush()) // the daemon's connection has it before the restore's request
	}
	queue := wire.IngestSubject(key.WithDefaults())
	log := "cp.log." + key.WithDefaults().Token()
	forge(edge.NoteIngestPrefix+strings.TrimPrefix(queue, "cp.ingest."), map[string]string{"Nats-Subject": queue, "Nats-Sequence": "1"})
	require.True(t, anyContains(restore(), wire.StreamIngest), "a note of a queued save: the queue is asked")
	askedNothing(t, asked, restoreOnly, "found empty: known again")

	forge(edge.NoteLogPrefix+strings.TrimPrefix(log, "cp.log."), map[string]string{"Nats-Subject": log, "Nats-Sequence": "999999999"})
	require.True(t, anyContains(restore(), edge.LogStream), "a note of an entry ahead: the log is asked")

	forge(edge.NoteLogPrefix+"x", nil)
	forge(edge.NoteLogPrefix+"y", map[string]string{"Nats-Subject": log, "Nats-Sequence": "not a number"})
	forge(edge.NoteIngestPrefix+"z", map[string]string{"Nats-Subject": "cp.ingest.nothing"})
	restore()
}

// askedNothing restores (restore) until one asks the server nothing, for at most 5 s: the first
// restores of a head ask (the read cache, the notes learn), and so do all those in the 50 ms after
// an advisory of the streams (the daemon starting, another opening CP_LOG) until the notes have
// checked the streams' settings. A daemon that asks every time fails it.
func askedNothing(t *testing.T, asked func() []string, restore func(), msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		asked()
		restore()
		got := asked()
		if len(got) == 0 {
			return
		}
		if time.Now().After(deadline) {
			require.Empty(t, got, msgAndArgs...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func anyContains(asked []string, s string) bool {
	for _, a := range asked {
		if strings.Contains(a, s) {
			return true
		}
	}
	return false
}

// A daemon of a release before the notes, started on the same server, updates CP_LOG to its own
// settings: without the republish. From the stream's advisory of that update on, the notes are not
// trusted (an entry appended since has no note), until the settings republish again.
func TestRestore_NotesAreNotTrustedOnceAStreamStopsRepublishing(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "republish removed"}
	conv := turn(nil, "w", 1)
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	asked := serverQuestions(t, env.Conn())
	askedNothing(t, asked, func() {
		_, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
	}, "known: nothing asked")

	nc2, err := nats.Connect(env.URL()) // the other daemon's connection
	require.NoError(t, err)
	defer nc2.Close()
	log, err := logstore.OpenLog(ctx, nc2, logstore.LogConfig{Stream: edge.LogStream})
	require.NoError(t, err)
	js, err := jetstream.New(nc2)
	require.NoError(t, err)
	old := logstore.LogStreamConfig(logstore.LogConfig{Stream: edge.LogStream})
	old.RePublish = nil // what a daemon before the notes sets
	_, err = js.UpdateStream(ctx, old)
	require.NoError(t, err)
	conv = turn(conv, "w", 2)
	_, err = engine.New(log, engine.Config{}).Save(ctx, engine.SaveRequest{Key: engine.Key{Namespace: "default", Session: key.Session, Agent: "main"},
		SaveID: "old daemon", Writer: "t", Now: time.Now(), Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
	require.NoError(t, err)
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version, "the entry appended without a note")
	require.Equal(t, string(conv), string(got))

	// Republishing again (the daemon's settings put back): trusted again, from the next note on.
	_, err = js.UpdateStream(ctx, logstore.LogStreamConfig(logstore.LogConfig{Stream: edge.LogStream}))
	require.NoError(t, err)
	conv = turn(conv, "w", 3)
	_, err = env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, v, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(3), v.Version)
		asked()
		_, _, err = env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		return len(asked()) == 0
	}, 10*time.Second, 50*time.Millisecond, "republishing again: trusted again")
}
