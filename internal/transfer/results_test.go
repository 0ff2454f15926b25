package transfer_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Issue 10, item 5: the daemon decides nothing from data a client could have written, answers
// every save JetStream acknowledged on a subject the publisher can derive, and the SDK believes a
// result only if it is the outcome of what it sent.

// publishRaw publishes a save as any NATS client could, and returns its CP_INGEST stream sequence.
func publishRaw(t *testing.T, js jetstream.JetStream, subject string, hdr nats.Header, body string) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range hdr {
		m.Header[k] = v
	}
	m.Data = []byte(body)
	ack, err := js.PublishMsg(ctxT(t), m)
	require.NoError(t, err)
	return ack.Sequence
}

// storeFirstResult has the daemon store a result, as the first save off the ingest stream of a
// deployment does: that makes CP_RESULTS, which no file of the data directory holds before.
func storeFirstResult(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := wire.Key{Session: "first result"}.WithDefaults()
	m := nats.NewMsg(wire.IngestSubject(key))
	m.Header.Set(wire.HdrSaveID, "first-result")
	m.Data = []byte(`[{"role":"user","content":"hi"}]`)
	_, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := js.Stream(ctx, wire.StreamResults)
		if err != nil {
			return false
		}
		_, err = s.GetLastMsgForSubject(ctx, wire.ResultSubject(key.Namespace, "first-result"))
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "no result stored for a save off the ingest stream")
}

// awaitStoredResult reads the stored result on subject, waiting for the daemon to publish one.
func awaitStoredResult(t *testing.T, js jetstream.JetStream, subject string) wire.SaveResult {
	t.Helper()
	return awaitStoredResultAfter(t, js, subject, 0)
}

// awaitStoredResultAfter is awaitStoredResult for a result stored after stream sequence after.
func awaitStoredResultAfter(t *testing.T, js jetstream.JetStream, subject string, after uint64) wire.SaveResult {
	t.Helper()
	ctx := ctxT(t)
	var res wire.SaveResult
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		results, err := js.Stream(ctx, wire.StreamResults) // made by the first result stored
		if !noErr(c, err) {
			return
		}
		m, err := results.GetLastMsgForSubject(ctx, subject)
		if !noErr(c, err) {
			return
		}
		if m.Sequence <= after {
			c.Errorf("only the result at sequence %d so far", m.Sequence)
			return
		}
		noErr(c, json.Unmarshal(m.Data, &res))
	}, 10*time.Second, 20*time.Millisecond, "no result on %s", subject)
	return res
}

func TestResults_ForgedResultIsNotBelieved(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	key := wire.Key{Session: "victim"}.WithDefaults()

	// A hostile client publishes "ok, version 42" for a save id before the real save is made,
	// once CP_RESULTS exists (made by the first result the daemon stores).
	storeFirstResult(t, js)
	forged, _ := json.Marshal(wire.SaveResult{SaveID: "turn-7", Key: key, OK: true,
		Version: &wire.Version{Key: key, Version: 42, SaveID: "turn-7"}})
	ack, err := js.Publish(ctx, wire.ResultSubject(key.Namespace, "turn-7"), forged)
	require.NoError(t, err)

	conv := `[{"role":"user","content":"the real save"}]`
	publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"turn-7"}}, conv)
	res := awaitStoredResultAfter(t, js, wire.ResultSubject(key.Namespace, "turn-7"), ack.Sequence)
	require.Nil(t, res.Error)
	require.False(t, res.Duplicate, "the forged result decided nothing")
	require.Equal(t, uint64(1), res.Version.Version)
	require.Equal(t, wire.Hash([]byte(conv)), res.Received)

	got, v, err := env.Client.Restore(ctx, checkpoint.Key{Session: "victim"}, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	require.Equal(t, conv, string(got), "the save was stored")

	// The same save id again is the duplicate of what storage says it made.
	publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"turn-7"}}, conv)
	require.Eventually(t, func() bool {
		return awaitStoredResult(t, js, wire.ResultSubject(key.Namespace, "turn-7")).Duplicate
	}, 10*time.Second, 20*time.Millisecond)
}

