package transfer_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Issue 10, item 3: version numbers never wrap, every integer a client sends is range-checked. Every
// attack here is a raw NATS message, as a hostile client would send it, not a call of the SDK.

var (
	maxVersion = strconv.FormatUint(wire.MaxVersion, 10)
	maxUint64  = strconv.FormatUint(math.MaxUint64, 10)
)

// rawSave publishes a save to key's ingest subject with the headers given and returns its result.
func saveRaw(t *testing.T, nc *nats.Conn, key wire.Key, saveID string, hdr map[string]string, body []byte) wire.SaveResult {
	t.Helper()
	sub, err := nc.SubscribeSync(wire.ResultSubject(key.Namespace, saveID))
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	m := nats.NewMsg(wire.IngestSubject(key))
	m.Header.Set(wire.HdrSaveID, saveID)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	m.Data = body
	_, err = js.PublishMsg(ctxT(t), m, jetstream.WithMsgID(saveID))
	require.NoError(t, err)
	res, err := sub.NextMsg(15 * time.Second)
	require.NoError(t, err, "every acknowledged save gets a result")
	var sr wire.SaveResult
	require.NoError(t, json.Unmarshal(res.Data, &sr))
	return sr
}

// importHeaders are the headers of an import of conv as version n.
func importHeaders(n string, conv []byte) map[string]string {
	return map[string]string{
		wire.HdrImportVersion: n,
		wire.HdrImportCreated: time.Now().UTC().Format(time.RFC3339Nano),
		wire.HdrHash:          wire.Hash(conv),
		wire.HdrImportVia:     wire.ReasonImport,
		wire.HdrImportSource:  "hostile",
	}
}

// requireRefused checks a save's result is a refusal with code whose message says each of says.
func requireRefused(t *testing.T, res wire.SaveResult, code string, says ...string) {
	t.Helper()
	require.False(t, res.OK, "refused, not stored: %+v", res.Version)
	require.NotNil(t, res.Error)
	require.Equal(t, code, res.Error.Code, res.Error.Message)
	for _, s := range says {
		require.Contains(t, res.Error.Message, s)
	}
}

// The case: an import numbered 2^64-1 onto another writer's session was accepted, the
// victim's next save became "version 0" and the session vanished. Now the header is refused, and
// an import that is in range but jumps ahead of the head is refused too: the victim's line goes on.
func TestBounds_ImportCannotPushAnotherWritersSession(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	victim := checkpoint.Key{Session: "victim"}
	key := victim.WithDefaults()
	conv := turn(nil, "victim", 1)
	_, err := env.Client.Save(ctx, victim, conv)
	require.NoError(t, err)

	forged := turn(conv, "attacker", 1)
	requireRefused(t, saveRaw(t, nc, key, "wrap", importHeaders(maxUint64, forged), forged),
		wire.CodeBadRequest, wire.HdrImportVersion, "1.."+maxVersion)
	requireRefused(t, saveRaw(t, nc, key, "past-max", importHeaders(strconv.FormatUint(wire.MaxVersion+1, 10), forged), forged),
		wire.CodeBadRequest, wire.HdrImportVersion)
	res := saveRaw(t, nc, key, "jump", importHeaders(maxVersion, forged), forged)
	requireRefused(t, res, wire.CodeConflict, "next version (2)")
	require.Equal(t, uint64(1), *res.Error.Head)
	requireRefused(t, saveRaw(t, nc, key, "jump-5", importHeaders("5", forged), forged), wire.CodeConflict)

	// The victim's session is as it was, and its next save is version 2.
	conv = turn(conv, "victim", 2)
	v, err := env.Client.Save(ctx, victim, conv)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version)
	h, err := env.Client.History(ctx, victim)
	require.NoError(t, err)
	require.Len(t, h, 2)
	sessions, err := env.Client.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, sessions, 1)
	require.Equal(t, uint64(2), sessions[0].Version.Version)

	// An import that continues the line is what migrate and import send: still accepted.
	next := turn(conv, "copied", 3)
	res = saveRaw(t, nc, key, "continues", importHeaders("3", next), next)
	require.True(t, res.OK, "%+v", res.Error)
	require.Equal(t, uint64(3), res.Version.Version)
}

