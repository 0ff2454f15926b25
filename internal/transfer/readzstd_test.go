package transfer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// rawRead reads a body the way a client in another language would (docs/protocol.md §5): raw NATS
// requests from offset 0 until Cp-Total bytes are in, every piece's headers the same. It returns
// the body as it travelled, the first piece's headers and the number of pieces.
func rawRead(t *testing.T, nc *nats.Conn, ns string, req wire.ReadRequest) ([]byte, nats.Header, int) {
	t.Helper()
	var body []byte
	var first nats.Header
	pieces := 0
	for {
		req.Offset = int64(len(body))
		data, err := json.Marshal(req)
		require.NoError(t, err)
		m, err := nc.Request(wire.APISubject(ns, wire.OpRead), data, 10e9)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "read refused: %s", m.Data)
		require.Equal(t, strconv.Itoa(len(body)), m.Header.Get(wire.HdrOffset))
		if first == nil {
			first = m.Header
		}
		for _, h := range []string{wire.HdrTotal, wire.HdrEncoding, wire.HdrHash, wire.HdrRawTotal} {
			require.Equal(t, first.Get(h), m.Header.Get(h), "header %s of piece %d", h, pieces)
		}
		body = append(body, m.Data...)
		pieces++
		total, err := strconv.Atoi(first.Get(wire.HdrTotal))
		require.NoError(t, err)
		if len(body) >= total {
			require.Equal(t, total, len(body))
			return body, first, pieces
		}
		require.NotEmpty(t, m.Data)
	}
}

// plainDecode decodes a zstd stream with decoders that know nothing of checkpointd: klauspost's
// with its defaults and, where it is installed, the reference zstd command.
func plainDecode(t *testing.T, z []byte) []byte {
	t.Helper()
	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()
	out, err := dec.DecodeAll(z, nil)
	require.NoError(t, err)
	if path, err := exec.LookPath("zstd"); err == nil {
		cmd := exec.Command(path, "-d", "-c", "-q")
		cmd.Stdin = bytes.NewReader(z)
		ref, err := cmd.Output()
		require.NoError(t, err, "the zstd command decodes it")
		require.True(t, bytes.Equal(out, ref), "the zstd command decodes it to the same bytes")
	}
	return out
}

// requireZstdIsIdentity reads req as identity and as zstd and checks that the zstd body decodes,
// with a plain decoder, to exactly the identity bytes, with the same Cp-Hash and the raw length in
// Cp-Raw-Total. It returns the zstd body.
func requireZstdIsIdentity(t *testing.T, nc *nats.Conn, ns string, req wire.ReadRequest) []byte {
	t.Helper()
	ident, ih, _ := rawRead(t, nc, ns, req)
	require.Equal(t, wire.EncodingIdentity, ih.Get(wire.HdrEncoding))
	require.Equal(t, wire.Hash(ident), ih.Get(wire.HdrHash))
	require.Empty(t, ih.Get(wire.HdrRawTotal), "an identity read is answered as before")

	req.Encoding = wire.EncodingZstd
	z, zh, _ := rawRead(t, nc, ns, req)
	require.Equal(t, wire.EncodingZstd, zh.Get(wire.HdrEncoding))
	require.Equal(t, ih.Get(wire.HdrHash), zh.Get(wire.HdrHash), "Cp-Hash is the hash of the decoded bytes")
	require.Equal(t, strconv.Itoa(len(ident)), zh.Get(wire.HdrRawTotal))
	got := plainDecode(t, z)
	require.True(t, bytes.Equal(ident, got), "decodes to the identity bytes (%d bytes, want %d)", len(got), len(ident))
	exact, err := codec.DecompressExact(z, int64(len(ident)), nil)
	require.NoError(t, err, "and with the SDK's bounded decoder")
	require.True(t, bytes.Equal(ident, exact))
	return z
}

