package ingest

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The header parsing and the body assembly of a save, fuzzed without a server: both are pure.
// `go test` runs the seeds; `go test -fuzz FuzzIngestHeaders -run XXX ./internal/transfer/` explores.

const fuzzMaxBytes = 1 << 20

// FuzzIngestHeaders: whatever the headers, parseSaveHeaders never panics, refuses with bad_request
// (unknown_format for Cp-Format) and never lets a number out of its range.
func FuzzIngestHeaders(f *testing.F) {
	hash := wire.Hash([]byte("[]"))
	now := time.Now().UTC().Format(time.RFC3339Nano)
	fork := wire.Key{Namespace: "ns", Session: "s", Agent: "main"}.Token() + ".3"
	for _, s := range [][13]string{
		{}, // a plain save
		{"0", "", "", "", "", "1", "zstd", "turn", "", "", "", "", ""},
		{"7", "7", "3", "", "", "", "identity", "pause", "", "", "", "", ""},
		{"0", "", "", fork, "", "", "zstd", "fork", "", "", "", "", ""},
		{"", "", "", "", "12", "", "zstd", "", "", "", "", "", ""},
		{"", "", "", "", "", "", "zstd", "migrate", "41", now, hash, "migrate", "nats://a"},
		{"18446744073709551615", "9007199254740992", "0", fork + "9", "1000000000000", "2", "gzip", "x", "18446744073709551615", "yesterday", "md5:1", "copy", ""},
		{"-1", "+1", " 1", "a.b.c.", "0", "1e3", "", "", "0", now, hash, "import", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12])
	}
	key := wire.Key{Namespace: "ns", Session: "s", Agent: "main"}
	f.Fuzz(func(t *testing.T, expected, base, epoch, forkOf, chunks, format, enc, reason, impVersion, impCreated, impHash, impVia, impSource string) {
		h := nats.Header{}
		for name, v := range map[string]string{
			wire.HdrExpectedVersion: expected, wire.HdrBaseVersion: base, wire.HdrEpoch: epoch, wire.HdrForkOf: forkOf,
			wire.HdrChunks: chunks, wire.HdrFormat: format, wire.HdrEncoding: enc, wire.HdrReason: reason,
			wire.HdrImportVersion: impVersion, wire.HdrImportCreated: impCreated, wire.HdrHash: impHash,
			wire.HdrImportVia: impVia, wire.HdrImportSource: impSource,
		} {
			if v != "" {
				h.Set(name, v)
			}
		}
		hs, err := parseSaveHeaders(h, key, "id", time.Now(), fuzzMaxBytes)
		if err != nil {
			code := edge.ToWireError(err).Code
			require.Contains(t, []string{wire.CodeBadRequest, wire.CodeUnknownFormat}, code, "%v", err)
			require.Contains(t, err.Error(), "Cp-", "the refusal names the header: %v", err)
			return
		}
		r := hs.req
		for _, v := range []*uint64{r.Expected, r.Base} {
			require.True(t, v == nil || *v <= wire.MaxVersion)
		}
		require.LessOrEqual(t, r.Epoch, wire.MaxVersion)
		require.True(t, r.ForkOf == nil || r.ForkOf.Version >= 1 && r.ForkOf.Version <= wire.MaxVersion)
		require.True(t, r.Import == nil || r.Import.Version >= 1 && r.Import.Version <= wire.MaxVersion)
		require.True(t, hs.chunks >= 0 && int64(hs.chunks) <= fuzzMaxBytes)
		require.Contains(t, []string{wire.EncodingIdentity, wire.EncodingZstd}, hs.encoding)
		require.True(t, r.Reason == "" || wire.ValidReason(r.Reason))
	})
}

// Modes of FuzzChunkAssembly's body.
const (
	asIdentity = iota // the bytes, as sent
	asZstd            // the bytes, compressed as a client would
	asFrames          // the bytes taken as zstd frames: whatever a hostile client sends
)