// At the last version number a session takes no more saves: the save is refused, nothing changes,
// never a wrap. An empty session may start at any number an import brings (a source whose oldest
// versions were pruned), MaxVersion included.
func TestBounds_NoVersionAboveMax(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "at the end"}
	conv := turn(nil, "imported", 1)
	res := saveRaw(t, nc, key.WithDefaults(), "last", importHeaders(maxVersion, conv), conv)
	require.True(t, res.OK, "%+v", res.Error)
	require.Equal(t, wire.MaxVersion, res.Version.Version)

	_, err := env.Client.Save(ctx, key, turn(conv, "more", 2))
	require.ErrorIs(t, err, checkpoint.ErrBadRequest)
	require.Contains(t, err.Error(), "no version number left")
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, wire.MaxVersion, v.Version)
	require.Equal(t, string(conv), string(got), "nothing changed")

	// The domain refuses it too, whoever calls it.
	k := key.WithDefaults()
	ek := engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
	_, err = env.Daemon.Engine.Save(ctx, engine.SaveRequest{Key: ek, SaveID: "direct",
		Payload: turn(conv, "direct", 2), Now: time.Now()})
	require.ErrorIs(t, err, engine.ErrVersionLimit)
	hd, err := env.Daemon.Engine.Head(ctx, ek)
	require.NoError(t, err)
	require.Equal(t, wire.MaxVersion, hd.Version)
	require.Equal(t, "last", hd.SaveID)
}

// Every integer header of a save is range-checked: a bad_request naming the header and the range,
// before anything else happens.
func TestBounds_SaveHeadersOutOfRange(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "headers"}
	conv := turn(nil, "owner", 1)
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	next := turn(conv, "hostile", 2)
	fork := key.WithDefaults().Token() + "." + maxUint64
	for i, c := range []struct {
		header, value, says string
	}{
		{wire.HdrExpectedVersion, maxUint64, "0.." + maxVersion},
		{wire.HdrExpectedVersion, strconv.FormatUint(wire.MaxVersion+1, 10), "0.." + maxVersion},
		{wire.HdrBaseVersion, maxUint64, "0.." + maxVersion},
		{wire.HdrEpoch, maxUint64, "1.." + maxVersion},
		{wire.HdrForkOf, fork, "1.." + maxVersion},
		{wire.HdrChunks, "1000000000000", "1.." + strconv.FormatInt(env.Config.MaxCheckpointBytes, 10)},
		{wire.HdrChunks, "-1", "1.."},
	} {
		res := saveRaw(t, nc, key.WithDefaults(), fmt.Sprint("h", i), map[string]string{c.header: c.value}, next)
		requireRefused(t, res, wire.CodeBadRequest, c.header, c.says)
	}
	h, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, h, 1, "nothing stored")
}

// rawRequest sends a service request with a hand-made JSON body and returns the error reply's
// body, or nil when the request succeeded.
func requestRaw(t *testing.T, nc *nats.Conn, op, body string) *wire.Error {
	t.Helper()
	m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, op), []byte(body), 15*time.Second)
	require.NoError(t, err)
	if m.Header.Get(wire.HdrServiceErrorCode) == "" {
		return nil
	}
	var we wire.Error
	require.NoError(t, json.Unmarshal(m.Data, &we), string(m.Data))
	return &we
}

