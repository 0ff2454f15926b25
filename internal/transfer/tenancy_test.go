package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Tenancy tests: every client is a hostile tenant. alice logs in with a password (two users share
// her namespace), bob with an nkey, ops is an admin. Each attack is sent as raw NATS, and afterwards
// bob's session and every stream of the daemon's account must be exactly as before.

type tenancyFixture struct {
	tenants   *embedded.Tenants
	tenBobKey nkeys.KeyPair
	admKey    nkeys.KeyPair
}

func newTenancyFixture(t *testing.T) tenancyFixture {
	t.Helper()
	bob, err := nkeys.CreateUser()
	require.NoError(t, err)
	bobPub, err := bob.PublicKey()
	require.NoError(t, err)
	adm, err := nkeys.CreateUser()
	require.NoError(t, err)
	admPub, err := adm.PublicKey()
	require.NoError(t, err)
	return tenancyFixture{tenBobKey: bob, admKey: adm, tenants: &embedded.Tenants{
		Admins: []embedded.Login{{User: "ops", Password: "ops-secret-PW1"}, {Nkey: admPub}},
		Tenants: []embedded.Tenant{
			{Namespace: "alice", Login: embedded.Login{User: "alice", Password: "alice-secret-PW2"}},
			{Namespace: "alice", Login: embedded.Login{User: "alice-ci", Password: "alice-ci-secret-PW3"}},
			{Namespace: "bob", Login: embedded.Login{Nkey: bobPub}},
		}}}
}

func asAlice() nats.Option   { return nats.UserInfo("alice", "alice-secret-PW2") }
func asAliceCI() nats.Option { return nats.UserInfo("alice-ci", "alice-ci-secret-PW3") }
func asOps() nats.Option     { return nats.UserInfo("ops", "ops-secret-PW1") }

func nkeyLogin(t *testing.T, kp nkeys.KeyPair) nats.Option {
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return nats.Nkey(pub, kp.Sign)
}

func (f tenancyFixture) asBob(t *testing.T) nats.Option { return nkeyLogin(t, f.tenBobKey) }

// tenancyConv is a small conversation carrying marker, so a test can look for it in what a
// hostile tenant received.
func tenancyConv(marker string, n int) []byte {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":"%s turn %d"}],"timestamp":%d}`, marker, i, 1700000000000+i)
	}
	b.WriteString("]")
	return []byte(b.String())
}

// tenBigConv is a conversation whose zstd form does not fit in one 64 KiB message: a chunked save.
func tenBigConv(marker string) []byte {
	rnd := make([]byte, 150<<10)
	for i := range rnd {
		rnd[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(i*7919+i*i*31)%62]
	}
	return []byte(`[{"role":"user","content":[{"type":"text","text":"` + marker + " " + string(rnd) + `"}],"timestamp":1}]`)
}

func tenCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// tenDaemonState is every stream of the daemon's account (messages and sequences) and the ingest
// consumers: what a purge, a deletion or a stray write would change. The daemons of these tests do
// not compact (CompactIdle 0), so nothing changes it but clients.
func tenDaemonState(t *testing.T, nc *nats.Conn) map[string]string {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := tenCtx(t)
	out := map[string]string{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		st := s.CachedInfo().State
		out[name] = fmt.Sprintf("msgs=%d first=%d last=%d", st.Msgs, st.FirstSeq, st.LastSeq)
	}
	require.NoError(t, names.Err())
	require.Contains(t, out, wire.StreamIngest)
	s, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	var consumers []string
	cl := s.ConsumerNames(ctx)
	for n := range cl.Name() {
		consumers = append(consumers, n)
	}
	out["consumers of "+wire.StreamIngest] = strings.Join(consumers, ",")
	return out
}

// tenSessionState is what bob (or anyone) can see of a session: every version record and the head's
// conversation.
func tenSessionState(t *testing.T, c *checkpoint.Client, key checkpoint.Key) string {
	t.Helper()
	ctx := tenCtx(t)
	hist, err := c.History(ctx, key)
	require.NoError(t, err)
	conv, _, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	rec, err := json.Marshal(hist)
	require.NoError(t, err)
	return string(rec) + "\n" + wire.Hash(conv)
}

// startTenancy runs the fixture's deployment with a 64 KiB max_payload, so that tenBigConv is saved in
// chunks, and stores one session for alice and one for bob.
func startTenancy(t *testing.T) (tenancyFixture, *testenv.Tenancy) {
	t.Helper()
	f := newTenancyFixture(t)
	e := testenv.StartTenancy(t, f.tenants, 64<<10)
	seedTenancy(t, f, e)
	return f, e
}

var (
	tenAliceKey = checkpoint.Key{Namespace: "alice", Session: "diary", Agent: "main"}
	tenBobKey   = checkpoint.Key{Namespace: "bob", Session: "private", Agent: "main"}
)

func seedTenancy(t *testing.T, f tenancyFixture, e *testenv.Tenancy) {
	t.Helper()
	ctx := tenCtx(t)
	_, err := e.Client(asAlice()).Save(ctx, tenAliceKey, tenancyConv("alice-marker", 2))
	require.NoError(t, err)
	_, err = e.Client(f.asBob(t)).Save(ctx, tenBobKey, tenancyConv("bob-secret-marker", 3))
	require.NoError(t, err)
}

