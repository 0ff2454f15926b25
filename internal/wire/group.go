package wire

import (
	"bytes"
	"fmt"
	"strconv"
)

// Group saves (docs/protocol.md §4.0.1): k saves of one session in one request on the session's
// save subject, the request carrying HdrGroup: k and a body of k items back to back. Each item is
//
//	<field bytes> <body bytes>\r\n
//	<fields: "Name: value\r\n" lines, exactly <field bytes> of them>
//	<body: exactly <body bytes>>
//
// The fields are a save's own headers (GroupItemFields); those the whole group shares (writer,
// dialect, format) are the request's headers. Both lengths are plain decimals, checked against
// the bytes left before anything is taken, so a hostile length or count allocates nothing.

// HdrGroup on a save request says its body holds this many saves of the subject's session.
const HdrGroup = "Cp-Group"

// MaxGroupSaves bounds the saves of one group.
const MaxGroupSaves = 64

// GroupItemFields are the fields an item of a group may carry; any other is refused.
var GroupItemFields = []string{HdrSaveID, HdrBaseVersion, HdrExpectedVersion, HdrEncoding, HdrReason, HdrEpoch}

// GroupSharedHeaders are the headers of a group request that apply to each of its saves; a save
// header not listed here nor in GroupItemFields (chunks, fork, import) cannot be grouped.
var GroupSharedHeaders = []string{HdrGroup, HdrWriter, HdrDialect, HdrFormat}

// MaxItemFieldBytes bounds the fields of one item, as the headers of a save sent alone are bounded
// (64 KiB, JetStream's limit on a message's headers): a field's value is quoted in refusals and
// a save id echoed in results, so an item's fields must not be a megabyte.
const MaxItemFieldBytes = 64 << 10

// maxQuoted bounds the bytes of a client's that a refusal quotes (then "..." and how many there are):
// the refusal must fit a reply, whatever the bytes quote to.
const maxQuoted = 64

// quoted is b quoted for a refusal, at most maxQuoted bytes of it.
func quoted(b []byte) string {
	if len(b) <= maxQuoted {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%q... (%d bytes)", b[:maxQuoted], len(b))
}

// maxItemPrefix bounds the "<field bytes> <body bytes>\r\n" line of an item: two 20-digit numbers.
const maxItemPrefix = 44

// GroupItem is one save of a group as received: its fields (as a header map: a
// map[string][]string, each field once) and its body, which aliases the request's body.
type GroupItem struct {
	Fields map[string][]string
	Body   []byte
}

// ParseGroupCount reads the HdrGroup header: 1..MaxGroupSaves as a plain decimal.
func ParseGroupCount(s string) (int, error) {
	n, err := ParseHeaderCount(HdrGroup, s, 1, MaxGroupSaves)
	return int(n), err
}

// AppendGroupItem appends one item to a group body: fields as name/value pairs, in order.
func AppendGroupItem(dst []byte, fields [][2]string, body []byte) []byte {
	n := 0
	for _, f := range fields {
		n += len(f[0]) + 2 + len(f[1]) + 2
	}
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n"...)
	for _, f := range fields {
		dst = append(append(append(append(dst, f[0]...), ": "...), f[1]...), "\r\n"...)
	}
	return append(dst, body...)
}

// ParseGroup splits body into exactly k items (k already checked by ParseGroupCount). Every error
// is a bad_request naming the item (from 0) and what is wrong with it.
func ParseGroup(body []byte, k int) ([]GroupItem, error) {
	items := make([]GroupItem, 0, min(k, MaxGroupSaves))
	rest := body
	for i := 0; i < k; i++ {
		item, tail, err := parseGroupItem(rest)
		if err != nil {
			return nil, groupError(i, len(body)-len(rest), err)
		}
		items = append(items, item)
		rest = tail
	}
	if len(rest) != 0 {
		return nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("group: %d bytes after its %d saves (header %s says how many there are)", len(rest), k, HdrGroup)}
	}
	return items, nil
}

func groupError(i, at int, err error) *Error {
	return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("group: save %d (at byte %d of the body): %v", i, at, err)}
}

// parseGroupItem reads the item at the start of b and returns it and the bytes after it.
func parseGroupItem(b []byte) (GroupItem, []byte, error) {
	eol := bytes.Index(b[:min(len(b), maxItemPrefix)], []byte("\r\n"))
	if eol < 0 {
		return GroupItem{}, nil, fmt.Errorf(`missing "<field bytes> <body bytes>\r\n" (%d bytes left)`, len(b))
	}
	sizes := bytes.Split(b[:eol], []byte(" "))
	if len(sizes) != 2 {
		return GroupItem{}, nil, fmt.Errorf(`%q is not "<field bytes> <body bytes>"`, b[:eol])
	}
	b = b[eol+2:]
	nf, err := plainLength("field bytes", sizes[0], len(b))
	if err != nil {
		return GroupItem{}, nil, err
	}
	if nf > MaxItemFieldBytes {
		return GroupItem{}, nil, fmt.Errorf("field bytes %d: at most %d (as a save's headers)", nf, MaxItemFieldBytes)
	}
	nb, err := plainLength("body bytes", sizes[1], len(b)-nf)
	if err != nil {
		return GroupItem{}, nil, err
	}
	fields, err := parseItemFields(b[:nf])
	if err != nil {
		return GroupItem{}, nil, err
	}
	return GroupItem{Fields: fields, Body: b[nf : nf+nb : nf+nb]}, b[nf+nb:], nil
}

// plainLength reads a length that must be a plain decimal no larger than left, the bytes there are.
func plainLength(what string, s []byte, left int) (int, error) {
	n, err := strconv.ParseUint(string(s), 10, 63)
	if err != nil || strconv.FormatUint(n, 10) != string(s) {
		return 0, fmt.Errorf("%s %q is not a plain decimal", what, s)
	}
	if n > uint64(left) {
		return 0, fmt.Errorf("%s %d, but only %d bytes are left in the body", what, n, left)
	}
	return int(n), nil
}

// parseItemFields reads "Name: value\r\n" lines; each name one of GroupItemFields, at most once.
func parseItemFields(b []byte) (map[string][]string, error) {
	fields := make(map[string][]string, 4)
	for len(b) > 0 {
		eol := bytes.Index(b, []byte("\r\n"))
		if eol < 0 {
			return nil, fmt.Errorf(`field %s does not end with "\r\n"`, quoted(b))
		}
		name, value, ok := bytes.Cut(b[:eol], []byte(": "))
		if !ok {
			return nil, fmt.Errorf(`field %s is not "Name: value"`, quoted(b[:eol]))
		}
		known := itemField(name)
		if known == "" {
			return nil, fmt.Errorf("field %s: not one a grouped save may carry (%v; a chunked, forked or imported save is sent alone)", quoted(name), GroupItemFields)
		}
		if _, dup := fields[known]; dup {
			return nil, fmt.Errorf("field %s: sent twice", known)
		}
		fields[known] = []string{string(value)}
		b = b[eol+2:]
	}
	return fields, nil
}

// itemField returns the canonical name of one of GroupItemFields, "" if name is none of them.
func itemField(name []byte) string {
	for _, f := range GroupItemFields {
		if string(name) == f {
			return f
		}
	}
	return ""
}

// GroupReply is the reply to a group request: Results, one per save in order, or Error when the
// whole group was refused before any of its saves was read (bad_request for its framing, busy,
// unavailable).
type GroupReply struct {
	Results []SaveResult `json:"results,omitempty"`
	Error   *Error       `json:"error,omitempty"`
}
