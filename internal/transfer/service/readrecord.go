package service

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// readVersion finds the version a read of one version names: the head for version 0, once the
// saves queued for the session are settled (read-your-writes, as get), else that exact version.
func (s *Service) readVersion(ctx context.Context, ns string, req wire.ReadRequest) (wire.Version, error) {
	if req.Version == 0 {
		return s.version(ctx, ns, req.SessionRequest, 0)
	}
	return s.exactVersion(ctx, ns, req.SessionRequest, req.Version)
}

// recordHeaders remembers the Cp-Version headers versionHeader built, by record: a head restored
// again (from the read cache) has the same record, whose header is then not encoded again
// (json.Marshal of the record cost ~4 µs of the daemon's ~40 per restore on two busy cores:
// docs/format.md §8.15k). The record is the key itself (every field compared, as ==: equal
// records encode alike); one with a fork reference or an origin is not kept (their pointers are
// new for every lookup, so it would never be found again). Bounded: emptied when full.
type recordHeaders struct {
	mu sync.Mutex
	m  map[recordRoom]string
}

// recordRoom is a record and the room of the reply it is for (versionHeader's arguments).
type recordRoom struct {
	v    wire.Version
	room int64
}

// maxRecordHeaders bounds recordHeaders: ~1 KB each.
const maxRecordHeaders = 4096

// of is versionHeader(v, room), remembered.
func (h *recordHeaders) of(v wire.Version, room int64) string {
	if v.ForkOf != nil || v.Origin != nil {
		return versionHeader(v, room)
	}
	k := recordRoom{v: v, room: room}
	h.mu.Lock()
	hdr, ok := h.m[k]
	h.mu.Unlock()
	if ok {
		return hdr
	}
	hdr = versionHeader(v, room)
	h.mu.Lock()
	if h.m == nil || len(h.m) >= maxRecordHeaders {
		h.m = make(map[recordRoom]string)
	}
	h.m[k] = hdr
	h.mu.Unlock()
	return hdr
}

// versionHeader is the Cp-Version header of a read's first piece: v's record as get returns it, so
// that a restore is one request. It is built from the engine's record only (nothing of the request
// is echoed), in ASCII only, so that any header codec carries it unchanged. "" when it would not
// fit: beyond wire.MaxVersionHeaderBytes (no record reaches it), or beyond half of what a reply
// may hold (a server with a tiny max_payload); the client then asks get.
func versionHeader(v wire.Version, room int64) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	h := asciiJSON(j)
	if len(h) > wire.MaxVersionHeaderBytes || int64(len(h)) > room/2 {
		return ""
	}
	return h
}

// asciiJSON rewrites JSON text j (valid UTF-8, as json.Marshal writes it) with every character
// outside printable ASCII escaped as \uXXXX (a surrogate pair above U+FFFF): the same JSON value.
// json.Marshal escapes the control characters already; DEL and non-ASCII are left to this.
func asciiJSON(j []byte) string {
	if printableASCII(j) { // the common case: nothing to escape, no second buffer
		return string(j)
	}
	out := make([]byte, 0, len(j))
	for i := 0; i < len(j); {
		c := j[i]
		if c < utf8.RuneSelf && c != 0x7f {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(j[i:])
		i += n
		if r > 0xffff {
			r -= 0x10000
			out = appendEscape(out, 0xd800+(r>>10))
			r = 0xdc00 + (r & 0x3ff)
		}
		out = appendEscape(out, r)
	}
	return string(out)
}

// printableASCII reports whether j holds no byte that asciiJSON would escape.
func printableASCII(j []byte) bool {
	for _, c := range j {
		if c >= utf8.RuneSelf || c == 0x7f {
			return false
		}
	}
	return true
}

// appendEscape appends \uXXXX for the UTF-16 code unit u.
func appendEscape(out []byte, u rune) []byte {
	h := strconv.FormatInt(int64(u), 16)
	out = append(out, `\u`...)
	for range 4 - len(h) {
		out = append(out, '0')
	}
	return append(out, h...)
}