func TestResults_EverySaveIsAnsweredWhereThePublisherLooks(t *testing.T) {
	env := testenv.Start(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	key := wire.Key{Session: "s"}.WithDefaults()
	body := `[{"role":"user","content":"hi"}]`

	cases := []struct {
		name    string
		subject string
		hdr     nats.Header
		nsToken string
		want    string // in the refusal's message
	}{
		{"no save id", wire.IngestSubject(key), nil, "default", "Cp-Save-Id: missing"},
		{"save id not UTF-8", wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"\xff\xfe"}}, "default", "not valid UTF-8"},
		{"save id too long", wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {strings.Repeat("x", wire.MaxIDBytes+1)}}, "default", "the limit is"},
		{"subject without session", "cp.ingest.team", nats.Header{wire.HdrSaveID: {"a"}}, "team", "is not cp.ingest.<namespace>.<session>.<agent>"},
		{"subject with bad escapes", "cp.ingest.=zz.s.main", nats.Header{wire.HdrSaveID: {"a"}}, "=zz", "is not cp.ingest"},
		{"subject with too many tokens", "cp.ingest.default.s.main.extra", nats.Header{wire.HdrSaveID: {"a"}}, "default", "is not cp.ingest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seq := publishRaw(t, js, tc.subject, tc.hdr, body)
			res := awaitStoredResult(t, js, wire.UnattributedResultSubject(tc.nsToken, seq))
			require.NotNil(t, res.Error, "refused")
			require.Equal(t, wire.CodeBadRequest, res.Error.Code)
			require.Contains(t, res.Error.Message, tc.want)
			require.Equal(t, seq, res.Seq)
		})
	}
	// None of them became a version, and the queue is empty: each was answered once and removed.
	_, err = env.Client.Get(ctxT(t), checkpoint.Key{Session: "s"}, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	ingest, err := js.Stream(ctxT(t), wire.StreamIngest)
	require.NoError(t, err)
	info, err := ingest.Info(ctxT(t))
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs)
}

// The daemon used to name a save without an id "seq-<stream sequence>"; a client whose own id was
// that string then had its save dropped as a duplicate of a stranger's.
func TestResults_ClientIDsNeverCollideWithTheDaemons(t *testing.T) {
	env := testenv.Start(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	key := wire.Key{Session: "s"}.WithDefaults()
	seq := publishRaw(t, js, wire.IngestSubject(key), nil, `[{"role":"user","content":"anonymous"}]`)
	ingest, err := js.Stream(ctxT(t), wire.StreamIngest)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // settled, whatever the outcome
		info, err := ingest.Info(ctxT(t))
		return err == nil && info.State.Msgs == 0
	}, 10*time.Second, 10*time.Millisecond)

	for _, id := range []string{"seq-" + itoa(seq), "seq." + itoa(seq)} {
		conv := `[{"role":"user","content":"mine: ` + id + `"}]`
		publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {id}}, conv)
		res := awaitStoredResult(t, js, wire.ResultSubject("default", id))
		require.Nil(t, res.Error, id)
		require.False(t, res.Duplicate, id)
		got, _, err := env.Client.Restore(ctxT(t), checkpoint.Key{Session: "s"}, res.Version.Version)
		require.NoError(t, err)
		require.Equal(t, conv, string(got))
	}
}

