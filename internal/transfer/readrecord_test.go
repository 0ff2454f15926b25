package transfer_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// readPiece sends one read request with core NATS and requires it answered, not refused.
func readPiece(t *testing.T, nc *nats.Conn, ns string, req wire.ReadRequest) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	m, err := nc.Request(wire.APISubject(ns, wire.OpRead), data, 10e9)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "read refused: %s", m.Data)
	return m
}

// recordHeader decodes the Cp-Version header of m, which must be there, in printable ASCII only.
func recordHeader(t *testing.T, m *nats.Msg) wire.Version {
	t.Helper()
	h := m.Header.Get(wire.HdrVersion)
	require.NotEmpty(t, h, "the first piece carries the version's record")
	require.LessOrEqual(t, len(h), wire.MaxVersionHeaderBytes)
	for i := range len(h) {
		require.True(t, h[i] >= 0x20 && h[i] < 0x7f, "byte %d of %s is %#x: not printable ASCII", i, wire.HdrVersion, h[i])
	}
	var v wire.Version
	require.NoError(t, json.Unmarshal([]byte(h), &v), "%s", h)
	return v
}

// readVersionOf reads req (any version, 0 for the head) with core NATS from its first piece to its
// last, the later pieces asking for the version the first piece's record named, and returns the
// decoded body, that record, and how many pieces it took. Only the first piece has a record.
func readVersionOf(t *testing.T, nc *nats.Conn, ns string, req wire.ReadRequest) ([]byte, wire.Version, int) {
	t.Helper()
	req.Offset = 0
	m := readPiece(t, nc, ns, req)
	v := recordHeader(t, m)
	req.Version = v.Version
	body := m.Data
	total, err := strconv.Atoi(m.Header.Get(wire.HdrTotal))
	require.NoError(t, err)
	pieces := 1
	for len(body) < total {
		req.Offset = int64(len(body))
		p := readPiece(t, nc, ns, req)
		require.Empty(t, p.Header.Get(wire.HdrVersion), "only the first piece carries the record")
		require.Equal(t, m.Header.Get(wire.HdrHash), p.Header.Get(wire.HdrHash))
		require.NotEmpty(t, p.Data)
		body = append(body, p.Data...)
		pieces++
	}
	if m.Header.Get(wire.HdrEncoding) == wire.EncodingZstd {
		body = plainDecode(t, body)
	}
	require.Equal(t, m.Header.Get(wire.HdrHash), wire.Hash(body))
	return body, v, pieces
}

// The first piece of a read of one version carries the version's record, exactly as get returns
// it; a read may name version 0 (or none): the head, whose record says which version it is. For
// identity and zstd, a conversation in one piece and one in many, a view; a merged read (of several
// versions) carries none.
func TestRead_FirstPieceCarriesTheVersionRecord(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	nc := env.Conn()
	msgs := corpusMessages(t, "claude_code_spotter_258c7280.json")
	key := checkpoint.Key{Session: "record"}
	small := arrayOf(msgs[:4])
	large := arrayOf(msgs)
	v1, err := env.Client.Save(ctx, key, small)
	require.NoError(t, err)
	v2, err := env.Client.Save(ctx, key, large)
	require.NoError(t, err)
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		for _, c := range []struct {
			version uint64
			view    string
			want    checkpoint.Version
			body    []byte
		}{{0, "", v2, large}, {1, "", v1, small}, {2, "", v2, large}, {0, wire.ViewRequest, v2, nil}} {
			req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Version: c.version, Encoding: enc, View: c.view}
			body, got, pieces := readVersionOf(t, nc, wire.DefaultNamespace, req)
			require.Equal(t, c.want, got, "%s, version %d: the record get returns", enc, c.version)
			if c.body != nil {
				require.Equal(t, c.body, body)
				require.Equal(t, c.want.Hash, wire.Hash(body))
			}
			t.Logf("%s, version %d, view %q: %d pieces", enc, c.version, c.view, pieces)
		}
	}
	m := readPiece(t, nc, wire.DefaultNamespace, wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Merge: map[string]uint64{"main": 1}})
	require.Empty(t, m.Header.Get(wire.HdrVersion), "a merged read is of several versions: no one record")
}