func TestTenancy_LoginsAreRequired(t *testing.T) {
	f, e := startTenancy(t)
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	for name, opts := range map[string][]nats.Option{
		"anonymous":               nil,
		"unknown user":            {nats.UserInfo("mallory", "x")},
		"wrong password":          {nats.UserInfo("alice", "alice-secret-PW")},
		"another user's password": {nats.UserInfo("alice", "alice-ci-secret-PW3")},
		"the daemon's user":       {nats.UserInfo(embedded.DaemonUser, "guess")},
		"unknown nkey":            {nkeyLogin(t, other)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.Conn(opts...)
			require.ErrorIs(t, err, nats.ErrAuthorization)
		})
	}
	t.Run("every listed login works", func(t *testing.T) {
		for _, o := range []nats.Option{asAlice(), asAliceCI(), f.asBob(t), asOps(), nkeyLogin(t, f.admKey)} {
			_, err := e.Conn(o)
			require.NoError(t, err)
		}
	})
}

// Everything a tenant does in its own namespace works through the SDK, chunked saves included.
func TestTenancy_TenantUsesItsNamespace(t *testing.T) {
	f, e := startTenancy(t)
	ctx := tenCtx(t)
	alice := e.Client(asAlice())
	ci := e.Client(asAliceCI()) // a second login of the same namespace sees the same sessions

	big := checkpoint.Key{Namespace: "alice", Session: "big"}
	v, err := alice.Save(ctx, big, tenBigConv("big-alice"))
	require.NoError(t, err, "chunked save")
	conv, _, err := ci.Restore(ctx, big, v.Version)
	require.NoError(t, err)
	require.Equal(t, wire.Hash(conv), v.Hash)

	// The save's result missed (a retry whose publish JetStream drops as a duplicate): the SDK
	// finds it stored on CP_RESULTS with a direct get, the only results call a tenant has.
	again, err := alice.Save(ctx, tenAliceKey, tenancyConv("alice-marker", 3), checkpoint.WithSaveID("retry-1"))
	require.NoError(t, err)
	other := e.Client(asAlice()) // remembers nothing: sends it whole again
	dup, err := other.Save(ctx, tenAliceKey, tenancyConv("alice-marker", 3), checkpoint.WithSaveID("retry-1"))
	require.NoError(t, err, "a retried save finds its stored result")
	require.Equal(t, again.Version, dup.Version)

	heads, err := ci.List(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, heads, 2)
	hist, err := alice.History(ctx, tenAliceKey)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	_, err = alice.Get(ctx, tenAliceKey, 1)
	require.NoError(t, err)

	// Merged view of two agents.
	planner := tenAliceKey
	planner.Agent = "planner"
	_, err = alice.Save(ctx, planner, tenancyConv("planner", 1))
	require.NoError(t, err)
	merged, versions, err := alice.RestoreMerged(ctx, "alice", tenAliceKey.Session, true)
	require.NoError(t, err)
	require.Len(t, versions, 2)
	require.Contains(t, string(merged), "[planner]")

	// Lease, pause and resume.
	l, err := alice.Acquire(ctx, tenAliceKey, checkpoint.WithOwner("worker-1"), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	_, err = l.Pause(ctx, tenancyConv("alice-marker", 4))
	require.NoError(t, err)
	_, _, l2, err := ci.Resume(ctx, tenAliceKey, checkpoint.WithOwner("worker-2"), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
	_, err = alice.LeaseStatus(ctx, tenAliceKey)
	require.NoError(t, err)

	// Fork, prune, delete, seal.
	fork := checkpoint.Key{Namespace: "alice", Session: "fork"}
	_, err = alice.Fork(ctx, tenAliceKey, 1, fork)
	require.NoError(t, err)
	_, err = alice.Prune(ctx, "alice", checkpoint.PruneOptions{Session: tenAliceKey.Session, KeepLast: 1})
	require.NoError(t, err)
	_, err = alice.Delete(ctx, fork, nil)
	require.NoError(t, err)

	// Export and import a bundle, and migrate to another deployment with her logins there.
	bundle := filepath.Join(t.TempDir(), "alice.cpbundle")
	out, err := os.Create(bundle)
	require.NoError(t, err)
	_, err = alice.Export(ctx, out, []checkpoint.Key{tenAliceKey, big}, checkpoint.ExportOptions{Source: "nats://alice:alice-secret-PW2@" + e.Cfg.Listen})
	require.NoError(t, err)
	require.NoError(t, out.Close())
	e2 := testenv.StartTenancy(t, f.tenants, 64<<10)
	sum, n, err := e2.Client(asAliceCI()).ImportBundle(ctx, bundle, checkpoint.ImportOptions{})
	require.NoError(t, err)
	require.Positive(t, n)
	require.Equal(t, "nats://"+e.Cfg.Listen, sum.Source, "a bundle never carries a password")
	moved := checkpoint.Key{Namespace: "alice", Session: "moving"}
	_, err = alice.Save(ctx, moved, tenancyConv("moving", 2))
	require.NoError(t, err)
	withPassword := "nats://alice:alice-secret-PW2@" + e2.Cfg.Listen
	_, err = alice.Migrate(ctx, e2.Client(asAlice()), moved, checkpoint.MigrateOptions{MovedTo: withPassword})
	require.NoError(t, err)
	heads, err = alice.List(ctx, "alice")
	require.NoError(t, err)
	var movedTo string
	for _, h := range heads {
		if h.Key == moved.WithDefaults() && h.Moved != nil {
			movedTo = h.Moved.To
		}
	}
	require.Equal(t, e2.URL(), movedTo, "the source records where it went, without the password")
	head, err := alice.Get(ctx, moved, 0)
	require.NoError(t, err)
	_, err = alice.Save(ctx, moved, tenancyConv("moving", 3))
	require.ErrorIs(t, err, checkpoint.ErrMoved, "migrate sealed the source (head %d)", head.Version)
	_, _, err = e2.Client(asAlice()).Restore(ctx, moved, 0)
	require.NoError(t, err)
}

// Every operation of the SDK, by a tenant on another tenant's namespace, is refused, and the other
// namespace is exactly as it was.
func TestTenancy_OtherNamespacesAreUnreachable(t *testing.T) {
	f, e := startTenancy(t)
	bobC := e.Client(f.asBob(t))
	// A bundle of bob's session, made by bob, for alice to try to import into bob's namespace.
	bundle := filepath.Join(t.TempDir(), "bob.cpbundle")
	out, err := os.Create(bundle)
	require.NoError(t, err)
	_, err = bobC.Export(tenCtx(t), out, []checkpoint.Key{tenBobKey}, checkpoint.ExportOptions{})
	require.NoError(t, err)
	require.NoError(t, out.Close())
	before, stateBefore := tenSessionState(t, bobC, tenBobKey), tenDaemonState(t, e.DaemonConn())

	alice := e.Client(asAlice())
	otherBob := checkpoint.Key{Namespace: "bob", Session: "new"}
	ops := map[string]func(ctx context.Context) error{
		"list":    func(ctx context.Context) error { _, err := alice.List(ctx, "bob"); return err },
		"list -A": func(ctx context.Context) error { _, err := alice.ListAll(ctx); return err },
		"history": func(ctx context.Context) error { _, err := alice.History(ctx, tenBobKey); return err },
		"get":     func(ctx context.Context) error { _, err := alice.Get(ctx, tenBobKey, 0); return err },
		"read":    func(ctx context.Context) error { _, _, err := alice.Restore(ctx, tenBobKey, 1); return err },
		"merged": func(ctx context.Context) error {
			_, _, err := alice.RestoreMerged(ctx, "bob", tenBobKey.Session, false)
			return err
		},
		"save":     func(ctx context.Context) error { _, err := alice.Save(ctx, tenBobKey, tenancyConv("x", 4)); return err },
		"new save": func(ctx context.Context) error { _, err := alice.Save(ctx, otherBob, tenancyConv("x", 1)); return err },
		"chunked save": func(ctx context.Context) error {
			_, err := alice.Save(ctx, otherBob, tenBigConv("x"))
			return err
		},
		"append": func(ctx context.Context) error { _, err := alice.Append(ctx, tenBobKey, 1, []byte(`[]`)); return err },
		"lease": func(ctx context.Context) error {
			_, err := alice.Acquire(ctx, tenBobKey, checkpoint.WithForce())
			return err
		},
		"lease status": func(ctx context.Context) error { _, err := alice.LeaseStatus(ctx, tenBobKey); return err },
		"fork from":    func(ctx context.Context) error { _, err := alice.Fork(ctx, tenBobKey, 1, tenAliceKey); return err },
		"fork into": func(ctx context.Context) error {
			_, err := alice.Fork(ctx, tenAliceKey, 1, otherBob)
			return err
		},
		"prune": func(ctx context.Context) error {
			_, err := alice.Prune(ctx, "bob", checkpoint.PruneOptions{KeepLast: 1})
			return err
		},
		"delete": func(ctx context.Context) error { _, err := alice.Delete(ctx, tenBobKey, nil); return err },
		"seal": func(ctx context.Context) error {
			_, err := alice.Seal(ctx, tenBobKey, 1, "nats://elsewhere")
			return err
		},
		"import": func(ctx context.Context) error {
			_, _, err := alice.ImportBundle(ctx, bundle, checkpoint.ImportOptions{})
			return err
		},
		"export": func(ctx context.Context) error {
			_, err := alice.Export(ctx, &bytes.Buffer{}, []checkpoint.Key{tenBobKey}, checkpoint.ExportOptions{})
			return err
		},
		"migrate": func(ctx context.Context) error {
			_, err := alice.Migrate(ctx, alice, tenBobKey, checkpoint.MigrateOptions{})
			return err
		},
	}
	// All at once: each waits for nobody to answer (a save retries for a few seconds, as it would
	// through a leader election).
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := op(ctx)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for name, err := range errs {
		t.Run(name, func(t *testing.T) {
			require.Error(t, err)
			require.True(t, errors.Is(err, checkpoint.ErrUnavailable) || errors.Is(err, checkpoint.ErrNotFound), "%v", err)
		})
	}
	require.Equal(t, before, tenSessionState(t, bobC, tenBobKey))
	require.Equal(t, stateBefore, tenDaemonState(t, e.DaemonConn()))
	_, err = bobC.Get(tenCtx(t), otherBob, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// deputyAttacks are requests to the daemon for alice's own data whose reply subject alice chose to
// aim at bob or at the daemon's storage: the confused-deputy attacks of issue 11.
func deputyAttacks(t *testing.T, alice *nats.Conn) {
	t.Helper()
	conv := tenancyConv("alice-marker", 2)
	// The reply is alice's conversation; aimed at bob's ingest subject it would be saved as bob's.
	read, _ := json.Marshal(wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: tenAliceKey.Session}, Version: 1})
	// A read past the end has an empty body: aimed at the JetStream API it would purge all or
	// delete the ingest consumer.
	empty, _ := json.Marshal(wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: tenAliceKey.Session}, Version: 1,
		Offset: int64(len(conv))})
	for _, a := range []struct{ reply, body string }{
		{wire.IngestSubject(tenBobKey), string(read)},
		{"cp.ingest.bob.stolen.main", string(read)},
		{"$JS.API.STREAM.PURGE." + edge.LogStream, string(empty)},
		{"$JS.API.STREAM.PURGE." + wire.StreamIngest, string(empty)},
		{"$JS.API.CONSUMER.DELETE." + wire.StreamIngest + ".checkpointd", string(empty)},
		{"$JS.API.STREAM.DELETE." + edge.LogStream, string(empty)},
		{"cp.result.bob.forged", string(read)},
	} {
		sub, err := alice.SubscribeSync(a.reply)
		require.NoError(t, err, a.reply)
		require.NoError(t, alice.PublishRequest(wire.APISubject("alice", wire.OpRead), a.reply, []byte(a.body)))
		// The daemon answered, and the answer came back to alice, on her own account's subject.
		m, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err, "the reply aimed at %s", a.reply)
		require.Equal(t, "", m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
		require.NoError(t, sub.Unsubscribe())
	}
	require.NoError(t, alice.Flush())
}