// Every integer of a request body is range-checked: history after 2^64-1 returned everything, a
// prune's maxAgeSeconds of 640 million years wrapped to 512 ns and removed every version but the
// head, a lease's TTL of 584 years wrapped to 0.29 s. Each is now a bad_request naming the field and its range.
func TestBounds_RequestIntegersOutOfRange(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "s"}
	var conv []byte
	for i := 1; i <= 3; i++ {
		conv = turn(conv, "w", i)
		_, err := env.Client.Save(ctx, key, conv)
		require.NoError(t, err)
	}
	const s = `"session":"s"`
	const wrapsToTinyAge = "20211507185753197"                                          // × 1e9 wraps to 512 ns: every version but the head is older
	wrapsToTinyTTL := strconv.FormatUint(math.MaxUint64/uint64(time.Millisecond)+1, 10) // × 1e6 wraps to 0.29 s
	for _, c := range []struct {
		op, body, says string
	}{
		{wire.OpHistory, `{` + s + `,"after":` + maxUint64 + `}`, "after"},
		{wire.OpHistory, `{` + s + `,"after":` + strconv.FormatUint(wire.MaxVersion+1, 10) + `}`, "after"},
		{wire.OpGet, `{` + s + `,"version":` + maxUint64 + `}`, "version"},
		{wire.OpRead, `{` + s + `,"version":` + maxUint64 + `}`, "version"},
		{wire.OpRead, `{` + s + `,"version":1,"offset":-1}`, "offset"},
		{wire.OpRead, `{` + s + `,"version":1,"maxMessages":-2}`, "maxMessages"},
		{wire.OpRead, `{` + s + `,"merge":{"main":` + maxUint64 + `}}`, "merge"},
		{wire.OpPrune, `{` + s + `,"maxAgeSeconds":` + wrapsToTinyAge + `}`, "maxAgeSeconds"},
		{wire.OpPrune, `{` + s + `,"keepLast":-1}`, "keepLast"},
		{wire.OpList, `{"offset":-1}`, "offset"},
		{wire.OpLease, `{` + s + `,"op":"acquire","owner":"o","ttlMillis":` + wrapsToTinyTTL + `}`, "ttlMillis"},
		{wire.OpLease, `{` + s + `,"op":"renew","ttlMillis":1000,"epoch":` + maxUint64 + `}`, "epoch"},
		{wire.OpSeal, `{` + s + `,"expected":` + maxUint64 + `,"movedTo":"x"}`, "expected"},
		{wire.OpDelete, `{` + s + `,"expected":` + maxUint64 + `}`, "expected"},
	} {
		we := requestRaw(t, nc, c.op, c.body)
		require.NotNil(t, we, "%s %s: refused", c.op, c.body)
		require.Equal(t, wire.CodeBadRequest, we.Code, "%s %s: %s", c.op, c.body, we.Message)
		require.Contains(t, we.Message, c.says, c.op)
		require.Contains(t, we.Message, "..", "%s: the range is named", c.op)
	}
	// A number beyond every integer type is refused as the body it is.
	we := requestRaw(t, nc, wire.OpHistory, `{`+s+`,"after":18446744073709551616}`)
	require.NotNil(t, we)
	require.Equal(t, wire.CodeBadRequest, we.Code)
	require.Contains(t, we.Message, "after")

	h, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, h, 3, "nothing pruned, nothing deleted")
	l, err := env.Client.LeaseStatus(ctx, key)
	require.NoError(t, err)
	require.Empty(t, l.Owner, "no lease taken")

	// The largest values in range are served.
	require.Nil(t, requestRaw(t, nc, wire.OpHistory, `{`+s+`,"after":`+maxVersion+`}`))
	require.Nil(t, requestRaw(t, nc, wire.OpPrune, `{`+s+`,"maxAgeSeconds":`+strconv.FormatInt(wire.MaxAgeSeconds, 10)+`,"dryRun":true}`))
}

// A head-only migration onto a destination that already has an older copy of the session copies
// the versions after the destination's head, in order: an import continues a line, it never jumps
// (before, the destination got the source's head with a gap under it).
func TestBounds_HeadOnlyMigrateOntoAnOlderCopyContinuesTheLine(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "copied twice"}
	conv := turn(nil, "src", 1)
	_, err := src.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "v1.cpbundle")
	f, err := os.Create(file)
	require.NoError(t, err)
	_, err = src.Client.Export(ctx, f, []checkpoint.Key{key}, checkpoint.ExportOptions{HeadOnly: true})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, n, err := dst.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	for i := 2; i <= 4; i++ {
		conv = turn(conv, "src", i)
		_, err = src.Client.Save(ctx, key, conv)
		require.NoError(t, err)
	}
	p, err := src.Client.Migrate(ctx, dst.Client, key, checkpoint.MigrateOptions{HeadOnly: true, MovedTo: dst.URL()})
	require.NoError(t, err)
	require.Equal(t, 3, p.Versions)
	h, err := dst.Client.History(ctx, key)
	require.NoError(t, err)
	var got []uint64
	for _, v := range h {
		got = append(got, v.Version)
	}
	require.Equal(t, []uint64{1, 2, 3, 4}, got)
}
