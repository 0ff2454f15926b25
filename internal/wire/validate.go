package wire

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Ranges of the integers a client sends. Every integer of a request body or a save's headers is
// checked against its range before it is used, so none can wrap where it is used (a version plus
// one, a number of seconds times 1e9) and none is larger than a JSON client can hold exactly.
const (
	// MaxAgeSeconds is the largest retention age a prune takes: the whole seconds a Go duration holds
	// (about 292 years). Above it the age would overflow into a small or negative one.
	MaxAgeSeconds = math.MaxInt64 / int64(time.Second)
	// MaxLeaseTTLMillis is the longest lease TTL (24 h): a lease is renewed while its owner lives, it
	// is not a lock to hold for days.
	MaxLeaseTTLMillis = int64(24 * time.Hour / time.Millisecond)
	// MaxCount bounds every other count and offset a request carries (list offset, read offset,
	// maxMessages, keepLast): like versions, at most 2^53-1.
	MaxCount = int64(MaxVersion)
)

// OutOfRange is the refusal of a request field or header whose integer is outside its range: a
// bad_request naming what and the range allowed.
func OutOfRange(what string, got any, lo, hi uint64) *Error {
	return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s: %v is outside %d..%d", what, got, lo, hi)}
}

// ParseHeaderUint reads header name's decimal value s, refusing anything that is not an integer
// in lo..hi with a bad_request that names the header and the range.
func ParseHeaderUint(name, s string, lo, hi uint64) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("header %s: %q is not an integer in %d..%d", name, s, lo, hi)}
	}
	return n, nil
}

// ParseHeaderCount is ParseHeaderUint for a count that must be spelled as every sender writes
// it: a plain decimal, no sign and no leading zero (docs/protocol.md §12). "007" would be read as
// 7 by ParseHeaderUint; a count is refused unless it is written exactly as strconv writes it.
func ParseHeaderCount(name, s string, lo, hi uint64) (uint64, error) {
	n, err := ParseHeaderUint(name, s, lo, hi)
	if err == nil && strconv.FormatUint(n, 10) != s {
		return 0, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("header %s: %q is not a plain decimal integer in %d..%d (no sign, no leading zero)", name, s, lo, hi)}
	}
	return n, err
}

// checkUint refuses a field above hi (its type keeps it from being negative).
func checkUint(field string, n, hi uint64) error {
	if n > hi {
		return OutOfRange("field "+field, n, 0, hi)
	}
	return nil
}

// checkInt refuses a field outside 0..hi.
func checkInt(field string, n, hi int64) error {
	if n < 0 || n > hi {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("field %s: %d is outside 0..%d", field, n, hi)}
	}
	return nil
}

// Validate checks the integers of a get request.
func (r GetRequest) Validate() error { return checkUint("version", r.Version, MaxVersion) }

// Validate checks the integers of a history request.
func (r HistoryRequest) Validate() error {
	if err := checkUint("after", r.After, MaxVersion); err != nil {
		return err
	}
	if err := checkInt("limit", int64(r.Limit), MaxCount); err != nil {
		return err
	}
	return checkCursor(r.Cursor)
}

// Validate checks the integers of a list request.
func (r ListRequest) Validate() error {
	if err := checkInt("offset", int64(r.Offset), MaxCount); err != nil {
		return err
	}
	if err := checkInt("limit", int64(r.Limit), MaxListLimit); err != nil {
		return err
	}
	return checkCursor(r.Cursor)
}

// MaxCursorBytes bounds a paging cursor: the daemon makes them far shorter.
const MaxCursorBytes = 1024

func checkCursor(c string) error {
	if len(c) > MaxCursorBytes {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("field cursor: %d bytes, at most %d (send the cursor of the previous reply as it came)", len(c), MaxCursorBytes)}
	}
	return nil
}

// Validate checks the integers of a read request, the versions of a merged read included.
func (r ReadRequest) Validate() error {
	if err := checkUint("version", r.Version, MaxVersion); err != nil {
		return err
	}
	if err := checkInt("offset", r.Offset, MaxCount); err != nil {
		return err
	}
	if err := checkInt("maxMessages", int64(r.MaxMessages), MaxCount); err != nil {
		return err
	}
	for agent, v := range r.Merge {
		if v > MaxVersion {
			return OutOfRange(fmt.Sprintf("field merge[%q]", agent), v, 1, MaxVersion)
		}
	}
	return nil
}

// Validate checks the integers of a prune request.
func (r PruneRequest) Validate() error {
	if err := checkInt("keepLast", int64(r.KeepLast), MaxCount); err != nil {
		return err
	}
	return checkInt("maxAgeSeconds", r.MaxAgeSeconds, MaxAgeSeconds)
}

// Validate checks the integers of a lease request. Whether a TTL is needed at all depends on the
// operation; the service checks that.
func (r LeaseRequest) Validate() error {
	if err := checkInt("ttlMillis", r.TTLMillis, MaxLeaseTTLMillis); err != nil {
		return err
	}
	return checkUint("epoch", r.Epoch, MaxVersion)
}

// Validate checks the integers of a seal request.
func (r SealRequest) Validate() error { return checkUint("expected", r.Expected, MaxVersion) }

// Validate checks the integers of a delete request.
func (r DeleteRequest) Validate() error {
	if r.Expected == nil {
		return nil
	}
	return checkUint("expected", *r.Expected, MaxVersion)
}