// A read asked for as zstd decodes to exactly the bytes of the identity read, with the same hash,
// for every shape a version's bytes can take: one save (whose stored frames travel as they are),
// several, a rewrite, values spliced in, packed saves, a sealed namespace, the request view,
// maxMessages and a merge of agents; each in several pieces.
func TestRead_ZstdDecodesToTheIdentityBytes(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) {
		packByHand(c)
		c.NamespaceKeys = namespaceKeys(t, map[string]any{"sealed": newNamespaceKey(t)})
	})
	ctx := ctxT(t)
	nc := env.Conn()
	corpus := corpusMessages(t, "claude_code_spotter_258c7280.json")
	read := func(key checkpoint.Key, v uint64) wire.ReadRequest {
		return wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session, Agent: key.Agent}, Version: v}
	}

	t.Run("one save", func(t *testing.T) {
		key := checkpoint.Key{Namespace: "plain", Session: "one"}
		_, err := env.Client.Save(ctx, key, arrayOf(corpus))
		require.NoError(t, err)
		z := requireZstdIsIdentity(t, nc, "plain", read(key, 1))
		require.Less(t, len(z), len(arrayOf(corpus))/3, "the read travels compressed")
		for _, view := range []string{"full", "request"} {
			r := read(key, 1)
			r.View = view
			requireZstdIsIdentity(t, nc, "plain", r)
		}
		r := read(key, 1)
		r.MaxMessages = 40
		requireZstdIsIdentity(t, nc, "plain", r)
	})

	t.Run("several saves and older versions, then packed", func(t *testing.T) {
		key := checkpoint.Key{Namespace: "plain", Session: "grown"}
		for _, n := range []int{100, 250, len(corpus)} {
			_, err := env.Client.Save(ctx, key, arrayOf(corpus[:n]))
			require.NoError(t, err)
		}
		for v := uint64(1); v <= 3; v++ {
			requireZstdIsIdentity(t, nc, "plain", read(key, v))
		}
		packNow(t, env, key)
		for v := uint64(1); v <= 3; v++ {
			requireZstdIsIdentity(t, nc, "plain", read(key, v))
		}
	})

	t.Run("rewritten", func(t *testing.T) {
		key := checkpoint.Key{Namespace: "plain", Session: "rewritten"}
		_, err := env.Client.Save(ctx, key, arrayOf(corpus[:300]))
		require.NoError(t, err)
		edited := append(corpus[:200:200], json.RawMessage(`{"role":"user","content":"edited"}`))
		_, err = env.Client.Save(ctx, key, arrayOf(edited))
		require.NoError(t, err)
		requireZstdIsIdentity(t, nc, "plain", read(key, 2))
		requireZstdIsIdentity(t, nc, "plain", read(key, 1))
	})

	t.Run("values", func(t *testing.T) {
		key := checkpoint.Key{Namespace: "img", Session: "shots"}
		kept, dropped := randomBytes(100<<10), randomBytes(150<<10)
		v1 := []byte(`[{"role":"user","content":"a"},` + imageMessage("s1", kept) + `,{"role":"user","content":"b"},` + imageMessage("s2", dropped) + `]`)
		v2 := []byte(`[{"role":"user","content":"a"},` + imageMessage("s1", kept) + `,{"role":"user","content":"b"},{"role":"user","content":"edited"}]`)
		_, err := env.Client.Save(ctx, key, v1)
		require.NoError(t, err)
		_, err = env.Client.Save(ctx, key, v2)
		require.NoError(t, err)
		// (At this max_payload the images stay in their saves: a value's blob must fit in one entry.)
		requireZstdIsIdentity(t, nc, "img", read(key, 1))
		requireZstdIsIdentity(t, nc, "img", read(key, 2)) // rewritten, one value in what it takes
	})

	t.Run("sealed namespace", func(t *testing.T) {
		key := checkpoint.Key{Namespace: "sealed", Session: "secret"}
		_, err := env.Client.Save(ctx, key, arrayOf(corpus[:200]))
		require.NoError(t, err)
		_, err = env.Client.Save(ctx, key, arrayOf(corpus))
		require.NoError(t, err)
		requireZstdIsIdentity(t, nc, "sealed", read(key, 1))
		requireZstdIsIdentity(t, nc, "sealed", read(key, 2))
	})

	t.Run("merge", func(t *testing.T) {
		var a, b []string
		for i := range 300 {
			a = append(a, fmt.Sprintf(`{"role":"user","content":"a %d %s","timestamp":%d}`, i, strings.Repeat("é", 100), 2*i+1))
			b = append(b, fmt.Sprintf(`{"role":"user","content":"b %d %s","timestamp":%d}`, i, strings.Repeat("ü", 100), 2*i))
		}
		for agent, msgs := range map[string][]string{"a": a, "b": b} {
			_, err := env.Client.Save(ctx, checkpoint.Key{Namespace: "team", Session: "task", Agent: agent}, []byte("["+strings.Join(msgs, ",")+"]"))
			require.NoError(t, err)
		}
		r := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: "task"}, Merge: map[string]uint64{"a": 1, "b": 1}, AgentPrefix: true}
		requireZstdIsIdentity(t, nc, "team", r)
		r.MaxMessages = 100
		requireZstdIsIdentity(t, nc, "team", r)
	})
}