func TestTenancy_ConfusedDeputy(t *testing.T) {
	t.Run("with tenants the daemon answers only the requester", func(t *testing.T) {
		f, e := startTenancy(t)
		bobC := e.Client(f.asBob(t))
		before, stateBefore := tenSessionState(t, bobC, tenBobKey), tenDaemonState(t, e.DaemonConn())
		alice, err := e.Conn(asAlice())
		require.NoError(t, err)
		deputyAttacks(t, alice)
		time.Sleep(200 * time.Millisecond) // anything the daemon stored would be settled by now
		require.Equal(t, before, tenSessionState(t, bobC, tenBobKey))
		require.Equal(t, stateBefore, tenDaemonState(t, e.DaemonConn()))
		_, err = bobC.Get(tenCtx(t), checkpoint.Key{Namespace: "bob", Session: "stolen"}, 0)
		require.ErrorIs(t, err, checkpoint.ErrNotFound)
	})
	// The control: the same attacks on an open server (no --tenants) do the harm the issue
	// describes, so the test above would notice if tenancy stopped preventing it.
	t.Run("without tenants the attack is real", func(t *testing.T) {
		e := testenv.Start(t, func(c *transfer.Config) { c.Engine.NoPack = true })
		ctx := tenCtx(t)
		conv := tenancyConv("alice-marker", 2)
		_, err := e.Client.Save(ctx, tenAliceKey, conv)
		require.NoError(t, err)
		_, err = e.Client.Save(ctx, tenBobKey, tenancyConv("bob-secret-marker", 3))
		require.NoError(t, err)
		nc := e.Conn()
		// The daemon publishes alice's conversation on bob's ingest subject: a save bob never made
		// (refused today only for lack of a save id), answered in bob's namespace.
		results, err := nc.SubscribeSync("cp.result.bob.>")
		require.NoError(t, err)
		require.NoError(t, nc.PublishRequest(wire.APISubject("alice", wire.OpRead), "cp.ingest.bob.stolen.main",
			[]byte(`{"session":"diary","version":1}`)))
		// bob's own save above may still have its result in flight (a save request is answered
		// before its result is published): skip it, the refusal of the forged save is the one here.
		m, err := results.NextMsg(5 * time.Second)
		for err == nil && !strings.Contains(m.Subject, "cp.result.bob.seq.") {
			m, err = results.NextMsg(5 * time.Second)
		}
		require.NoError(t, err, "the daemon wrote into bob's namespace")
		// An empty reply aimed at the JetStream API purges every head of every namespace.
		require.NoError(t, nc.PublishRequest(wire.APISubject("alice", wire.OpRead), "$JS.API.STREAM.PURGE."+edge.LogStream,
			[]byte(`{"session":"diary","version":1,"offset":`+strconv.Itoa(len(conv))+`}`)))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := e.Client.Get(ctx, tenBobKey, 0)
			assert.ErrorIs(c, err, checkpoint.ErrNotFound)
		}, 10*time.Second, 50*time.Millisecond, "bob's head was purged")
	})
}