// The SDK never reports success for a result that is not the outcome of what it sent. No daemon
// runs here: the only results are the forger's, so a version they name cannot be confirmed
// (unavailable) and a result for another save is corrupt. checkpoint's TestCheckResult covers the
// confirmation with a daemon.
func TestResults_SDKChecksWhatTheDaemonRead(t *testing.T) {
	env := testenv.Start(t)
	env.StopDaemon()
	ctx := ctxT(t)
	key := wire.Key{Session: "checked"}.WithDefaults()
	conv := []byte(`[{"role":"user","content":"hello"}]`)

	nc := env.Conn()
	// The forger answers the save request (docs/protocol.md §4.0: without accounts anyone may
	// answer on cp.save), or, with nobody answering requests, publishes on the result subject once
	// the save reached the ingest stream.
	forge := func(t *testing.T, path string, res func(saveID string) wire.SaveResult) {
		subject := "cp.ingest.>"
		if path == "request" {
			subject = wire.SaveSubjectPrefix + ">"
		}
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			id := m.Header.Get(wire.HdrSaveID)
			data, _ := json.Marshal(res(id))
			if path == "request" {
				_ = m.Respond(data)
			} else {
				_ = nc.Publish(wire.ResultSubject(key.Namespace, id), data)
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		require.NoError(t, nc.Flush())
	}
	version := &wire.Version{Key: key, Version: 1, Hash: wire.Hash(conv)}
	cases := []struct {
		name string
		res  func(saveID string) wire.SaveResult
		want error
	}{
		{"other bytes", func(id string) wire.SaveResult {
			return wire.SaveResult{SaveID: id, Key: key, OK: true, Version: version, Received: wire.Hash([]byte("[]"))}
		}, checkpoint.ErrUnavailable},
		{"says nothing of what was read", func(id string) wire.SaveResult {
			return wire.SaveResult{SaveID: id, Key: key, OK: true, Version: version}
		}, checkpoint.ErrUnavailable},
		{"another save", func(id string) wire.SaveResult {
			return wire.SaveResult{SaveID: id + "x", Key: key, OK: true, Version: version, Received: wire.Hash(conv)}
		}, checkpoint.ErrCorrupt},
	}
	for _, path := range []string{"request", "ingest"} {
		for _, tc := range cases {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				forge(t, path, tc.res)
				c, err := checkpoint.Connect(env.URL(), nil, checkpoint.WithTimeout(2*time.Second))
				require.NoError(t, err)
				defer c.Close()
				_, err = c.Save(ctx, checkpoint.Key{Session: "checked"}, conv)
				require.ErrorIs(t, err, tc.want)
			})
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func noErr(c *assert.CollectT, err error) bool {
	if err != nil {
		c.Errorf("%v", err)
		return false
	}
	return true
}

// A save delivered again after later versions were committed, whose result a crashed server lost,
// is still the duplicate of the version it made: the crash harness saw it stored a second time
// (seed 20261: "w0-whole-12.16" became versions 17 and 32).
func TestResults_RedeliveryAfterLaterVersionsIsADuplicate(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	key := wire.Key{Session: "redelivered"}.WithDefaults()
	conv := func(n int) string {
		s := `[`
		for i := 1; i <= n; i++ {
			if i > 1 {
				s += ","
			}
			s += `{"role":"user","content":"turn ` + strconv.Itoa(i) + `"}`
		}
		return s + `]`
	}
	save := func(id string, n int) {
		publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {id}, wire.HdrMsgID: {id + "/" + strconv.Itoa(n)}}, conv(n))
		res := awaitStoredResult(t, js, wire.ResultSubject(key.Namespace, id))
		require.Nil(t, res.Error)
	}
	save("turn-1", 1)
	for n := 2; n <= 20; n++ {
		save("turn-"+strconv.Itoa(n), n)
	}
	results, err := js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)
	require.NoError(t, results.Purge(ctx, jetstream.WithPurgeSubject(wire.ResultSubject(key.Namespace, "turn-1"))), "the crash lost the result")

	// Delivered again: as when the writer retried while no daemon ran, under another message id.
	publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"turn-1"}, wire.HdrMsgID: {"retry"}}, conv(1))
	res := awaitStoredResult(t, js, wire.ResultSubject(key.Namespace, "turn-1"))
	require.Nil(t, res.Error)
	require.True(t, res.Duplicate)
	require.Equal(t, uint64(1), res.Version.Version)
	v, err := env.Client.Get(ctx, checkpoint.Key{Session: "redelivered"}, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(20), v.Version, "no version was added")
}