// A read of the head is held under the version it found: its later pieces, asked for that version,
// are served from the first piece's body with no lookup, and are that version's bytes even when
// the head moved on in between; a later piece asked for version 0 is refused (it could be of
// another version).
func TestRead_HeadReadContinuesTheVersionItFound(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	nc := env.Conn()
	msgs := corpusMessages(t, "claude_code_spotter_258c7280.json")
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		t.Run(enc, func(t *testing.T) {
			key := checkpoint.Key{Session: "moving-" + enc}
			first := arrayOf(msgs)
			v1, err := env.Client.Save(ctx, key, first)
			require.NoError(t, err)
			req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Encoding: enc}
			m := readPiece(t, nc, wire.DefaultNamespace, req)
			require.Equal(t, v1, recordHeader(t, m))
			total, _ := strconv.Atoi(m.Header.Get(wire.HdrTotal))
			require.Less(t, len(m.Data), total, "the read comes in pieces")

			v2, err := env.Client.Append(ctx, key, v1.Version, arrayOf(msgs[:2]))
			require.NoError(t, err)
			require.EqualValues(t, 2, v2.Version)

			req.Offset = int64(len(m.Data))
			data, _ := json.Marshal(req)
			refused, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
			require.NoError(t, err)
			require.Equal(t, wire.StatusCode(wire.CodeBadRequest), refused.Header.Get(wire.HdrServiceErrorCode), "%s", refused.Data)
			require.Contains(t, string(refused.Data), wire.HdrVersion, "the refusal says which version to ask for")

			lookups := storageLookups(t, env)
			lookups()
			req.Version = v1.Version
			body := m.Data
			for len(body) < total {
				req.Offset = int64(len(body))
				p := readPiece(t, nc, wire.DefaultNamespace, req)
				require.Equal(t, m.Header.Get(wire.HdrTotal), p.Header.Get(wire.HdrTotal))
				body = append(body, p.Data...)
			}
			require.Zero(t, lookups(), "the later pieces are served from the head read's body, held under version %d", v1.Version)
			if enc == wire.EncodingZstd {
				body = plainDecode(t, body)
			}
			require.Equal(t, first, body, "the bytes of the version the first piece named, not of the new head")

			_, head, _ := readVersionOf(t, nc, wire.DefaultNamespace, wire.ReadRequest{SessionRequest: req.SessionRequest, Encoding: enc})
			require.Equal(t, v2, head, "a new read of the head finds the new head")
		})
	}
}

// The record header carries what the record holds, whatever its text: ids of 4-byte characters at
// their longest, a writer of DEL and accented letters at its longest. It is ASCII, within its
// bound, decodes to the record get returns, and leaves the first piece within the server's
// max_payload (the piece is shorter by the header's length).
func TestRead_VersionRecordOfLongTextsFitsTheFirstPiece(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	writer := strings.Repeat("\u007f\u00e9", wire.MaxTextHeaderBytes/3)
	c, err := checkpoint.New(env.Conn(), checkpoint.WithWriter(writer))
	require.NoError(t, err)
	long := func(r string) string { return strings.Repeat(r, wire.MaxIDBytes/len(r)) }
	key := checkpoint.Key{Namespace: long("\U0001F600"), Session: long("\U0001F4AC"), Agent: long("\u00e9")}
	conv := arrayOf(corpusMessages(t, "claude_code_spotter_258c7280.json"))
	v, err := c.Save(ctx, key, conv)
	require.NoError(t, err)
	require.Equal(t, writer, v.Writer)
	k := key.WithDefaults()
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: k.Session, Agent: k.Agent}, Encoding: enc}
		m := readPiece(t, env.Conn(), k.Namespace, req)
		t.Logf("%s: header of %d bytes, piece of %d bytes", enc, len(m.Header.Get(wire.HdrVersion)), len(m.Data))
		require.Greater(t, len(m.Header.Get(wire.HdrVersion)), 3*wire.MaxIDBytes*2, "every character escaped")
		body, got, _ := readVersionOf(t, env.Conn(), k.Namespace, req)
		require.Equal(t, v, got)
		require.Equal(t, conv, body)
	}
	got, rec, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, v, rec)
	require.Equal(t, conv, got)
}

// apiSpy counts the requests of every client on cp.api.<ns>.<op>, by operation, as the server
// routes them (a plain subscription gets a copy of every request).
func apiSpy(t *testing.T, env *testenv.Env) func() map[string]int {
	t.Helper()
	nc := env.Conn()
	sub, err := nc.SubscribeSync("cp.api.>")
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	require.NoError(t, nc.Flush())
	return func() map[string]int {
		// The requests routed before this flush are queued to the subscription before its answer.
		require.NoError(t, nc.Flush())
		counts := map[string]int{}
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				return counts
			}
			counts[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]++
		}
	}
}