// FuzzChunkAssembly: a body cut into pieces (cuts gives their lengths), announced as a count of
// chunks that may be wrong, decoded as the daemon does (readChunks), with a budget
// accounting every buffer. It never panics; it refuses with bad_request, too_large or invalid;
// what it returns is exactly what was sent; the budget is given back whole.
func FuzzChunkAssembly(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/corpus/*.json")
	for i, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		data = data[:min(len(data), 4<<10)] // small seeds: the fuzzer mutates and minimizes them
		f.Add(data, uint8(i%3), []byte{7, 200, 0, 31}, int8(0))
	}
	f.Add([]byte("[]"), uint8(asIdentity), []byte{}, int8(0))
	f.Add([]byte(`[{"role":"user","content":"hi"}]`), uint8(asZstd), []byte{1}, int8(1))
	f.Add(codec.CompressZstd(make([]byte, 4<<20)), uint8(asFrames), []byte{3, 3}, int8(0)) // a bomb
	f.Add(codec.CompressZstd([]byte(`[1]`)), uint8(asFrames), []byte{2}, int8(-1))
	f.Fuzz(func(t *testing.T, body []byte, mode uint8, cuts []byte, miscount int8) {
		mode %= 3
		sent := body
		enc := wire.EncodingIdentity
		if mode != asIdentity {
			enc = wire.EncodingZstd
		}
		if mode == asZstd {
			sent = codec.CompressZstd(body)
		}
		pieces := cut(sent, cuts)
		n := len(pieces) + int(miscount%3)
		if n < 1 {
			return // a count below 1 is refused by parseSaveHeaders
		}
		i := 0
		next := func() (int64, []byte, error) { // the chunks in stream order, then none
			if i >= len(pieces) {
				return 0, nil, io.EOF
			}
			i++
			return int64(i - 1), pieces[i-1], nil
		}
		b := NewBudget(1 << 40)
		mem := b.begin(context.Background())
		got, _, err := readChunks("cp.chunk.ns.fuzz", n, next, enc, fuzzMaxBytes, mem)
		mem.end()
		require.Zero(t, b.inUse(), "the budget is given back whole")
		if err != nil {
			require.True(t, isRefusal(err), "a refusal, not a storage error: %v", err)
			require.Contains(t, []string{wire.CodeBadRequest, wire.CodeTooLarge, wire.CodeInvalid}, edge.ToWireError(err).Code, "%v", err)
			return
		}
		require.LessOrEqual(t, n, len(pieces), "a missing chunk is never read as the end")
		read := bytes.Join(pieces[:n], nil)
		switch mode {
		case asIdentity:
			require.True(t, bytes.Equal(read, got))
		case asZstd:
			if n == len(pieces) {
				require.True(t, bytes.Equal(body, got))
			}
		case asFrames:
			want, err := reference.DecodeAll(read, nil)
			require.NoError(t, err, "what the daemon decoded, the reference decodes")
			require.True(t, bytes.Equal(want, got))
		}
		require.LessOrEqual(t, int64(len(got)), int64(fuzzMaxBytes))
	})
}

// reference decodes what FuzzChunkAssembly's hostile frames decode to, without this package's code.
var reference, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(fuzzMaxBytes+1))

// cut splits data into pieces whose lengths cuts gives in turn (each byte, times 64, plus one; the
// last piece takes the rest). No cuts: one piece.
func cut(data []byte, cuts []byte) [][]byte {
	var pieces [][]byte
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(cuts) > 0 {
			n = min(n, int(cuts[i%len(cuts)])*64+1)
		}
		pieces = append(pieces, data[:n])
		data = data[n:]
	}
	if len(pieces) == 0 {
		pieces = [][]byte{{}}
	}
	return pieces
}

func TestCut(t *testing.T) {
	require.Equal(t, [][]byte{[]byte("abc")}, cut([]byte("abc"), nil))
	require.Equal(t, [][]byte{{}}, cut(nil, []byte{1}))
	require.Len(t, cut(make([]byte, 200), []byte{0}), 200)
	require.Len(t, cut(make([]byte, 150), []byte{1}), 3, "65, 65 and the rest")
}