// Pieces of a chunked save sent again (a retry that resent them from the first, under new message
// ids) are read once each, in order.
func TestChunks_RepeatedPiecesAreReadOnce(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	key := wire.Key{Session: "pieces"}.WithDefaults()
	conv := `[{"role":"user","content":"one piece, then another, then the last"}]`
	pieces := []string{conv[:20], conv[20:40], conv[40:]}
	for _, i := range []int{0, 1, 0, 1, 2, 2} {
		c := nats.NewMsg(wire.ChunkSubject(key.Namespace, "resent"))
		c.Header.Set(wire.HdrChunk, strconv.Itoa(i))
		c.Data = []byte(pieces[i])
		_, err := js.PublishMsg(ctx, c)
		require.NoError(t, err)
	}
	publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"resent"}, wire.HdrChunks: {"3"}}, "")
	res := awaitStoredResult(t, js, wire.ResultSubject(key.Namespace, "resent"))
	require.Nil(t, res.Error)
	require.Equal(t, wire.Hash([]byte(conv)), res.Received)
	got, _, err := env.Client.Restore(ctx, checkpoint.Key{Session: "pieces"}, 0)
	require.NoError(t, err)
	require.Equal(t, conv, string(got))
}

// CP_RESULTS is made by the first result the daemon stores, not at start-up: a deployment whose
// saves all come as requests (answered in their replies) keeps no files for it. Until then a
// direct get of a result has no responders, which the SDKs take as "none stored yet"; the first
// save off the ingest stream makes it, with the daemon's settings, and its result is stored.
func TestResults_StreamMadeByTheFirstResult(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	_, err = js.Stream(ctx, wire.StreamResults)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "not made at start-up")
	key := wire.Key{Session: "first"}.WithDefaults()
	_, err = env.Conn().Request(wire.ResultDirectGetPrefix+wire.ResultSubject(key.Namespace, "s-1"), nil, time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders)

	publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"s-1"}}, `[{"role":"user","content":"hi"}]`)
	res := awaitStoredResult(t, js, wire.ResultSubject(key.Namespace, "s-1"))
	require.Nil(t, res.Error)
	require.Equal(t, uint64(1), res.Version.Version)
	s, err := js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	require.Equal(t, []string{"cp.result.>"}, cfg.Subjects)
	require.Equal(t, int64(1), cfg.MaxMsgsPerSubject)
	require.Positive(t, cfg.MaxAge)
	require.True(t, cfg.AllowDirect)
}

// The Go SDK's save while no daemon runs goes to the ingest stream and waits for its result; with
// no result ever stored, CP_RESULTS does not exist and its lookups meanwhile have no responders,
// which it takes as "none yet". The daemon that starts settles the save, making CP_RESULTS.
func TestResults_SDKWaitsOnTheStreamBeforeCPResultsExists(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	env.StopDaemon()
	type saved struct {
		v   checkpoint.Version
		err error
	}
	done := make(chan saved, 1)
	go func() {
		v, err := env.Client.Save(ctx, checkpoint.Key{Session: "queued"}, []byte(`[{"role":"user","content":"hi"}]`))
		done <- saved{v, err}
	}()
	time.Sleep(1500 * time.Millisecond) // the SDK waits 250 ms, then looks the result up, and again
	select {
	case s := <-done:
		t.Fatalf("the save returned before any daemon ran: %+v", s)
	default:
	}
	env.StartDaemon()
	s := <-done
	require.NoError(t, s.err)
	require.Equal(t, uint64(1), s.v.Version)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	_, err = js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err, "made by the daemon's first stored result")
}