// storageLookups counts the JetStream reads of stored messages (direct gets, and gets from a
// stream's leader) that any connection of env's account makes, as the server routes them: the
// daemon's looks at heads, records, layouts, segments and the ingest queue.
func storageLookups(t *testing.T, env *testenv.Env) func() int {
	t.Helper()
	nc := env.Conn()
	var subs []*nats.Subscription
	for _, subject := range []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"} {
		sub, err := nc.SubscribeSync(subject)
		require.NoError(t, err)
		require.NoError(t, sub.SetPendingLimits(-1, -1))
		subs = append(subs, sub)
	}
	require.NoError(t, nc.Flush())
	return func() int {
		// Requests routed before the last reply reached the test are queued to this connection
		// before the answer to this flush, and a synchronous subscription has them once it is in.
		require.NoError(t, nc.Flush())
		n := 0
		for _, sub := range subs {
			for {
				if _, err := sub.NextMsg(0); err != nil {
					break
				}
				n++
			}
		}
		return n
	}
}

// A read's pieces after its first are served from what the first assembled: no lookup of the
// version (head, record, layout, segments) nor of the ingest queue, once per piece. Counted with
// the JetStream requests the server routes, for identity and zstd reads.
func TestRead_LaterPiecesLookNothingUp(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "pieces"}
	_, err := env.Client.Save(ctx, key, arrayOf(corpusMessages(t, "claude_code_spotter_258c7280.json")))
	require.NoError(t, err)
	lookups := storageLookups(t, env)
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		t.Run(enc, func(t *testing.T) {
			lookups()
			req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: "pieces"}, Version: 1, Encoding: enc}
			var got int64
			var perPiece []int
			for total := int64(1); got < total; {
				req.Offset = got
				data, err := json.Marshal(req)
				require.NoError(t, err)
				m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
				require.NoError(t, err)
				require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
				total, err = strconv.ParseInt(m.Header.Get(wire.HdrTotal), 10, 64)
				require.NoError(t, err)
				got += int64(len(m.Data))
				perPiece = append(perPiece, lookups())
			}
			t.Logf("storage lookups per piece: %v", perPiece)
			require.Greater(t, len(perPiece), 1, "the read comes in pieces")
			require.Positive(t, perPiece[0], "the first piece finds the version (the count sees the daemon's lookups)")
			for i, n := range perPiece[1:] {
				require.Zero(t, n, "piece %d of %d looked storage up (lookups per piece: %v)", i+2, len(perPiece), perPiece)
			}
		})
	}
}

// A read held between its pieces is held for the namespace that asked: the same session, version
// and view asked for from another namespace, at a later offset, is looked up there (and not found),
// never served from the other tenant's read.
func TestRead_HeldReadIsNotServedToAnotherNamespace(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	nc := env.Conn()
	_, err := env.Client.Save(ctx, checkpoint.Key{Namespace: "alice", Session: "s"}, arrayOf(corpusMessages(t, "claude_code_spotter_258c7280.json")))
	require.NoError(t, err)
	for _, enc := range []string{wire.EncodingIdentity, wire.EncodingZstd} {
		req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: "s"}, Version: 1, Encoding: enc}
		data, _ := json.Marshal(req)
		m, err := nc.Request(wire.APISubject("alice", wire.OpRead), data, 10e9)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode))
		req.Offset = int64(len(m.Data))
		data, _ = json.Marshal(req)
		m, err = nc.Request(wire.APISubject("mallory", wire.OpRead), data, 10e9)
		require.NoError(t, err)
		require.Equal(t, "404", m.Header.Get(wire.HdrServiceErrorCode), "%s: %.100s", enc, m.Data)
	}
}

