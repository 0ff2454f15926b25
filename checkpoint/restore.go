package checkpoint

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// RestoreOption selects what Restore returns.
type RestoreOption func(*wire.ReadRequest)

// WithView selects messages: "full" (the default: every message) or "request" (from the last
// compaction marker on, the marker included: what the model sees after a compaction).
func WithView(view string) RestoreOption { return func(r *wire.ReadRequest) { r.View = view } }

// WithMaxMessages keeps only the most recent n messages (n rounded down to even), never starting on
// a tool result whose call was cut off.
func WithMaxMessages(n int) RestoreOption { return func(r *wire.ReadRequest) { r.MaxMessages = n } }

// Restore returns the conversation of one version of key (the head when version is 0) as the JSON
// array that was saved, verified against the hash recorded at save time, and that version's record.
// Options select a view of it instead of every message. A conversation that fits one reply is one
// request: the read's first reply carries the version's record (docs/protocol.md §5).
func (c *Client) Restore(ctx context.Context, key Key, version uint64, opts ...RestoreOption) ([]byte, Version, error) {
	key, err := checkKey(key)
	if err != nil {
		return nil, Version{}, err
	}
	req := wire.ReadRequest{SessionRequest: sessionRequest(key), Version: version}
	for _, o := range opts {
		o(&req)
	}
	v, first, err := c.openRead(ctx, key, req)
	if err != nil {
		return nil, Version{}, err
	}
	// The later pieces of a read of the head ask for the version it found; a view of v is never
	// longer than v.
	req.Version = v.Version
	raw, hash, err := c.read(ctx, v, req, v.RawBytes, first)
	if err != nil {
		return nil, Version{}, err
	}
	full := (req.View == "" || req.View == wire.ViewFull) && req.MaxMessages == 0
	if full {
		// The version's record names the bytes as they were saved.
		if err := pieces.Check(int64(len(raw)), v.RawBytes, hash, v.Hash); err != nil {
			return nil, Version{}, fmt.Errorf("%w: version %d of %s, against its record: %v", ErrCorrupt, v.Version, v.Key, err)
		}
	}
	return raw, v, nil
}

// openRead asks for the first piece of the read req names (as zstd) and takes the version's record
// from it (Cp-Version), so that a restore is one request when the conversation fits one reply. It
// returns the record and the first piece, to be continued. A daemon before checkpointd 0.5 sends
// no record: it refuses a read of version 0 as a bad request, and answers an exact version without
// it. The record is then asked for with get, as before, and the piece kept if it is of the version
// get named (an exact one); a piece of the head is not, the head may have moved since.
func (c *Client) openRead(ctx context.Context, key Key, req wire.ReadRequest) (Version, *nats.Msg, error) {
	req.Encoding = wire.EncodingZstd
	msg, err := c.request(ctx, wire.APISubject(key.Namespace, wire.OpRead), req)
	if err == nil {
		if h := msg.Header.Get(wire.HdrVersion); h != "" {
			v, err := recordOf(h, key, req.Version)
			return v, msg, err
		}
	} else if e := (*Error)(nil); !errors.As(err, &e) || e.Code != wire.CodeBadRequest {
		return Version{}, nil, err
	}
	v, gerr := c.Get(ctx, key, req.Version)
	if gerr != nil {
		return Version{}, nil, gerr
	}
	if err != nil || req.Version == 0 {
		return v, nil, nil
	}
	return v, msg, nil
}

// recordOf decodes the record a read's first piece carries, and checks that it is of the session
// and version asked for (any version, for the head) in a format this SDK knows. A record in the
// plain shape the daemon writes is read without encoding/json (wire.PlainVersion: 6-10 µs less
// per restore on two busy cores, docs/format.md §8.15k); any other goes to encoding/json.
func recordOf(h string, key Key, version uint64) (Version, error) {
	v, ok := wire.PlainVersion([]byte(h))
	if !ok {
		v = Version{}
		if err := json.Unmarshal([]byte(h), &v); err != nil {
			return v, fmt.Errorf("%w: read of %s: header %s is not a version record: %v", ErrCorrupt, key, wire.HdrVersion, err)
		}
	}
	switch {
	case v.Format != wire.VersionFormat:
		return v, fmt.Errorf("%w: read of %s: a version record of format %d, this SDK knows %d", ErrCorrupt, key, v.Format, wire.VersionFormat)
	case v.Key != key || v.Version == 0 || version != 0 && v.Version != version:
		return v, fmt.Errorf("%w: read of version %d of %s: the reply carries the record of version %d of %s", ErrCorrupt, version, key, v.Version, v.Key)
	}
	return v, nil
}

