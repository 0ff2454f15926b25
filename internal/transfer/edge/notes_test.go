package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// notesEnv is a server with the daemon's streams (a daemon runs too, on connections of its own),
// notes of the given buffer on a connection of the test's (reconnecting after wait), and a
// writer on another connection appending to key's log.
type notesEnv struct {
	env    *testenv.Env
	nc     *nats.Conn // the notes' connection
	notes  *edge.Notes
	writer jetstream.JetStream
	key    engine.Key
}

func startNotes(t *testing.T, buffer int, wait time.Duration) *notesEnv {
	t.Helper()
	env := testenv.Start(t)
	nc, err := nats.Connect(env.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.ReconnectJitter(0, 0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	log, err := js.Stream(ctx, edge.LogStream)
	require.NoError(t, err)
	ingest, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	notes := edge.NewNotesSized(nc, log, ingest, buffer, time.Hour) // taken out only when asked
	require.NotNil(t, notes, "a single server, both streams republishing")
	t.Cleanup(notes.Stop)
	require.NoError(t, nc.Flush())
	writer, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	return &notesEnv{env: env, nc: nc, notes: notes, writer: writer, key: engine.Key{Namespace: "default", Session: "noted", Agent: "main"}}
}

// appendEntry stores an entry on the key's log, as another daemon would, and returns its sequence
// once the notes' connection has had what the server sent it before: in the daemon, a request
// that follows the ack comes on the notes' own connection, after the note; here the ack comes on
// another, and a round trip on the notes' connection stands for that request.
func (e *notesEnv) appendEntry(t *testing.T) uint64 {
	t.Helper()
	ack, err := e.writer.Publish(context.Background(), "cp.log.default.noted.main", []byte("entry"))
	require.NoError(t, err)
	require.NoError(t, e.nc.Flush())
	return ack.Sequence
}

func (e *notesEnv) queue(t *testing.T, subject string) {
	t.Helper()
	_, err := e.writer.Publish(context.Background(), subject, []byte("save"))
	require.NoError(t, err)
	require.NoError(t, e.nc.Flush())
}

// The note of an entry tells that its log is still there; the note of the next one, that it moved.
func TestNotes_TellWhetherALogMoved(t *testing.T) {
	e := startNotes(t, 1024, 20*time.Millisecond)
	s1 := e.appendEntry(t)
	require.True(t, e.notes.Still(e.key, s1), "its own note came before its ack")
	require.False(t, e.notes.Still(e.key, s1-1), "a sequence the log is not at")
	s2 := e.appendEntry(t)
	require.False(t, e.notes.Still(e.key, s1), "moved past s1")
	require.True(t, e.notes.Still(e.key, s2))
	require.False(t, e.notes.Still(engine.Key{Namespace: "default", Session: "never noted", Agent: "main"}, s2), "a log it has no note of: ask")
}

// A note the subscription dropped (its channel full) may be of any log: everything learnt is
// forgotten, and every log is asked about again. Here the third entry's note is dropped: without
// the reset the log would be taken as still at the second.
func TestNotes_ADroppedNoteForgetsEverything(t *testing.T) {
	e := startNotes(t, 1, 20*time.Millisecond)
	s1 := e.appendEntry(t)
	require.True(t, e.notes.Still(e.key, s1))
	var s2 uint64
	for i := range 2 { // two notes into a channel of one: the second is dropped
		ack, err := e.writer.PublishAsync("cp.log.default.noted.main", []byte("entry"))
		require.NoError(t, err)
		select {
		case a := <-ack.Ok():
			if i == 0 {
				s2 = a.Sequence
			}
		case err := <-ack.Err():
			t.Fatal(err)
		}
	}
	require.NoError(t, e.nc.Flush()) // both notes came before the flush's answer
	require.False(t, e.notes.Still(e.key, s2), "the third entry's note was dropped: never trust the second")
	s4 := e.appendEntry(t)
	require.True(t, e.notes.Still(e.key, s4), "a note after the reset is trusted again")
}

// A reconnect may have missed notes: an entry appended while the notes' connection was down is
// never noted, so what was learnt before is forgotten.
func TestNotes_AReconnectForgetsEverything(t *testing.T) {
	e := startNotes(t, 1024, 500*time.Millisecond)
	s1 := e.appendEntry(t)
	require.True(t, e.notes.Still(e.key, s1))
	reconnected := make(chan struct{}, 1)
	e.nc.SetReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} })
	id, err := e.nc.GetClientID()
	require.NoError(t, err)
	require.NoError(t, e.env.Server.DisconnectClientByID(id))
	require.Eventually(t, func() bool { return !e.nc.IsConnected() }, 5*time.Second, time.Millisecond)
	e.appendEntry(t) // while the notes' connection is down (it waits 500 ms to reconnect)
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("not reconnected")
	}
	require.False(t, e.notes.Still(e.key, s1), "the entry appended while disconnected was not noted: ask")
}

// What a question found is learnt only in the epoch it was asked in, once a note has shown that
// the server holds the subscription; a queue found empty is not trusted if an ingest note came
// after the question began (it may be of a save queued after the answer).
func TestNotes_LearnOnlyWhatTheyCanVouchFor(t *testing.T) {
	e := startNotes(t, 1024, 20*time.Millisecond)
	key := engine.Key{Namespace: "default", Session: "asked", Agent: "main"}
	unarmed := e.notes.Begin()
	e.notes.Stayed(key, 7, unarmed)
	require.False(t, e.notes.Still(key, 7), "no note yet: the subscription is not known to be held")

	e.appendEntry(t) // arms them
	mark := e.notes.Begin()
	e.notes.Stayed(key, 7, mark)
	require.True(t, e.notes.Still(key, 7), "a question found nothing after 7")

	queue := wire.IngestSubject(wire.Key{Namespace: "default", Session: "asked", Agent: "main"})
	mark = e.notes.Begin()
	e.queue(t, wire.IngestSubject(wire.Key{Namespace: "default", Session: "other", Agent: "main"}))
	e.notes.Emptied(queue, mark)
	require.False(t, e.notes.Quiet(queue), "an ingest note came after the question began")
	mark = e.notes.Begin()
	e.notes.Emptied(queue, mark)
	require.True(t, e.notes.Quiet(queue))
	e.queue(t, queue)
	require.False(t, e.notes.Quiet(queue), "a save queued on it since")
}

// A nil Notes (a cluster, streams that do not republish) knows nothing: every read asks.
func TestNotes_NilKnowsNothing(t *testing.T) {
	var n *edge.Notes
	key := engine.Key{Namespace: "default", Session: "s", Agent: "main"}
	require.False(t, n.Still(key, 1))
	n.Stayed(key, 1, n.Begin())
	require.False(t, n.Still(key, 1))
	require.False(t, n.Quiet("cp.ingest.default.s.main"))
	n.Stop()
}