// fakeDaemon answers get and read on env's server in place of checkpointd (stopped), through
// serveRead, so that the SDK can be tested against daemons that are not this one: an older one, a
// hostile one. It records the encodings the reads asked for.
func fakeDaemon(t *testing.T, env *testenv.Env, v wire.Version, serveRead func(req wire.ReadRequest) *nats.Msg) *[]string {
	t.Helper()
	env.StopDaemon()
	nc := env.Conn()
	var asked []string
	_, err := nc.Subscribe("cp.api.*."+wire.OpGet, func(m *nats.Msg) {
		data, _ := json.Marshal(v)
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	_, err = nc.Subscribe("cp.api.*."+wire.OpRead, func(m *nats.Msg) {
		var req wire.ReadRequest
		require.NoError(t, json.Unmarshal(m.Data, &req))
		asked = append(asked, req.Encoding)
		reply := serveRead(req)
		reply.Subject = m.Reply
		_ = nc.PublishMsg(reply)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return &asked
}

// readReply is a read's piece as a daemon sends it.
func readReply(body []byte, offset int, enc, hash string, total, rawTotal int) *nats.Msg {
	m := nats.NewMsg("")
	m.Data = body[offset:min(offset+32<<10, len(body))]
	m.Header.Set(wire.HdrTotal, strconv.Itoa(total))
	m.Header.Set(wire.HdrOffset, strconv.Itoa(offset))
	m.Header.Set(wire.HdrEncoding, enc)
	m.Header.Set(wire.HdrHash, hash)
	if enc == wire.EncodingZstd {
		m.Header.Set(wire.HdrRawTotal, strconv.Itoa(rawTotal))
	}
	return m
}

// The SDK asks for zstd; a daemon from before zstd reads refuses that as a bad request, and the
// SDK reads identity instead, checking it as before.
func TestSDK_RestoreFromADaemonThatServesOnlyIdentity(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "old"}
	conv := arrayOf(corpusMessages(t, "claude_code_spotter_258c7280.json"))
	v, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	asked := fakeDaemon(t, env, v, func(req wire.ReadRequest) *nats.Msg {
		if req.Encoding != "" && req.Encoding != wire.EncodingIdentity {
			m := nats.NewMsg("")
			m.Header.Set(wire.HdrServiceErrorCode, "400")
			m.Data, _ = json.Marshal(wire.Error{Code: wire.CodeBadRequest, Message: `bad request: unknown encoding "zstd" (reads are served as identity)`})
			return m
		}
		return readReply(conv, int(req.Offset), wire.EncodingIdentity, v.Hash, len(conv), 0)
	})
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(conv, got))
	// The first read, of the head (version 0), is refused too (it asks for zstd); the SDK asks get,
	// then reads zstd again, and identity.
	require.Equal(t, []string{wire.EncodingZstd, wire.EncodingZstd, wire.EncodingIdentity}, (*asked)[:3])
	for _, enc := range (*asked)[3:] {
		require.Equal(t, wire.EncodingIdentity, enc, "the later pieces, as identity")
	}
}

// What a zstd reply announces bounds what the SDK decodes, and what it decodes must be what was
// announced: a raw length above the version's, a compressed length no stream of that raw length
// needs, a body that decodes to more than announced, or to other bytes, are refused.
func TestSDK_RestoreBoundsWhatItDecodes(t *testing.T) {
	conv := arrayOf(corpusMessages(t, "claude_code_spotter_258c7280.json"))
	z := codec.CompressZstd(conv)
	padded := codec.CompressZstd(append(conv[:len(conv):len(conv)], "         "...))
	for _, c := range []struct {
		name  string
		reply func(v wire.Version, offset int) *nats.Msg
		want  error
	}{
		{"raw total above the record's", func(v wire.Version, off int) *nats.Msg {
			return readReply(z, off, wire.EncodingZstd, v.Hash, len(z), len(conv)+1)
		}, checkpoint.ErrTooLarge},
		{"compressed total no stream needs", func(v wire.Version, off int) *nats.Msg {
			return readReply(z, off, wire.EncodingZstd, v.Hash, 1<<40, len(conv))
		}, nil},
		{"decodes to more than announced", func(v wire.Version, off int) *nats.Msg {
			return readReply(padded, off, wire.EncodingZstd, v.Hash, len(padded), len(conv))
		}, checkpoint.ErrCorrupt},
		{"decodes to other bytes", func(v wire.Version, off int) *nats.Msg {
			other := bytes.Clone(conv)
			other[10] ^= 1
			oz := codec.CompressZstd(other)
			return readReply(oz, off, wire.EncodingZstd, v.Hash, len(oz), len(conv))
		}, checkpoint.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := testenv.Start(t)
			ctx := ctxT(t)
			key := checkpoint.Key{Session: "hostile"}
			v, err := env.Client.Save(ctx, key, conv)
			require.NoError(t, err)
			fakeDaemon(t, env, v, func(req wire.ReadRequest) *nats.Msg { return c.reply(v, int(req.Offset)) })
			_, _, err = env.Client.Restore(ctx, key, 0)
			require.Error(t, err)
			t.Log(err)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
			}
		})
	}
}