// A tenant listening to everything its account can see gets only its own traffic: nothing of bob's
// saves, restores or results, and no stream information.
func TestTenancy_NoEavesdropping(t *testing.T) {
	f, e := startTenancy(t)
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []*nats.Msg
	for _, subj := range []string{">", "_INBOX.>", "_R_.>", "$JS.>", "cp.>"} {
		_, err := alice.Subscribe(subj, func(m *nats.Msg) { mu.Lock(); seen = append(seen, m); mu.Unlock() })
		require.NoError(t, err)
	}
	require.NoError(t, alice.Flush())

	// bob works: whole and chunked saves, restores, a lease; his results travel meanwhile (on
	// cp.saved.bob.>, live, and cp.result.bob.>).
	bobC := e.Client(f.asBob(t))
	ctx := tenCtx(t)
	_, err = bobC.Save(ctx, tenBobKey, tenancyConv("bob-secret-marker", 4))
	require.NoError(t, err)
	big := checkpoint.Key{Namespace: "bob", Session: "big"}
	_, err = bobC.Save(ctx, big, tenBigConv("bob-secret-marker"))
	require.NoError(t, err)
	_, _, err = bobC.Restore(ctx, big, 0)
	require.NoError(t, err)
	_, _, err = bobC.Restore(ctx, tenBobKey, 0)
	require.NoError(t, err)
	// alice's own save shows that her subscriptions work.
	_, err = e.Client(asAlice()).Save(ctx, tenAliceKey, tenancyConv("alice-marker", 3))
	require.NoError(t, err)
	require.NoError(t, alice.Flush())
	time.Sleep(100 * time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	ownResult := false
	for _, m := range seen {
		require.NotContains(t, string(m.Data), "bob-secret-marker", "alice received %s", m.Subject)
		require.NotContains(t, m.Subject, ".bob.", "alice received %s", m.Subject)
		// Saves sent as requests announce their results on cp.saved, not stored (§4.3).
		ownResult = ownResult || strings.HasPrefix(m.Subject, "cp.saved.alice.")
	}
	require.True(t, ownResult, "alice's own result reached her on cp.saved.alice.>")
}

// A tenant has no JetStream API at all: not the daemon's streams, not stream info, not purges or
// deletions, not the service's statistics; only direct gets of her own results, which refuse
// requests that would widen them.
func TestTenancy_NoJetStreamAPI(t *testing.T) {
	f, e := startTenancy(t)
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	ops, err := e.Conn(asOps())
	require.NoError(t, err)
	bobC := e.Client(f.asBob(t))
	bobSaveID := "bob-save-1"
	_, err = bobC.Save(tenCtx(t), tenBobKey, tenancyConv("bob-secret-marker", 4), checkpoint.WithSaveID(bobSaveID))
	require.NoError(t, err)
	// CP_RESULTS is made by the first result stored (a save off the ingest stream): until then
	// nobody answers a direct get of a result at all.
	aliceJS, err := jetstream.New(alice)
	require.NoError(t, err)
	publishRaw(t, aliceJS, wire.IngestSubject(tenAliceKey), nats.Header{wire.HdrSaveID: {"off-the-stream"}}, string(tenancyConv("alice-marker", 1)))
	require.Eventually(t, func() bool {
		m, err := alice.Request(wire.ResultDirectGetPrefix+wire.ResultSubject("alice", "off-the-stream"), nil, time.Second)
		return err == nil && m.Header.Get("Status") == "" && len(m.Data) > 0
	}, 10*time.Second, 20*time.Millisecond, "the save's result is stored")
	before, stateBefore := tenSessionState(t, bobC, tenBobKey), tenDaemonState(t, e.DaemonConn())

	noResponders := []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.LIST",
		"$JS.API.STREAM.NAMES",
		"$JS.API.STREAM.INFO." + wire.StreamResults,
		"$JS.API.STREAM.INFO." + wire.StreamIngest,
		"$JS.API.STREAM.PURGE." + wire.StreamIngest,
		"$JS.API.STREAM.PURGE." + edge.LogStream,
		"$JS.API.STREAM.DELETE." + wire.StreamResults,
		"$JS.API.STREAM.MSG.GET." + wire.StreamResults,
		"$JS.API.STREAM.MSG.DELETE." + edge.LogStream,
		"$JS.API.CONSUMER.DELETE." + wire.StreamIngest + ".checkpointd",
		"$JS.API.CONSUMER.CREATE." + wire.StreamResults,
		"$JS.API.CONSUMER.LIST." + wire.StreamIngest,
		"$JS.API.DIRECT.GET." + edge.LogStream,
		"$JS.API.DIRECT.GET." + edge.LogStream + "." + "cp.log." + wire.EncodeID(tenBobKey.Namespace) + "." + wire.EncodeID(tenBobKey.Session) + "." + wire.EncodeID(tenBobKey.Agent),
		"$JS.API.DIRECT.GET." + wire.StreamResults,
		wire.ResultDirectGetPrefix + wire.ResultSubject("bob", bobSaveID),
		"cp.log." + wire.EncodeID(tenBobKey.Namespace) + "." + wire.EncodeID(tenBobKey.Session) + "." + wire.EncodeID(tenBobKey.Agent),
		"$SRV.PING", "$SRV.INFO", "$SRV.STATS." + wire.ServiceName,
		wire.AdminListSubject,
	}
	for _, who := range []struct {
		name string
		nc   *nats.Conn
	}{{"tenant", alice}, {"admin", ops}} {
		for _, subj := range noResponders {
			if who.name == "admin" && (subj == wire.AdminListSubject || strings.HasPrefix(subj, wire.ResultDirectGetPrefix+"cp.")) {
				continue // the admin's own grants
			}
			t.Run(who.name+"/"+subj, func(t *testing.T) {
				requireNoJetStream(t, who.nc, subj)
			})
		}
	}

	t.Run("a direct get of bob's result in another form", func(t *testing.T) {
		_, err := alice.Request("$JS.API.DIRECT.GET."+wire.StreamResults, []byte(`{"last_by_subj":"`+wire.ResultSubject("bob", bobSaveID)+`"}`), 2*time.Second)
		require.ErrorIs(t, err, nats.ErrNoResponders)
	})

	t.Run("direct get of her own results cannot be widened", func(t *testing.T) {
		subj := wire.ResultDirectGetPrefix + wire.ResultSubject("alice", "any")
		for _, body := range []string{`{"seq":1}`, `{"multi_last":["cp.result.>"]}`, `{"last_by_subj":"cp.result.bob.bob-save-1"}`,
			`{"next_by_subj":"cp.result.>","seq":1}`, `{"batch":10,"seq":1}`, `{"start_time":"2000-01-01T00:00:00Z"}`} {
			m, err := alice.Request(subj, []byte(body), 2*time.Second)
			require.NoError(t, err)
			require.Equal(t, "408", m.Header.Get("Status"), "%s: %s", body, m.Data)
			require.Empty(t, m.Data)
		}
	})

	t.Run("JetStream headers that would change the ingest stream are refused", func(t *testing.T) {
		js, err := jetstream.New(alice)
		require.NoError(t, err)
		for _, h := range []nats.Header{{"Nats-Rollup": {"all"}}, {"Nats-Rollup": {"sub"}}, {"Nats-TTL": {"1s"}},
			{"Nats-Schedule": {"@at 2000-01-01T00:00:00Z"}}, {"Nats-Batch-Id": {"b"}, "Nats-Batch-Sequence": {"1"}}} {
			m := &nats.Msg{Subject: wire.IngestSubject(tenAliceKey), Header: h, Data: []byte("[]")}
			_, err := js.PublishMsg(tenCtx(t), m)
			require.Error(t, err, "%v", h)
		}
	})

	t.Run("forged results reach nobody", func(t *testing.T) {
		bobNC, err := e.Conn(f.asBob(t))
		require.NoError(t, err)
		sub, err := bobNC.SubscribeSync("cp.result.bob.>")
		require.NoError(t, err)
		require.NoError(t, bobNC.Flush())
		for _, subj := range []string{"cp.result.bob.x", "cp.result.alice.x", wire.ResultSubject("bob", bobSaveID)} {
			require.NoError(t, alice.Publish(subj, []byte(`{"ok":true}`)))
		}
		require.NoError(t, alice.Flush())
		_, err = sub.NextMsg(200 * time.Millisecond)
		require.ErrorIs(t, err, nats.ErrTimeout)
	})

	require.Equal(t, before, tenSessionState(t, bobC, tenBobKey))
	require.Equal(t, stateBefore, tenDaemonState(t, e.DaemonConn()))
}

