package transfer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The hostile table: every bad or hostile input a client can send, as raw NATS messages (not through
// the SDK, which would refuse most of them before they left), each with the typed outcome it must
// get. After every row the daemon must still serve (a normal save and restore work) and every stored
// session must be exactly as it was: same head version and hash, same history, same lease.
//
// To add a case, add a row to hostileRows: a save (JetStream publish on an ingest subject, with the
// headers, body and chunks you choose), a request (core NATS request on any subject) or a bare
// publish, and the outcome. A row whose correct outcome the daemon does not give yet carries
// skip: "issue N item M" with the correct expectation, until the fix lands.
func TestHostile_Table(t *testing.T) {
	h := startHostile(t)
	for i, row := range hostileRows(h) {
		t.Run(row.name, func(t *testing.T) {
			if row.skip != "" && os.Getenv("CHECKPOINTD_HOSTILE_ALL") == "" {
				t.Skipf("%s (CHECKPOINTD_HOSTILE_ALL=1 runs it)", row.skip)
			}
			id := fmt.Sprintf("hostile-%d", i)
			if row.setup != nil {
				row.setup(t, h, id)
			}
			switch {
			case row.save != nil:
				h.checkSave(t, id, *row.save, row.want)
			case row.request != nil:
				h.checkRequest(t, *row.request, row.want)
			}
			h.requireUnharmed(t, id)
		})
	}
}

// hostileRow is one bad input and the outcome it must get.
type hostileRow struct {
	name string
	// skip, when set, names the issue item whose fix makes the row pass; the row states the
	// correct outcome, not today's.
	skip string
	// setup, when set, runs before the row's save or request (forge a result, publish chunks...);
	// id is the row's save id.
	setup   func(t *testing.T, h *hostile, id string)
	save    *rawSave
	request *rawRequest
	want    outcome
}

// rawSave is a JetStream publish of a save, built by hand.
type rawSave struct {
	subject string            // default: the ingest subject of the session "a"
	headers map[string]string // Cp-Save-Id is the row's id unless given here
	noID    bool              // send no Cp-Save-Id (nor Nats-Msg-Id) at all
	body    []byte
	chunks  []rawChunk // JetStream-published on the save's chunk subject first
	// anyResult: the result's subject cannot be derived from the save id (a malformed subject or
	// save id); take the first result published on cp.result.> after the save.
	anyResult bool
}

// rawChunk is one piece of a chunked save.
type rawChunk struct {
	index string // the Cp-Chunk header
	body  []byte
}

// rawRequest is a core NATS request.
type rawRequest struct {
	subject string
	body    string
}

// outcome is what a row must get.
type outcome struct {
	code         string // the wire error code of the refusal; "" for success
	index        *int   // for invalid: the message index
	field        string // for invalid: the field path
	head         *uint64
	noResponders bool   // nobody answers the subject at all
	version      uint64 // for a success: the version the save must make
}

func refused(code string) outcome { return outcome{code: code} }

func invalidAt(index int, field string) outcome {
	return outcome{code: wire.CodeInvalid, index: &index, field: field}
}

func ptr[T any](v T) *T { return &v }

// hostileRows is the table. h holds the stored sessions the rows may aim at: h.key("a") (one
// version), h.key("b") (three versions), h.key("leased") (leased by owner-1), and h.key("other")
// in another namespace.
func hostileRows(h *hostile) []hostileRow {
	a, b, leased := h.key("a"), h.key("b"), h.key("leased")
	ingest := func(k wire.Key) string { return wire.IngestSubject(k) }
	api := func(op string) string { return wire.APISubject(wire.DefaultNamespace, op) }
	good := []byte(`[{"role":"user","content":"hostile"}]`)
	other := []byte(`[{"role":"user","content":"earlier"}]`)
	hdr := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	zeros := codec.CompressZstd(make([]byte, 8<<20)) // a bomb: 8 MiB of zeros in a few hundred bytes
	aHead := h.heads[a].Version
	otherHash := wire.Hash([]byte(`[{"role":"user","content":"another conversation"}]`))
	aHash := h.heads[a].Hash
	importHdr := func(version, hash string) map[string]string {
		return hdr(wire.HdrImportVersion, version, wire.HdrImportCreated, "2026-01-02T03:04:05.000000006Z",
			wire.HdrHash, hash, wire.HdrImportVia, wire.ReasonImport, wire.HdrImportSource, "hostile.cpbundle")
	}
	return []hostileRow{
		// Conversations that fail validation: the error names the message and the field.
		{name: "save/truncated JSON", save: &rawSave{body: []byte(`[{"role":"user","content":"a"`)}, want: refused(wire.CodeInvalid)},
		{name: "save/not an array", save: &rawSave{body: []byte(`{"role":"user"}`)}, want: refused(wire.CodeInvalid)},
		{name: "save/empty body", save: &rawSave{body: nil}, want: refused(wire.CodeInvalid)},
		{name: "save/unknown role", save: &rawSave{body: []byte(`[{"role":"user","content":"a"},{"role":"system2","content":"b"}]`)}, want: invalidAt(1, "role")},
		{name: "save/unknown content type", save: &rawSave{body: []byte(`[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"video","url":"x"}]}]`)}, want: invalidAt(0, "content[1].type")},
		{name: "save/malformed usage", save: &rawSave{body: []byte(`[{"role":"assistant","content":[],"usage":{"input":"12"}}]`)}, want: invalidAt(0, "usage.input")},
		{name: "save/appended messages invalid", save: &rawSave{subject: ingest(b), headers: hdr(wire.HdrBaseVersion, strconv.FormatUint(h.heads[b].Version, 10)),
			body: []byte(`[{"role":"user","content":"ok"},{"role":"robot"}]`)}, want: invalidAt(h.heads[b].Counts.Messages+1, "role")},

		// Sizes and encodings.
		{name: "save/too large", save: &rawSave{body: []byte(`[{"role":"user","content":"` + strings.Repeat("a", hostileMaxBytes) + `"}]`)}, want: refused(wire.CodeTooLarge)},
		{name: "save/zstd bomb", save: &rawSave{headers: hdr(wire.HdrEncoding, wire.EncodingZstd), body: zeros}, want: refused(wire.CodeTooLarge)},
		{name: "save/zstd body that is not zstd", save: &rawSave{headers: hdr(wire.HdrEncoding, wire.EncodingZstd), body: good}, want: refused(wire.CodeInvalid)},
		// Several frames are decoded at once (codec.DecompressFrames), within the same limits.
		{name: "save/zstd bombs in several frames", save: &rawSave{headers: hdr(wire.HdrEncoding, wire.EncodingZstd), body: slices.Concat(zeros, zeros, zeros, zeros)}, want: refused(wire.CodeTooLarge)},
		{name: "save/zstd frames, then garbage", save: &rawSave{headers: hdr(wire.HdrEncoding, wire.EncodingZstd),
			body: slices.Concat(codec.CompressZstd(good[:9]), codec.CompressZstd(good[9:]), []byte("junk"))}, want: refused(wire.CodeInvalid)},
		{name: "save/unknown encoding", save: &rawSave{headers: hdr(wire.HdrEncoding, "gzip"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/unknown format", save: &rawSave{headers: hdr(wire.HdrFormat, "9"), body: good}, want: refused(wire.CodeUnknownFormat)},
		{name: "save/format not a number", save: &rawSave{headers: hdr(wire.HdrFormat, "one"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/unknown dialect", save: &rawSave{headers: hdr(wire.HdrDialect, "gpt-4"), body: good}, want: refused(wire.CodeBadRequest)},

		// Headers that are not what they say.
		{name: "save/expected version not a number", save: &rawSave{headers: hdr(wire.HdrExpectedVersion, "-1"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/stale expected version", save: &rawSave{subject: ingest(b), headers: hdr(wire.HdrExpectedVersion, "1"), body: good},
			want: outcome{code: wire.CodeConflict, head: ptr(h.heads[b].Version)}},
		{name: "save/expected version from the future", save: &rawSave{headers: hdr(wire.HdrExpectedVersion, "7"), body: good},
			want: outcome{code: wire.CodeConflict, head: ptr(aHead)}},
		{name: "save/base version not a number", save: &rawSave{headers: hdr(wire.HdrBaseVersion, "x"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/stale base version", save: &rawSave{subject: ingest(b), headers: hdr(wire.HdrBaseVersion, "2"), body: good},
			want: outcome{code: wire.CodeConflict, head: ptr(h.heads[b].Version)}},
		{name: "save/base and expected disagree", save: &rawSave{headers: hdr(wire.HdrBaseVersion, "1", wire.HdrExpectedVersion, "0"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/unknown reason", save: &rawSave{headers: hdr(wire.HdrReason, "because"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/malformed fork reference", save: &rawSave{headers: hdr(wire.HdrForkOf, "not a ref"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/epoch zero", save: &rawSave{headers: hdr(wire.HdrEpoch, "0"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/epoch not a number", save: &rawSave{headers: hdr(wire.HdrEpoch, "first"), body: good}, want: refused(wire.CodeBadRequest)},

		// Leases: nobody writes past the owner.
		{name: "save/leased session without an epoch", save: &rawSave{subject: ingest(leased), body: good}, want: refused(wire.CodeLeased)},
		{name: "save/leased session with a forged epoch", save: &rawSave{subject: ingest(leased), headers: hdr(wire.HdrEpoch, "999"), body: good}, want: refused(wire.CodeFenced)},
		{name: "save/leased session with an old epoch", save: &rawSave{subject: ingest(leased), headers: hdr(wire.HdrEpoch, strconv.FormatUint(h.epoch-1, 10)), body: good}, want: refused(wire.CodeFenced)},

		// Chunked saves whose chunks are not what the save says.
		{name: "chunks/count zero", save: &rawSave{headers: hdr(wire.HdrChunks, "0")}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/count not a number", save: &rawSave{headers: hdr(wire.HdrChunks, "many")}, want: refused(wire.CodeBadRequest)},
		// A count is a plain decimal like every piece number (docs/protocol.md §12): "01" is not 1.
		{name: "chunks/count written 01", save: &rawSave{headers: hdr(wire.HdrChunks, "01"), chunks: []rawChunk{{"0", good}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/count written +1", save: &rawSave{headers: hdr(wire.HdrChunks, "+1"), chunks: []rawChunk{{"0", good}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/none published", save: &rawSave{headers: hdr(wire.HdrChunks, "2")}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/one of two published", save: &rawSave{headers: hdr(wire.HdrChunks, "2"), chunks: []rawChunk{{"0", good}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/out of order", save: &rawSave{headers: hdr(wire.HdrChunks, "2"), chunks: []rawChunk{{"1", good[10:]}, {"0", good[:10]}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/forged count of a trillion", save: &rawSave{headers: hdr(wire.HdrChunks, "1000000000000"), chunks: []rawChunk{{"0", []byte("[")}}}, want: refused(wire.CodeBadRequest)},
		// The pieces of docs/protocol.md §12: each holds a byte at least and carries a plain number.
		{name: "chunks/an empty chunk", save: &rawSave{headers: hdr(wire.HdrChunks, "3"), chunks: []rawChunk{{"0", good[:10]}, {"1", nil}, {"2", good[10:]}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/an index written 01", save: &rawSave{headers: hdr(wire.HdrChunks, "2"), chunks: []rawChunk{{"0", good[:10]}, {"01", good[10:]}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/a gap", save: &rawSave{headers: hdr(wire.HdrChunks, "2"), chunks: []rawChunk{{"0", good[:10]}, {"2", good[10:]}}}, want: refused(wire.CodeBadRequest)},
		// Two attempts of one save id whose chunks differ (an earlier call that never sent its
		// save, then a retry with other bytes): the daemon must not store the earlier bytes, nor
		// a mix of both, as this save's.
		{name: "chunks/an earlier attempt's chunks with other bytes", save: &rawSave{headers: hdr(wire.HdrChunks, "2"),
			chunks: []rawChunk{{"0", other[:10]}, {"1", other[10:]}, {"0", good[:10]}, {"1", good[10:]}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/a repeat with other bytes", save: &rawSave{headers: hdr(wire.HdrChunks, "2"),
			chunks: []rawChunk{{"0", good[:10]}, {"0", []byte("not these!")}, {"1", good[10:]}}}, want: refused(wire.CodeBadRequest)},
		{name: "chunks/zstd pieces that are a bomb", save: &rawSave{headers: hdr(wire.HdrChunks, "1", wire.HdrEncoding, wire.EncodingZstd), chunks: []rawChunk{{"0", zeros}}}, want: refused(wire.CodeTooLarge)},

		// Imports that do not copy what they say.
		{name: "import/version zero", save: &rawSave{headers: importHdr("0", aHash), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "import/created not a time", save: &rawSave{headers: func() map[string]string { m := importHdr("2", aHash); m[wire.HdrImportCreated] = "yesterday"; return m }(), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "import/hash not a hash", save: &rawSave{headers: importHdr("2", "md5:00"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "import/unknown via", save: &rawSave{headers: func() map[string]string { m := importHdr("2", aHash); m[wire.HdrImportVia] = "teleport"; return m }(), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "import/conversation not matching its hash", save: &rawSave{headers: importHdr(strconv.FormatUint(aHead+1, 10), otherHash), body: good}, want: refused(wire.CodeInvalid)},
		{name: "import/a version here with another hash", save: &rawSave{headers: importHdr(strconv.FormatUint(aHead, 10), wire.Hash(good)), body: good},
			want: outcome{code: wire.CodeConflict, head: ptr(aHead)}},

		// Broken today (issue 10); each row states the correct outcome.
		{name: "save/missing save id is answered", save: &rawSave{noID: true, body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/invalid save id is answered", save: &rawSave{headers: hdr(wire.HdrSaveID, "\xff\xfe"), body: good, anyResult: true}, want: refused(wire.CodeBadRequest)},
		{name: "save/oversize save id is answered", save: &rawSave{headers: hdr(wire.HdrSaveID, strings.Repeat("s", 300)), body: good, anyResult: true}, want: refused(wire.CodeBadRequest)},
		{name: "save/malformed subject is answered", save: &rawSave{subject: "cp.ingest.default.two-tokens", body: good, anyResult: true}, want: refused(wire.CodeBadRequest)},
		{name: "save/undecodable subject token is answered", save: &rawSave{subject: "cp.ingest.default.=zz.main", body: good, anyResult: true}, want: refused(wire.CodeBadRequest)},
		{name: "save/forged result does not answer the real save",
			setup: func(t *testing.T, h *hostile, id string) {
				forged := wire.SaveResult{SaveID: id, Key: h.key("forged-target"), OK: true, Duplicate: true,
					Version: &wire.Version{Format: wire.VersionFormat, Key: h.key("forged-target"), Version: 42, Hash: wire.Hash(good)}}
				data, _ := json.Marshal(forged)
				require.NoError(t, h.nc.Publish(wire.ResultSubject(wire.DefaultNamespace, id), data))
				require.NoError(t, h.nc.Flush())
			},
			save: &rawSave{subject: ingest(h.key("forged-target")), body: good}, want: outcome{version: 1}},
		{name: "save/expected version out of range", save: &rawSave{headers: hdr(wire.HdrExpectedVersion, "18446744073709551615"), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "import/version out of range", save: &rawSave{headers: importHdr("18446744073709551615", wire.Hash(good)), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "import/version jumping the destination's line", save: &rawSave{headers: importHdr(strconv.FormatUint(aHead+5, 10), wire.Hash(good)), body: good},
			want: outcome{code: wire.CodeConflict, head: ptr(aHead)}},
		{name: "history/after out of range", request: &rawRequest{api(wire.OpHistory), `{"session":"a","after":18446744073709551615}`}, want: refused(wire.CodeBadRequest)},
		{name: "get/version out of range", request: &rawRequest{api(wire.OpGet), `{"session":"a","version":9007199254740992}`}, want: refused(wire.CodeBadRequest)},

		// Issue 12 (saves as requests): ids and headers a request could carry as well as a publish
		// (JetStream refuses headers above 64 KiB; so does a daemon, for a request).
		{name: "save/save id with dots and wildcards", save: &rawSave{subject: ingest(h.key("dotted")), headers: hdr(wire.HdrSaveID, "a.b.*.>"), body: good}, want: outcome{version: 1}},
		{name: "save/enormous writer header", save: &rawSave{headers: hdr(wire.HdrWriter, strings.Repeat("w", 60<<10)), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/enormous import source header", save: &rawSave{headers: func() map[string]string {
			m := importHdr(strconv.FormatUint(aHead+1, 10), wire.Hash(good))
			m[wire.HdrImportSource] = strings.Repeat("s", 60<<10)
			return m
		}(), body: good}, want: refused(wire.CodeBadRequest)},
		{name: "save/enormous unknown header is ignored", save: &rawSave{subject: ingest(h.key("big header")), headers: hdr("X-Junk", strings.Repeat("j", 60<<10)), body: good}, want: outcome{version: 1}},

		// Requests with bad bodies, ids or values.
		{name: "get/body not JSON", request: &rawRequest{api(wire.OpGet), `{`}, want: refused(wire.CodeBadRequest)},
		{name: "get/version of the wrong type", request: &rawRequest{api(wire.OpGet), `{"session":"a","version":"one"}`}, want: refused(wire.CodeBadRequest)},
		{name: "get/no session", request: &rawRequest{api(wire.OpGet), `{}`}, want: refused(wire.CodeBadRequest)},
		// JSON decoding turns invalid UTF-8 into U+FFFD: a valid id, of a session nobody has.
		{name: "get/invalid UTF-8 session", request: &rawRequest{api(wire.OpGet), "{\"session\":\"\xff\"}"}, want: refused(wire.CodeNotFound)},
		{name: "get/oversize session id", request: &rawRequest{api(wire.OpGet), `{"session":"` + strings.Repeat("x", 300) + `"}`}, want: refused(wire.CodeBadRequest)},
		{name: "get/unknown session", request: &rawRequest{api(wire.OpGet), `{"session":"nobody"}`}, want: refused(wire.CodeNotFound)},
		{name: "get/unknown version", request: &rawRequest{api(wire.OpGet), `{"session":"a","version":99}`}, want: refused(wire.CodeNotFound)},
		{name: "get/undecodable namespace token", request: &rawRequest{"cp.api.=zz.get", `{"session":"a"}`}, want: refused(wire.CodeBadRequest)},
		{name: "history/body not JSON", request: &rawRequest{api(wire.OpHistory), `[1,2`}, want: refused(wire.CodeBadRequest)},
		{name: "history/unknown session", request: &rawRequest{api(wire.OpHistory), `{"session":"nobody"}`}, want: refused(wire.CodeNotFound)},
		// A read of version 0 (or none) is a read of the head, only from its start (its first reply
		// names the version, which later pieces ask for: the head may move between pieces).
		{name: "read/no version: the head", request: &rawRequest{api(wire.OpRead), `{"session":"a"}`}, want: outcome{}},
		{name: "read/version 0 at an offset", request: &rawRequest{api(wire.OpRead), `{"session":"a","version":0,"offset":1}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/version 0 at a huge offset", request: &rawRequest{api(wire.OpRead), `{"session":"a","offset":9007199254740991}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/version 0 past the offset range", request: &rawRequest{api(wire.OpRead), `{"session":"a","offset":9007199254740992}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/head of an unknown session", request: &rawRequest{api(wire.OpRead), `{"session":"nobody","encoding":"zstd"}`}, want: refused(wire.CodeNotFound)},
		{name: "read/head of another namespace's session", request: &rawRequest{api(wire.OpRead), `{"session":"other"}`}, want: refused(wire.CodeNotFound)},
		{name: "read/head with an unknown view", request: &rawRequest{api(wire.OpRead), `{"session":"a","view":"sideways"}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/unknown encoding", request: &rawRequest{api(wire.OpRead), `{"session":"a","version":1,"encoding":"gzip"}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/offset past the end", request: &rawRequest{api(wire.OpRead), `{"session":"a","version":1,"offset":999999999}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/negative offset", request: &rawRequest{api(wire.OpRead), `{"session":"a","version":1,"offset":-1}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/unknown view", request: &rawRequest{api(wire.OpRead), `{"session":"a","version":1,"view":"sideways"}`}, want: refused(wire.CodeBadRequest)},
		{name: "read/merge without versions", request: &rawRequest{api(wire.OpRead), `{"session":"a","merge":{"main":0}}`}, want: refused(wire.CodeBadRequest)},
		{name: "list/negative offset", request: &rawRequest{api(wire.OpList), `{"offset":-1}`}, want: refused(wire.CodeBadRequest)},
		{name: "admin list/body not JSON", request: &rawRequest{wire.AdminListSubject, `nope`}, want: refused(wire.CodeBadRequest)},
		{name: "prune/negative keepLast", request: &rawRequest{api(wire.OpPrune), `{"session":"a","keepLast":-1}`}, want: refused(wire.CodeBadRequest)},
		{name: "prune/no retention given or configured", request: &rawRequest{api(wire.OpPrune), `{"session":"a"}`}, want: refused(wire.CodeBadRequest)},
		{name: "lease/unknown op", request: &rawRequest{api(wire.OpLease), `{"session":"a","op":"steal"}`}, want: refused(wire.CodeBadRequest)},
		{name: "lease/acquire without owner", request: &rawRequest{api(wire.OpLease), `{"session":"a","op":"acquire","ttlMillis":1000}`}, want: refused(wire.CodeBadRequest)},
		{name: "lease/acquire held by another", request: &rawRequest{api(wire.OpLease), `{"session":"leased","op":"acquire","owner":"mallory","ttlMillis":1000}`}, want: refused(wire.CodeLeased)},
		{name: "lease/renew with a forged epoch", request: &rawRequest{api(wire.OpLease), `{"session":"leased","op":"renew","epoch":999,"ttlMillis":1000}`}, want: refused(wire.CodeFenced)},
		{name: "lease/release with a forged epoch", request: &rawRequest{api(wire.OpLease), `{"session":"leased","op":"release","epoch":999}`}, want: refused(wire.CodeFenced)},
		{name: "seal/stale expected version", request: &rawRequest{api(wire.OpSeal), `{"session":"b","expected":1,"movedTo":"nats://elsewhere:4222"}`},
			want: outcome{code: wire.CodeConflict, head: ptr(h.heads[b].Version)}},
		{name: "delete/stale expected version", request: &rawRequest{api(wire.OpDelete), `{"session":"b","expected":1}`}, want: refused(wire.CodeConflict)},
		{name: "delete/unknown session", request: &rawRequest{api(wire.OpDelete), `{"session":"nobody"}`}, want: refused(wire.CodeNotFound)},
		{name: "api/unknown operation", request: &rawRequest{api("bogus"), `{}`}, want: outcome{noResponders: true}},
	}
}

// hostileMaxBytes is the daemon's --max-checkpoint-bytes in the table: small, so "too large" fits
// in one message.
const hostileMaxBytes = 256 << 10

// hostile is the deployment the table runs against, and what it stored before any row ran.
type hostile struct {
	env   *testenv.Env
	nc    *nats.Conn
	js    jetstream.JetStream
	ctx   context.Context
	heads map[wire.Key]wire.Version // the head of every stored session
	hists map[wire.Key]int          // how many versions each has
	epoch uint64                    // the lease epoch of the "leased" session
}

func (h *hostile) key(session string) wire.Key {
	return wire.Key{Namespace: wire.DefaultNamespace, Session: session, Agent: wire.DefaultAgent}
}

// startHostile starts one daemon and stores sessions made of real transcripts: "a" (one version),
// "b" (three, by appends), "leased" (two, then leased by owner-1) and "other" in another namespace.
func startHostile(t *testing.T) *hostile {
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes = hostileMaxBytes })
	ctx := ctxT(t)
	h := &hostile{env: env, nc: env.Conn(), ctx: ctx, heads: map[wire.Key]wire.Version{}, hists: map[wire.Key]int{}}
	var err error
	h.js, err = jetstream.New(h.nc)
	require.NoError(t, err)
	transcript := func(name string, n int) []json.RawMessage {
		data, err := os.ReadFile("../../testdata/corpus/" + name)
		require.NoError(t, err)
		var msgs []json.RawMessage
		require.NoError(t, json.Unmarshal(data, &msgs))
		return msgs[:min(n, len(msgs))]
	}
	join := func(msgs []json.RawMessage) []byte {
		b, err := json.Marshal(msgs)
		require.NoError(t, err)
		return b
	}
	c := env.Client
	_, err = c.Save(ctx, checkpoint.Key{Session: "a"}, join(transcript("openhands_gui_todo_app.json", 18)))
	require.NoError(t, err)
	msgs := transcript("swe_agent_marshmallow_fc.json", 12)
	var v checkpoint.Version
	for i := 4; i <= 12; i += 4 {
		v, err = c.Append(ctx, checkpoint.Key{Session: "b"}, v.Version, join(msgs[i-4:i]))
		require.NoError(t, err)
	}
	msgs = transcript("gemini_cli_codemie_session.json", 10)
	for _, n := range []int{5, 10} {
		_, err = c.Save(ctx, checkpoint.Key{Session: "leased"}, join(msgs[:n]))
		require.NoError(t, err)
	}
	// Leased twice, so that an old epoch exists to be fenced.
	l0, err := c.Acquire(ctx, checkpoint.Key{Session: "leased"}, checkpoint.WithOwner("owner-0"), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	require.NoError(t, l0.Release(ctx))
	l, err := c.Acquire(ctx, checkpoint.Key{Session: "leased"}, checkpoint.WithOwner("owner-1"), checkpoint.WithTTL(time.Hour), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	h.epoch = l.Epoch()
	_, err = c.Save(ctx, checkpoint.Key{Namespace: "tenant-2", Session: "other"}, join(transcript("openhands_multi_swe_bench.json", 20)))
	require.NoError(t, err)

	for _, k := range []checkpoint.Key{{Session: "a"}, {Session: "b"}, {Session: "leased"}, {Namespace: "tenant-2", Session: "other"}} {
		k = k.WithDefaults()
		head, err := c.Get(ctx, k, 0)
		require.NoError(t, err)
		hist, err := c.History(ctx, k)
		require.NoError(t, err)
		h.heads[k], h.hists[k] = head, len(hist)
	}
	require.Equal(t, uint64(3), h.heads[h.key("b")].Version)
	return h
}

// checkSave publishes the row's save by hand and checks its result.
func (h *hostile) checkSave(t *testing.T, id string, s rawSave, want outcome) {
	t.Helper()
	subject := cmpOr(s.subject, wire.IngestSubject(h.key("a")))
	saveID := id
	if v, ok := s.headers[wire.HdrSaveID]; ok {
		saveID = v
	}
	resultSubject := wire.ResultSubject(wire.DefaultNamespace, saveID)
	if s.anyResult || s.noID {
		resultSubject = wire.SubjectRoot + ".result.>"
	}
	sub, err := h.nc.SubscribeSync(resultSubject)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()

	for _, c := range s.chunks {
		m := nats.NewMsg(wire.ChunkSubject(wire.DefaultNamespace, saveID))
		m.Header.Set(wire.HdrChunk, c.index)
		m.Data = c.body
		_, err := h.js.PublishMsg(h.ctx, m)
		require.NoError(t, err, "chunk %s", c.index)
	}
	m := nats.NewMsg(subject)
	if !s.noID {
		m.Header.Set(wire.HdrSaveID, saveID)
		m.Header.Set(wire.HdrMsgID, id)
	}
	for k, v := range s.headers {
		m.Header.Set(k, v)
	}
	m.Data = s.body
	_, err = h.js.PublishMsg(h.ctx, m)
	require.NoError(t, err, "JetStream takes the save: from here on it must be answered")

	res := h.awaitResult(t, sub, resultSubject, s.anyResult || s.noID)
	if want.code == "" {
		require.Nil(t, res.Error, "the save is stored")
		require.True(t, res.OK)
		require.False(t, res.Duplicate, "a new version, not someone else's result")
		require.NotNil(t, res.Version)
		require.Equal(t, want.version, res.Version.Version)
		return
	}
	require.False(t, res.OK, "refused, not stored: %+v", res.Version)
	require.NotNil(t, res.Error)
	h.requireError(t, res.Error, want)
}

// awaitResult waits for the save's result, live or (when it was published before the subscription
// saw it) stored on CP_RESULTS.
func (h *hostile) awaitResult(t *testing.T, sub *nats.Subscription, subject string, any bool) wire.SaveResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m, err := sub.NextMsg(250 * time.Millisecond)
		if err == nil {
			var res wire.SaveResult
			require.NoError(t, json.Unmarshal(m.Data, &res), "result on %s", m.Subject)
			return res
		}
		if any {
			continue
		}
		s, err := h.js.Stream(h.ctx, wire.StreamResults)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // no result stored yet: the first one makes the stream
		}
		require.NoError(t, err)
		if raw, err := s.GetLastMsgForSubject(h.ctx, subject); err == nil {
			var res wire.SaveResult
			require.NoError(t, json.Unmarshal(raw.Data, &res))
			return res
		}
	}
	t.Fatalf("no result on %s: JetStream acknowledged the save and the daemon never answered it", subject)
	return wire.SaveResult{}
}

// checkRequest sends the row's request with core NATS and checks the typed error reply.
func (h *hostile) checkRequest(t *testing.T, r rawRequest, want outcome) {
	t.Helper()
	m, err := h.nc.Request(r.subject, []byte(r.body), 10*time.Second)
	if want.noResponders {
		require.ErrorIs(t, err, nats.ErrNoResponders)
		return
	}
	require.NoError(t, err)
	if want.code == "" {
		require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
		return
	}
	require.Equal(t, wire.StatusCode(want.code), m.Header.Get(wire.HdrServiceErrorCode), "reply: %s", m.Data)
	var we wire.Error
	require.NoError(t, json.Unmarshal(m.Data, &we), "an error reply's body is the typed error: %s", m.Data)
	h.requireError(t, &we, want)
}

func (h *hostile) requireError(t *testing.T, got *wire.Error, want outcome) {
	t.Helper()
	require.Equal(t, want.code, got.Code, "%s", got.Message)
	require.NotEmpty(t, got.Message, "the error says what was wrong")
	if want.index != nil {
		require.NotNil(t, got.Index, "the error names the message: %s", got.Message)
		require.Equal(t, *want.index, *got.Index, got.Message)
		require.Equal(t, want.field, got.Field, got.Message)
		require.Contains(t, got.Message, want.field)
	}
	if want.head != nil {
		require.NotNil(t, got.Head, "a conflict says where the head is: %s", got.Message)
		require.Equal(t, *want.head, *got.Head)
	}
}

// requireUnharmed checks that the daemon still serves, and that no stored session changed.
func (h *hostile) requireUnharmed(t *testing.T, id string) {
	t.Helper()
	c := h.env.Client
	require.True(t, h.env.Daemon.Ready(), "the daemon is still serving")
	scratch := checkpoint.Key{Session: "scratch " + id}
	conv := []byte(`[{"role":"user","content":"still here after ` + id + `"}]`)
	v, err := c.Save(h.ctx, scratch, conv)
	require.NoError(t, err, "a normal save works")
	got, _, err := c.Restore(h.ctx, scratch, v.Version)
	require.NoError(t, err, "a normal restore works")
	require.Equal(t, string(conv), string(got))
	for k, want := range h.heads {
		head, err := c.Get(h.ctx, k, 0)
		require.NoError(t, err, "%s", k)
		require.Equal(t, want.Version, head.Version, "%s: head version unchanged", k)
		require.Equal(t, want.Hash, head.Hash, "%s: head hash unchanged", k)
		require.Equal(t, want.SaveID, head.SaveID, "%s: head save unchanged", k)
		hist, err := c.History(h.ctx, k)
		require.NoError(t, err)
		require.Len(t, hist, h.hists[k], "%s: history unchanged", k)
	}
	l, err := c.LeaseStatus(h.ctx, h.key("leased"))
	require.NoError(t, err)
	require.Equal(t, h.epoch, l.Epoch, "the lease is unchanged")
	require.Equal(t, "owner-1", l.Owner)
	_, err = c.Get(h.ctx, h.key("nobody"), 0)
	require.True(t, errors.Is(err, checkpoint.ErrNotFound), "no row created a session by accident: %v", err)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