// read fetches the conversation (or view) of v piece by piece and returns it with its SHA-256, which
// it checked against the hash the daemon gives for it (ErrCorrupt). The body travels compressed
// (zstd) and is decoded here, into at most limit bytes. It is asked for again as identity when the
// zstd read is refused as a bad request (a daemon before checkpointd 0.4 serves only identity; a
// request bad for another reason is refused twice), or when it does not decode to bytes of the
// right hash: its pieces may have come from daemons of different builds, whose re-encoded frames
// can differ, while identity bytes are the same from every daemon (which checks them before
// sending them). first, when not nil, is the reply to the read's first piece as zstd, already
// received.
func (c *Client) read(ctx context.Context, v Version, req wire.ReadRequest, limit int64, first *nats.Msg) ([]byte, string, error) {
	req.Encoding = wire.EncodingZstd
	out, hash, err := c.readAs(ctx, v, req, limit, first)
	if e := (*Error)(nil); errors.As(err, &e) && e.Code == wire.CodeBadRequest || errors.Is(err, ErrCorrupt) {
		req.Encoding = wire.EncodingIdentity
		return c.readAs(ctx, v, req, limit, nil)
	}
	return out, hash, err
}

// readAs reads the body in the encoding req asks for, or in the one the reply says (identity from
// an older daemon), and decodes it: no more than limit bytes, and exactly the length the reply
// announced. first, when not nil, is the reply to the first piece, already received. The pieces
// are joined by offset (docs/protocol.md §12): each must carry the Cp-Offset asked for and the
// same totals and hash as the first; the body grows with the bytes that arrive, never sized from
// the Cp-Total a daemon announces.
func (c *Client) readAs(ctx context.Context, v Version, req wire.ReadRequest, limit int64, first *nats.Msg) ([]byte, string, error) {
	subject := wire.APISubject(v.Key.Namespace, wire.OpRead)
	j := pieces.NewJoiner(pieces.Config{By: pieces.ByOffset, Limit: maxZstdBytes(limit)})
	var b readReply
	var whole []byte // the body, when one piece holds all of it: used as it arrived, not copied
	for {
		req.Offset = j.Next()
		msg := first
		if first = nil; msg == nil {
			var err error
			if msg, err = c.request(ctx, subject, req); err != nil {
				return nil, "", err
			}
		}
		got, err := readHeaders(msg, limit)
		if err != nil {
			return nil, "", fmt.Errorf("checkpoint: read of version %d: %w", v.Version, err)
		}
		b = got
		if err = j.Expect(got.total, got.tag()); err == nil {
			var at int64
			if at, err = pieces.ParseNumber(wire.HdrOffset, msg.Header.Get(wire.HdrOffset)); err == nil {
				if at == 0 && int64(len(msg.Data)) == got.total {
					_, err = j.Take(at, msg.Data) // checked as any piece is, kept here
					whole = msg.Data
				} else {
					_, err = j.Add(at, msg.Data)
				}
			}
		}
		if err != nil {
			return nil, "", fmt.Errorf("%w: read of version %d of %s: %v", ErrCorrupt, v.Version, v.Key, err)
		}
		if j.Done() {
			break
		}
	}
	body, err := j.Finish()
	if err != nil {
		return nil, "", err
	}
	if whole != nil {
		body = whole
	}
	raw, hash := body, ""
	if b.encoding == wire.EncodingIdentity {
		hash = wire.Hash(raw)
	} else {
		var err error
		if raw, hash, err = decode(body, b, v); err != nil {
			return nil, "", err
		}
	}
	if err := pieces.Check(int64(len(raw)), b.raw, hash, b.hash); err != nil {
		return nil, "", fmt.Errorf("%w: read of version %d of %s: %v", ErrCorrupt, v.Version, v.Key, err)
	}
	return raw, hash, nil
}

// decodeBesideBytes is the decoded size from which decode hashes on a goroutine of its own: below
// it, handing the bytes over costs more than the hash it would take off the restore's latency
// (BenchmarkDecode: 19.5 KB decoded and hashed in turn took 30-40 µs, beside each other 45-65 µs).
const decodeBesideBytes = 64 << 10

// hashPiece is the least decode hands its hashing goroutine at a time: every zstd block (up to
// 128 KiB decoded) as it is done, so that the hash starts ~0.1 ms into the decoding and ends about
// one block's hash after it (SHA-256 runs at about the speed of the decoding). Handing over more at
// a time saves wake-ups but starts and ends the hash later; with no core to spare for it, neither
// helps (BenchmarkDecode then finds decode 1.1-1.2 times serial, whatever the size of the pieces).
const hashPiece = 64 << 10

// decode decompresses a zstd read body, hashing the decoded bytes on another goroutine as they come,
// so that the check of the hash costs (almost) no time after the decoding: it returns the decoded
// bytes and their hash. A small body is hashed after it is decoded.
func decode(body []byte, b readReply, v Version) ([]byte, string, error) {
	return decodeHashing(body, b, v, hashPiece)
}