// requireNoJetStream sends a request on subj that, were the account's JetStream API the daemon's,
// would act on its streams (a consumer config for the create), and requires that nobody answers
// or that the server says the account has no JetStream.
func requireNoJetStream(t *testing.T, nc *nats.Conn, subj string) {
	t.Helper()
	body := []byte(`{"stream_name":"CP_RESULTS","config":{"deliver_subject":"spy","filter_subject":"cp.result.>"}}`)
	m, err := nc.Request(subj, body, 2*time.Second)
	if errors.Is(err, nats.ErrNoResponders) {
		return
	}
	require.NoError(t, err)
	var rep struct {
		Error *struct {
			ErrCode int `json:"err_code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &rep), "%s", m.Data)
	require.NotNil(t, rep.Error, "%s answered: %s", subj, m.Data)
	require.Equal(t, 10039, rep.Error.ErrCode, "want JetStream not enabled for account: %s", m.Data)
}

// Admins reach every namespace through the daemon, and nothing more.
func TestTenancy_AdminsReachEveryNamespace(t *testing.T) {
	f, e := startTenancy(t)
	ctx := tenCtx(t)
	for name, login := range map[string]nats.Option{"password": asOps(), "nkey": nkeyLogin(t, f.admKey)} {
		t.Run(name, func(t *testing.T) {
			ops := e.Client(login)
			all, err := ops.ListAll(ctx)
			require.NoError(t, err)
			var keys []string
			for _, s := range all {
				keys = append(keys, s.Key.Namespace+"/"+s.Key.Session)
			}
			require.Subset(t, keys, []string{"alice/diary", "bob/private"})
			conv, _, err := ops.Restore(ctx, tenBobKey, 0)
			require.NoError(t, err)
			require.Contains(t, string(conv), "bob-secret-marker")
			_, err = ops.Prune(ctx, "bob", checkpoint.PruneOptions{KeepLast: 5, DryRun: true})
			require.NoError(t, err)
			// An operator's save, and its result.
			_, err = ops.Save(ctx, checkpoint.Key{Namespace: "carol", Session: "s-" + name}, tenancyConv("carol", 1))
			require.NoError(t, err)
		})
	}
}

// SIGHUP's work: a reload adds and removes logins without a restart; connections whose login is
// gone are closed; the daemon and its streams carry on.
func TestTenancy_Reload(t *testing.T) {
	f, e := startTenancy(t)
	ctx := tenCtx(t)
	stateBefore := tenDaemonState(t, e.DaemonConn())
	_, err := e.Conn(nats.UserInfo("carol", "carol-secret-PW4"))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	ci, err := e.Conn(asAliceCI())
	require.NoError(t, err)
	closed := make(chan struct{})
	ci.SetClosedHandler(func(*nats.Conn) { close(closed) })

	changed := *f.tenants
	changed.Tenants = []embedded.Tenant{f.tenants.Tenants[0], f.tenants.Tenants[2], // alice-ci removed
		{Namespace: "carol", Login: embedded.Login{User: "carol", Password: "carol-secret-PW4"}}}
	require.NoError(t, e.Reload(&changed))

	carolNC, err := e.Conn(nats.UserInfo("carol", "carol-secret-PW4"))
	require.NoError(t, err)
	live, err := carolNC.SubscribeSync("cp.saved.carol.>") // her results reach her as they happen (§4.3)
	require.NoError(t, err)
	carol, err := checkpoint.New(carolNC)
	require.NoError(t, err)
	carolKey := checkpoint.Key{Namespace: "carol", Session: "s"}
	_, err = carol.Save(ctx, carolKey, tenancyConv("carol", 1))
	require.NoError(t, err)
	_, err = live.NextMsg(time.Second)
	require.NoError(t, err)
	_, err = carol.List(ctx, "alice")
	require.ErrorIs(t, err, checkpoint.ErrUnavailable, "carol reaches only carol")
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the removed login's connection is still open")
	}
	_, err = e.Conn(asAliceCI())
	require.ErrorIs(t, err, nats.ErrAuthorization)
	_, _, err = e.Client(asAlice()).Restore(ctx, tenAliceKey, 0)
	require.NoError(t, err, "the logins that stayed keep working")
	_, _, err = e.Client(f.asBob(t)).Restore(ctx, tenBobKey, 0)
	require.NoError(t, err)
	after := tenDaemonState(t, e.DaemonConn())
	for _, s := range []string{wire.StreamIngest, "consumers of " + wire.StreamIngest, edge.LogStream} {
		require.NotEmpty(t, after[s])
	}
	require.Equal(t, stateBefore["consumers of "+wire.StreamIngest], after["consumers of "+wire.StreamIngest])
}

// What --print-nats-config prints, loaded by a nats-server from a file as an operator of an external
// cluster would, with checkpointd connecting to it by URL: the same isolation.
func TestTenancy_PrintedConfigIsolatesAnExternalServer(t *testing.T) {
	f := newTenancyFixture(t)
	listen := testenv.FreeAddr(t)
	password, err := embedded.NewDaemonPassword()
	require.NoError(t, err)
	t.Setenv(embedded.DaemonPasswordVar, password)
	conf := fmt.Sprintf("listen: %q\nmax_payload: 65536\njetstream {store_dir: %q}\n\n%s", listen, t.TempDir(),
		f.tenants.NATSConfig(""))
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	e := testenv.StartTenancyFromConfig(t, path, listen, password)
	seedTenancy(t, f, e)

	_, err = e.Conn()
	require.ErrorIs(t, err, nats.ErrAuthorization, "anonymous")
	bobC := e.Client(f.asBob(t))
	before, stateBefore := tenSessionState(t, bobC, tenBobKey), tenDaemonState(t, e.DaemonConn())
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	deputyAttacks(t, alice)
	for _, subj := range []string{"$JS.API.STREAM.INFO." + wire.StreamResults, "$JS.API.STREAM.PURGE." + wire.StreamIngest,
		"$JS.API.CONSUMER.DELETE." + wire.StreamIngest + ".checkpointd", wire.APISubject("bob", wire.OpList), wire.AdminListSubject} {
		requireNoJetStream(t, alice, subj)
	}
	aliceC := e.Client(asAlice())
	_, err = aliceC.Save(tenCtx(t), tenBobKey, tenancyConv("x", 1))
	require.ErrorIs(t, err, checkpoint.ErrUnavailable)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, before, tenSessionState(t, bobC, tenBobKey))
	require.Equal(t, stateBefore, tenDaemonState(t, e.DaemonConn()))
	_, err = aliceC.Save(tenCtx(t), checkpoint.Key{Namespace: "alice", Session: "big"}, tenBigConv("x"))
	require.NoError(t, err, "chunked save through the imports")
	all, err := e.Client(asOps()).ListAll(tenCtx(t))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(all), 3)
}

// Printed or logged by mistake, a tenants file shows no password.
func TestTenants_PrintShowsNoPassword(t *testing.T) {
	f := newTenancyFixture(t)
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("t", "tenants", f.tenants, "one", f.tenants.Tenants[0], "admin", f.tenants.Admins[0])
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("t", "tenants", f.tenants)
	out := fmt.Sprintf("%v %+v %#v %s", f.tenants, f.tenants, f.tenants.Tenants, f.tenants.Admins) + logs.String()
	require.Contains(t, out, "alice-ci")
	for _, pw := range []string{"ops-secret-PW1", "alice-secret-PW2", "alice-ci-secret-PW3"} {
		require.NotContains(t, out, pw)
	}
}

// Passwords and namespaces may hold anything (quotes, braces, $, newlines, any byte); the printed
// configuration carries them exactly, and logins with them work.
func TestTenants_ConfigQuotesAnything(t *testing.T) {
	weird := []string{`pa"ss`, `back\slash`, "new\nline\ttab", "$VAR", "{braces} [x] #c //c", "ünï €", "'single'", "\x01\x7f"}
	tn := &embedded.Tenants{}
	for i, pw := range weird {
		tn.Tenants = append(tn.Tenants, embedded.Tenant{Namespace: "ns " + pw + strconv.Itoa(i), Login: embedded.Login{User: "u" + strconv.Itoa(i) + `"x`, Password: embedded.Secret(pw)}})
	}
	e := testenv.StartTenancy(t, tn, 0)
	for i, pw := range weird {
		c := e.Client(nats.UserInfo("u"+strconv.Itoa(i)+`"x`, pw))
		_, err := c.Save(tenCtx(t), checkpoint.Key{Namespace: tn.Tenants[i].Namespace, Session: "s"}, tenancyConv("w", 1))
		require.NoError(t, err, "password %q", pw)
		_, err = e.Conn(nats.UserInfo("u"+strconv.Itoa(i)+`"x`, pw+"x"))
		require.ErrorIs(t, err, nats.ErrAuthorization)
	}
}

// A data directory keeps its checkpoints in one NATS account: started the other way, the server
// refuses rather than come up empty.
func TestStartServer_RefusesAStoreOfTheOtherAccount(t *testing.T) {
	e := testenv.Start(t)
	_, err := e.Client.Save(tenCtx(t), tenAliceKey, tenancyConv("a", 1))
	require.NoError(t, err)
	e.Stop()
	f := newTenancyFixture(t)
	_, err = embedded.StartServer(embedded.ServerConfig{DataDir: e.Dir, Listen: testenv.FreeAddr(t), Tenants: f.tenants, DaemonPassword: "pw"})
	var me *embedded.StoreAccountMismatchError
	require.ErrorAs(t, err, &me)
	require.Contains(t, err.Error(), "stored without --tenants")

	cfg := embedded.ServerConfig{DataDir: t.TempDir(), Listen: testenv.FreeAddr(t), Tenants: f.tenants, DaemonPassword: "pw"}
	s, err := embedded.StartServer(cfg)
	require.NoError(t, err)
	nc, err := nats.Connect("nats://"+cfg.Listen, nats.UserInfo(embedded.DaemonUser, "pw"))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(tenCtx(t), jetstream.StreamConfig{Name: wire.StreamIngest, Subjects: []string{"cp.ingest.>"}})
	require.NoError(t, err)
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	_, err = embedded.StartServer(embedded.ServerConfig{DataDir: cfg.DataDir, Listen: testenv.FreeAddr(t)})
	require.ErrorAs(t, err, &me)
	require.Contains(t, err.Error(), "stored with --tenants")
}

// JetStream drops repeats of a message id across every namespace of a stream. A tenant that
// publishes, in its own namespace, saves and chunks carrying the message ids another tenant's save
// would use (guessable when save ids are, like "turn-8") must not get that save dropped: the SDK's
// message ids have a random part, and the daemon recognises repeats of a save id itself.
func TestTenancy_GuessedMessageIDsDropNothing(t *testing.T) {
	f, e := startTenancy(t)
	ctx := tenCtx(t)
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	js, err := jetstream.New(alice)
	require.NoError(t, err)
	aliceKey := wire.Key{Namespace: "alice", Session: "squat", Agent: "main"}
	for _, id := range []string{"turn-8", "turn-9"} {
		m := nats.NewMsg(wire.IngestSubject(aliceKey))
		m.Header.Set(wire.HdrSaveID, id)
		m.Data = []byte(`[{"role":"user","content":"squatting"}]`)
		_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		require.NoError(t, err)
		for i := 0; i < 4; i++ { // the chunk ids the SDK used to send: <save id>.<i>
			c := nats.NewMsg(wire.ChunkSubject("alice", id))
			c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
			c.Data = []byte("x")
			_, err := js.PublishMsg(ctx, c, jetstream.WithMsgID(id+"."+strconv.Itoa(i)))
			require.NoError(t, err)
		}
	}
	bob := e.Client(f.asBob(t))
	v, err := bob.Save(ctx, tenBobKey, tenancyConv("bob-secret-marker", 4), checkpoint.WithSaveID("turn-8"))
	require.NoError(t, err, "bob's save is not dropped as a repeat of alice's message")
	require.Equal(t, uint64(2), v.Version)
	v, err = bob.Save(ctx, tenBobKey, tenBigConv("bob-secret-marker"), checkpoint.WithSaveID("turn-9"))
	require.NoError(t, err, "nor are the chunks of his large save")
	require.Equal(t, uint64(3), v.Version)
	got, _, err := bob.Restore(ctx, tenBobKey, 3)
	require.NoError(t, err)
	require.Equal(t, string(tenBigConv("bob-secret-marker")), string(got))
}

// Saves sent as requests (docs/protocol.md §4.0), raw: a tenant's request into another namespace
// finds nobody (its account has no such subject); a request into her own namespace whose reply
// subject she aimed at another namespace or at the JetStream API is answered in her own account
// only. Bob's session, and the daemon's streams and consumer, are as before.
func TestTenancy_SaveRequests(t *testing.T) {
	f, e := startTenancy(t)
	bobC := e.Client(f.asBob(t))
	before := tenSessionState(t, bobC, tenBobKey)
	alice, err := e.Conn(asAlice())
	require.NoError(t, err)
	save := func(subject, reply, saveID string) {
		m := nats.NewMsg(subject)
		m.Reply = reply
		m.Header.Set(wire.HdrSaveID, saveID)
		m.Data = tenancyConv("alice-marker", 2)
		require.NoError(t, alice.PublishMsg(m))
	}

	stolen := checkpoint.Key{Namespace: "bob", Session: "stolen", Agent: "main"}
	m := nats.NewMsg(wire.SaveSubject(stolen))
	m.Header.Set(wire.HdrSaveID, "into-bob")
	m.Data = tenancyConv("alice-marker", 1)
	_, err = alice.RequestMsg(m, 5*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders, "another namespace's save subject does not exist for alice")
	m.Subject = wire.SaveSubject(tenBobKey)
	_, err = alice.RequestMsg(m, 5*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders)

	for i, reply := range []string{
		wire.SaveSubject(stolen),
		wire.IngestSubject(stolen),
		"cp.result.bob.forged",
		"$JS.API.STREAM.PURGE.KV_" + wire.BucketHeads,
		"$JS.API.STREAM.PURGE." + wire.StreamIngest,
		"$JS.API.CONSUMER.DELETE." + wire.StreamIngest + ".checkpointd",
		"$JS.API.STREAM.DELETE.KV_" + wire.BucketVersion,
	} {
		sub, err := alice.SubscribeSync(reply)
		require.NoError(t, err, reply)
		save(wire.SaveSubject(tenAliceKey), reply, fmt.Sprintf("deputy-%d", i))
		// The daemon answered, with her save's result, on her own account's subject.
		got, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err, "the reply aimed at %s", reply)
		var res wire.SaveResult
		require.NoError(t, json.Unmarshal(got.Data, &res))
		require.True(t, res.OK, "%+v", res.Error)
		require.Equal(t, tenAliceKey, res.Key)
		require.NoError(t, sub.Unsubscribe())
	}
	time.Sleep(200 * time.Millisecond) // anything the daemon stored would be settled by now
	require.Equal(t, before, tenSessionState(t, bobC, tenBobKey))
	_, err = bobC.Get(tenCtx(t), stolen, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	state := tenDaemonState(t, e.DaemonConn())
	require.Equal(t, "checkpointd", state["consumers of "+wire.StreamIngest], "the ingest consumer is still there")
	_, err = e.Client(asAlice()).Get(tenCtx(t), tenAliceKey, 0)
	require.NoError(t, err, "the heads were not purged")

	// The control: on an open server the daemon publishes the reply wherever it is aimed, here on
	// bob's ingest subject, where JetStream stores it as a save in bob's namespace (refused only
	// for lack of a save id), as protocol.md §3 says of any request. So the test above would
	// notice if tenancy stopped preventing it.
	open := testenv.Start(t)
	nc := open.Conn()
	results, err := nc.SubscribeSync("cp.result.bob.>")
	require.NoError(t, err)
	m = nats.NewMsg(wire.SaveSubject(tenAliceKey))
	m.Reply = wire.IngestSubject(stolen)
	m.Header.Set(wire.HdrSaveID, "open-deputy")
	m.Data = tenancyConv("alice-marker", 2)
	require.NoError(t, nc.PublishMsg(m))
	got, err := results.NextMsg(5 * time.Second)
	require.NoError(t, err, "the daemon wrote into bob's namespace")
	require.Contains(t, got.Subject, "cp.result.bob.seq.")
}