// gauge returns the value of a gauge env's daemon exports.
func gauge(t *testing.T, env *testenv.Env, name string) float64 {
	t.Helper()
	families, err := env.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A client that asks for later pieces of many different reads at once, none from its start, is
// answered every piece right (each read assembled for it, within the read budget: at most 8 of them
// held between pieces), and once answered nothing of them is reserved any more.
func TestRead_LaterPiecesOfManyReadsAtOnce(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	nc := env.Conn()
	corpus := corpusMessages(t, "claude_code_spotter_258c7280.json")
	const sessions = 12
	whole := map[int][]byte{}
	for i := range sessions {
		key := checkpoint.Key{Session: fmt.Sprint("s", i)}
		conv := arrayOf(append(corpus[:len(corpus):len(corpus)], json.RawMessage(fmt.Sprintf(`{"role":"user","content":"%d"}`, i))))
		_, err := env.Client.Save(ctx, key, conv)
		require.NoError(t, err)
		whole[i], _, _ = rawRead(t, nc, wire.DefaultNamespace, wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: key.Session}, Version: 1, Encoding: wire.EncodingZstd})
	}
	errs := make(chan error, sessions*3)
	for i := range sessions {
		for _, offset := range []int{len(whole[i]) / 3, len(whole[i]) / 2, len(whole[i]) - 100} {
			go func() {
				req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: fmt.Sprint("s", i)}, Version: 1, Encoding: wire.EncodingZstd, Offset: int64(offset)}
				data, _ := json.Marshal(req)
				m, err := nc.Request(wire.APISubject(wire.DefaultNamespace, wire.OpRead), data, 10e9)
				switch {
				case err != nil:
				case m.Header.Get(wire.HdrServiceErrorCode) == "429":
					err = nil // refused at a limit: fine, that is what the limits are for
				case m.Header.Get(wire.HdrServiceErrorCode) != "":
					err = fmt.Errorf("session %d offset %d: %s", i, offset, m.Data)
				case !bytes.Equal(m.Data, whole[i][offset:offset+len(m.Data)]) || len(m.Data) == 0:
					err = fmt.Errorf("session %d offset %d: the piece is not the bytes of the read there", i, offset)
				}
				errs <- err
			}()
		}
	}
	for range sessions * 3 {
		require.NoError(t, <-errs)
	}
	// A request gives its bytes back just after its reply is sent.
	require.Eventually(t, func() bool { return gauge(t, env, "checkpointd_read_in_use_bytes") == 0 }, 5*time.Second, 5*time.Millisecond,
		"nothing is reserved once every piece is answered")
}

// A hostile daemon that announces a huge conversation (its record and its read headers agree) but
// sends a few bytes and stalls costs the SDK what it sent, not what it announced: the buffer grows
// with the bytes received.
func TestSDK_RestoreAllocatesWhatArrivesNotWhatIsAnnounced(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "announced"}
	v, err := env.Client.Save(ctx, key, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err)
	const announced = 1 << 30
	v.RawBytes = announced
	piece := []byte(`[{"role":"user","content":"hi"`)
	fakeDaemon(t, env, v, func(req wire.ReadRequest) *nats.Msg {
		if req.Offset > 0 {
			return readReply(piece, len(piece), wire.EncodingIdentity, v.Hash, announced, 0) // nothing more: a stall
		}
		return readReply(piece, 0, wire.EncodingIdentity, v.Hash, announced, 0)
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err = env.Client.Restore(ctx, key, 0)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "stalled")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "the SDK allocated for the announced size")
}