// A restore through the SDK (the head, a given version, a view) is one request when the
// conversation fits one reply, and one request per piece when it does not: no get.
func TestSDK_RestoreIsOneRequest(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 256<<10)
	ctx := ctxT(t)
	msgs := corpusMessages(t, "claude_code_spotter_258c7280.json")
	key := checkpoint.Key{Session: "one"}
	small := arrayOf(msgs[:40])
	v1, err := env.Client.Save(ctx, key, small)
	require.NoError(t, err)
	large := arrayOf(corpusMessages(t, "pi_before_compaction.json"))
	v2, err := env.Client.Save(ctx, checkpoint.Key{Session: "large"}, large)
	require.NoError(t, err)
	requests := apiSpy(t, env)
	for _, c := range []struct {
		name     string
		key      checkpoint.Key
		version  uint64
		opts     []checkpoint.RestoreOption
		want     checkpoint.Version
		body     []byte
		onePiece bool
	}{
		{"head", key, 0, nil, v1, small, true},
		{"version 1", key, 1, nil, v1, small, true},
		{"view of the head", key, 0, []checkpoint.RestoreOption{checkpoint.WithMaxMessages(4)}, v1, nil, true},
		{"head in pieces", checkpoint.Key{Session: "large"}, 0, nil, v2, large, false},
	} {
		got, v, err := env.Client.Restore(ctx, c.key, c.version, c.opts...)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, v, c.name)
		if c.body != nil {
			require.Equal(t, c.body, got, c.name)
		}
		n := requests()
		t.Logf("%s: requests %v", c.name, n)
		require.Zero(t, n[wire.OpGet], "%s: no get", c.name)
		if c.onePiece {
			require.Equal(t, map[string]int{wire.OpRead: 1}, n, "%s: one request", c.name)
		} else {
			require.Greater(t, n[wire.OpRead], 1, c.name)
		}
	}
}

// Against a daemon from before the record header (it refuses a read of version 0 as a bad request
// and answers an exact version without Cp-Version), the SDK restores as before: get, then read,
// checked against the record get returned. For a given version the piece already received is
// kept, not asked for again.
func TestSDK_RestoreFromADaemonWithoutTheRecordHeader(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "older"}
	conv := arrayOf(corpusMessages(t, "claude_code_spotter_258c7280.json"))
	v, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	z := codec.CompressZstd(conv)
	fakeDaemon(t, env, v, func(req wire.ReadRequest) *nats.Msg {
		if req.Version == 0 {
			m := nats.NewMsg("")
			m.Header.Set(wire.HdrServiceErrorCode, "400")
			m.Data, _ = json.Marshal(wire.Error{Code: wire.CodeBadRequest, Message: "bad request: read needs an exact version (ask get for the head first)"})
			return m
		}
		return readReply(z, int(req.Offset), wire.EncodingZstd, v.Hash, len(z), len(conv))
	})
	requests := apiSpy(t, env)
	pieces := (len(z) + 32<<10 - 1) / (32 << 10)
	for _, c := range []struct {
		version uint64
		want    map[string]int
	}{
		{0, map[string]int{wire.OpRead: 1 + pieces, wire.OpGet: 1}},
		{1, map[string]int{wire.OpRead: pieces, wire.OpGet: 1}},
	} {
		got, rec, err := env.Client.Restore(ctx, key, c.version)
		require.NoError(t, err)
		require.Equal(t, v, rec)
		require.True(t, bytes.Equal(conv, got))
		require.Equal(t, c.want, requests(), "version %d", c.version)
	}
}

// The record a reply carries is checked like the bytes: the record of another session or another
// version, of an unknown format, or not a record at all, is refused; and the bytes are checked
// against the record the reply carries, not only against its Cp-Hash.
func TestSDK_RestoreChecksTheRecordItIsSent(t *testing.T) {
	conv := arrayOf(corpusMessages(t, "openhands_gui_todo_app.json"))
	z := codec.CompressZstd(conv)
	for _, c := range []struct {
		name   string
		record func(v wire.Version) string
		want   error
	}{
		{"another session's", func(v wire.Version) string { v.Key.Session = "other"; return jsonString(v) }, checkpoint.ErrCorrupt},
		{"another version's", func(v wire.Version) string { v.Version = 7; return jsonString(v) }, checkpoint.ErrCorrupt},
		{"version 0", func(v wire.Version) string { v.Version = 0; return jsonString(v) }, checkpoint.ErrCorrupt},
		{"an unknown format", func(v wire.Version) string { v.Format = 3; return jsonString(v) }, checkpoint.ErrCorrupt},
		{"not JSON", func(wire.Version) string { return "{" }, checkpoint.ErrCorrupt},
		{"another hash than the bytes'", func(v wire.Version) string {
			v.Hash = wire.Hash([]byte("[]"))
			return jsonString(v)
		}, checkpoint.ErrCorrupt},
		{"a length below the bytes'", func(v wire.Version) string { v.RawBytes--; return jsonString(v) }, checkpoint.ErrTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := testenv.Start(t)
			ctx := ctxT(t)
			key := checkpoint.Key{Session: "told"}
			v, err := env.Client.Save(ctx, key, conv)
			require.NoError(t, err)
			fakeDaemon(t, env, v, func(req wire.ReadRequest) *nats.Msg {
				m := readReply(z, int(req.Offset), wire.EncodingZstd, v.Hash, len(z), len(conv))
				if req.Offset == 0 {
					m.Header.Set(wire.HdrVersion, c.record(v))
				}
				return m
			})
			_, _, err = env.Client.Restore(ctx, key, 1)
			require.Error(t, err)
			t.Log(err)
			require.ErrorIs(t, err, c.want)
		})
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
