package transfer_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The streams' notes (docs/format.md §8.15o: CP_LOG and CP_INGEST republish the headers of what
// they store on cp.note.$log.> and cp.note.$ingest.>) are the daemon's account's alone, in a
// --tenants deployment. By raw NATS messages:
//   - a tenant subscribed to cp.note.> (and to everything) receives none of another tenant's notes,
//     which the daemon's account does receive;
//   - notes a tenant publishes on cp.note.> stay in its account: the daemon never sees them;
//   - a note carries the headers of the save it notes, so a tenant can put a Nats-Subject of its
//     choosing into one (its save on the ingest stream, through its import): the server still
//     notes it under the tenant's own subject, and the daemon reads the subject from there. It
//     used to read the header (the first value, the writer's): a save of alice-ci's queued on
//     alice's session with Nats-Subject naming another left alice's queue "known empty", and
//     alice's next restore returned the head before it;
//   - through all of it, bob's restores see each of his writes.
func TestTenancy_NotesAreTheDaemonsOwn(t *testing.T) {
	f, e := startTenancy(t)
	ctx := tenCtx(t)

	var mu sync.Mutex
	var daemonSaw, aliceSaw []*nats.Msg
	collect := func(into *[]*nats.Msg) nats.MsgHandler {
		return func(m *nats.Msg) { mu.Lock(); *into = append(*into, m); mu.Unlock() }
	}
	_, err := e.DaemonConn().Subscribe("cp.note.>", collect(&daemonSaw))
	require.NoError(t, err)
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	for _, subject := range []string{"cp.note.>", ">"} {
		_, err = alice.Subscribe(subject, collect(&aliceSaw))
		require.NoError(t, err)
	}
	require.NoError(t, alice.Flush())
	require.NoError(t, e.DaemonConn().Flush())

	// bob saves, as a request and on the ingest stream (through his import).
	bob, err := e.Conn(f.asBob(t))
	require.NoError(t, err)
	bobC := e.Client(f.asBob(t))
	_, err = bobC.Save(ctx, tenBobKey, tenancyConv("bob-secret-marker", 4))
	require.NoError(t, err)
	queueTenantSave(t, bob, tenBobKey, "bob-queued-1", tenancyConv("bob-secret-marker", 5), nil)

	// alice forges notes on the notes' own subjects, of bob's session.
	bobLog, bobQueue := "cp.log."+tenBobKey.WithDefaults().Token(), wire.IngestSubject(tenBobKey.WithDefaults())
	for subject, hdr := range map[string]map[string]string{
		edge.NoteLogPrefix + strings.TrimPrefix(bobLog, "cp.log."):         {"Nats-Subject": bobLog, "Nats-Sequence": "1", "Forged": "alice"},
		edge.NoteIngestPrefix + strings.TrimPrefix(bobQueue, "cp.ingest."): {"Nats-Subject": bobQueue, "Forged": "alice"},
	} {
		m := nats.NewMsg(subject)
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		require.NoError(t, alice.PublishMsg(m))
	}
	// ... and puts bob's queue's subject into the note of a save of her own.
	queueTenantSave(t, alice, tenAliceKey, "alice-queued-1", tenancyConv("alice-marker", 3), map[string]string{"Nats-Subject": bobQueue, "Forged": "alice"})
	require.NoError(t, alice.Flush())
	require.NoError(t, e.DaemonConn().Flush())
	time.Sleep(100 * time.Millisecond)

	mu.Lock()
	bobNotes := 0
	for _, m := range daemonSaw {
		if m.Header.Get("Forged") == "alice" {
			require.Equal(t, edge.NoteIngestPrefix+strings.TrimPrefix(wire.IngestSubject(tenAliceKey.WithDefaults()), "cp.ingest."), m.Subject,
				"only alice's own save's note carries her headers, under her subject")
		}
		if strings.Contains(m.Subject, ".bob.") {
			bobNotes++
		}
	}
	require.GreaterOrEqual(t, bobNotes, 2, "the daemon's account has bob's notes (log and ingest)")
	for _, m := range aliceSaw {
		if m.Header.Get("Forged") == "alice" {
			continue // her own forgeries, in her own account
		}
		require.False(t, strings.HasPrefix(m.Subject, "cp.note."), "alice received a note: %s", m.Subject)
		require.NotContains(t, m.Subject, ".bob.", "alice received %s", m.Subject)
	}
	mu.Unlock()

	// bob's restores see each of his writes: a save queued while the daemon has no memory for it
	// is waited for.
	got, v, err := bobC.Restore(ctx, tenBobKey, 0)
	require.NoError(t, err)
	require.Equal(t, string(tenancyConv("bob-secret-marker", 5)), string(got))
	_, _, err = bobC.Restore(ctx, tenBobKey, 0) // the queue now known empty
	require.NoError(t, err)
	release := transfer.HoldIngestBudget(e.Daemon, 10*time.Second)
	queueTenantSave(t, bob, tenBobKey, "bob-queued-2", tenancyConv("bob-secret-marker", 6), nil)
	go func() { time.Sleep(300 * time.Millisecond); release() }()
	got, v2, err := bobC.Restore(ctx, tenBobKey, 0)
	require.NoError(t, err)
	require.Equal(t, v.Version+1, v2.Version, "bob's save queued before his restore")
	require.Equal(t, string(tenancyConv("bob-secret-marker", 6)), string(got))

	// Within alice's namespace: alice-ci queues a save on alice's session, its Nats-Subject naming
	// another; alice's next restore waits for it.
	aliceC := e.Client(asAlice())
	_, v, err = aliceC.Restore(ctx, tenAliceKey, 0)
	require.NoError(t, err)
	_, _, err = aliceC.Restore(ctx, tenAliceKey, 0) // the queue now known empty
	require.NoError(t, err)
	aliceCI, err := e.Conn(asAliceCI())
	require.NoError(t, err)
	release = transfer.HoldIngestBudget(e.Daemon, 10*time.Second)
	elsewhere := wire.IngestSubject(checkpoint.Key{Namespace: "alice", Session: "elsewhere", Agent: "main"}.WithDefaults())
	queueTenantSave(t, aliceCI, tenAliceKey, "alice-ci-queued", tenancyConv("alice-marker", 4), map[string]string{"Nats-Subject": elsewhere})
	go func() { time.Sleep(300 * time.Millisecond); release() }()
	got, v2, err = aliceC.Restore(ctx, tenAliceKey, 0)
	require.NoError(t, err)
	require.Equal(t, v.Version+1, v2.Version, "the save queued before the restore, whatever its headers say")
	require.Equal(t, string(tenancyConv("alice-marker", 4)), string(got))
}

// queueTenantSave publishes a save of key on the ingest stream through nc's import (a JetStream publish
// answered by its PubAck), with extra headers.
func queueTenantSave(t *testing.T, nc *nats.Conn, key checkpoint.Key, saveID string, conv []byte, extra map[string]string) {
	t.Helper()
	m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
	m.Header.Set(wire.HdrSaveID, saveID)
	m.Header.Set(wire.HdrMsgID, saveID)
	for k, v := range extra {
		m.Header.Set(k, v)
	}
	m.Data = conv
	ack, err := nc.RequestMsg(m, 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(ack.Data), `"seq"`, "JetStream stored it: %s", ack.Data)
}