// decodeHashing is decode, handing the hashing goroutine at least piece bytes at a time (but the
// last run).
func decodeHashing(body []byte, b readReply, v Version, piece int) ([]byte, string, error) {
	if b.raw < decodeBesideBytes {
		raw, err := codec.DecompressExact(body, b.raw, nil)
		if err != nil {
			return nil, "", fmt.Errorf("%w: read of version %d: %v", ErrCorrupt, v.Version, err)
		}
		return raw, wire.Hash(raw), nil
	}
	pieces := make(chan []byte, 64)
	sum := make(chan string, 1)
	go func() {
		h := sha256.New()
		for p := range pieces {
			h.Write(p)
		}
		sum <- "sha256:" + hex.EncodeToString(h.Sum(nil))
	}()
	// DecompressExact gives the bytes in runs that each continue the one before in the buffer it
	// decodes into, so that a piece grows by reslicing.
	var pending []byte
	raw, err := codec.DecompressExact(body, b.raw, func(p []byte) {
		if pending == nil {
			pending = p
		} else {
			pending = pending[:len(pending)+len(p)]
		}
		if len(pending) >= piece {
			pieces <- pending
			pending = nil
		}
	})
	if len(pending) > 0 && err == nil {
		pieces <- pending
	}
	close(pieces)
	hash := <-sum
	if err != nil {
		return nil, "", fmt.Errorf("%w: read of version %d: %v", ErrCorrupt, v.Version, err)
	}
	return raw, hash, nil
}

// readReply is what the headers of a read's piece say of the whole body; every piece of one read
// says the same.
type readReply struct {
	total    int64  // Cp-Total: the body's length as it travels
	raw      int64  // its length decoded (Cp-Raw-Total, or Cp-Total for identity)
	encoding string // Cp-Encoding
	hash     string // Cp-Hash
}

// tag is what a piece says of the whole body besides its length: every piece of one read says
// the same.
func (r readReply) tag() string {
	return r.encoding + " " + strconv.FormatInt(r.raw, 10) + " " + r.hash
}

// readHeaders reads and checks the headers of a read's piece: a decoded length above limit, or a
// compressed one that no zstd stream of that many bytes can have, is refused before anything is
// allocated for it.
func readHeaders(msg *nats.Msg, limit int64) (readReply, error) {
	r := readReply{encoding: cmp.Or(msg.Header.Get(wire.HdrEncoding), wire.EncodingIdentity), hash: msg.Header.Get(wire.HdrHash)}
	var err error
	if r.total, err = strconv.ParseInt(msg.Header.Get(wire.HdrTotal), 10, 64); err != nil || r.total < 0 {
		return r, errors.New("reply without a valid " + wire.HdrTotal + " header")
	}
	switch r.encoding {
	case wire.EncodingIdentity:
		r.raw = r.total
	case wire.EncodingZstd:
		if r.raw, err = strconv.ParseInt(msg.Header.Get(wire.HdrRawTotal), 10, 64); err != nil || r.raw < 0 {
			return r, errors.New("zstd reply without a valid " + wire.HdrRawTotal + " header")
		}
		if r.total > maxZstdBytes(r.raw) {
			return r, fmt.Errorf("%s %d is more than any zstd stream of %d bytes needs", wire.HdrTotal, r.total, r.raw)
		}
	default:
		return r, fmt.Errorf("reply in unknown encoding %q", r.encoding)
	}
	if r.raw > limit {
		return r, fmt.Errorf("%w: the reply holds %d bytes, more than the %d expected", ErrTooLarge, r.raw, limit)
	}
	return r, nil
}

// maxZstdBytes bounds the length of a zstd stream of raw bytes as checkpointd writes one:
// incompressible blocks are stored as they are (3 bytes of header per block of up to 128 KiB), and
// a frame's header and checksum take under 20 bytes, a frame per extent and per value (each value
// at least 32 KiB, so raw/128 leaves 256 bytes for each) and one between each, and 64 KiB covers the
// frames of any layout's extents.
func maxZstdBytes(raw int64) int64 { return raw + raw/128 + 64<<10 }

// RestoreMerged returns the merged view of every agent of a session: their head versions'
// messages interleaved by timestamp, each with an "agentId" member added (and, with prefix, its
// first text prefixed "[agentId] ", as multi-agent routers show it), and the version merged for
// each agent. It is a view: what is stored is not changed.
func (c *Client) RestoreMerged(ctx context.Context, namespace, session string, prefix bool, opts ...RestoreOption) ([]byte, map[string]uint64, error) {
	k, err := checkKey(Key{Namespace: namespace, Session: session})
	if err != nil {
		return nil, nil, err
	}
	agents, err := c.list(ctx, wire.APISubject(k.Namespace, wire.OpList), session)
	if err != nil {
		return nil, nil, err
	}
	if len(agents) == 0 {
		return nil, nil, &Error{Code: wire.CodeNotFound, Message: "session " + session + ": no agent has a version", Index: -1, Offset: -1}
	}
	req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: session}, Merge: map[string]uint64{}, AgentPrefix: prefix}
	for _, v := range agents {
		req.Merge[v.Key.Agent] = v.Version.Version
	}
	for _, o := range opts {
		o(&req)
	}
	raw, _, err := c.read(ctx, Version{Key: k}, req, c.maxRestore, nil) // checked against the daemon's hash
	if err != nil {
		return nil, nil, err
	}
	return raw, req.Merge, nil
}
