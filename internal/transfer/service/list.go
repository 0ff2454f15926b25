package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Listings and newest-first history pages (docs/protocol.md §5). Sessions are listed in the order
// they were created, a page of the engine's namespace index at a time (engine.Sessions), and a
// listing goes on from a cursor: "<namespace>.<position>", the namespace encoded (wire.EncodeID) and
// the engine's cursor in its index. On the admin subject namespaces come one after another, sorted.

// listPageSessions is how many sessions one read of the index asks for. A reply holds as many pages
// as fit in one message; the one that does not fit is asked for again in halves.
const listPageSessions = 64

// listCursor is where a listing goes on.
type listCursor struct {
	ns  string
	pos uint64 // the engine's cursor in ns's index (0: its start)
}

func (c listCursor) String() string { return wire.EncodeID(c.ns) + "." + strconv.FormatUint(c.pos, 10) }

// parseListCursor reads a cursor of a reply; ns is the namespace of the request ("" on the admin
// subject: any).
func parseListCursor(s, ns string) (listCursor, error) {
	if s == "" {
		return listCursor{ns: ns}, nil
	}
	tok, pos, ok := strings.Cut(s, ".")
	c := listCursor{}
	var err error
	if ok {
		c.ns, err = wire.DecodeID(tok)
	}
	if ok && err == nil {
		c.pos, err = strconv.ParseUint(pos, 10, 64)
	}
	if !ok || err != nil || c.pos == 0 {
		return c, fmt.Errorf("%w: cursor %.64q is not one this daemon gave (send the cursor of the previous reply as it came)", edge.ErrBadRequest, s)
	}
	if ns != "" && c.ns != ns {
		return c, fmt.Errorf("%w: cursor %.64q belongs to a listing of another namespace", edge.ErrBadRequest, s)
	}
	return c, nil
}

// listPage builds one reply of a listing from req.Cursor on: as many sessions as fit, at most
// req.Limit when it is set.
func (s *Service) listPage(ctx context.Context, ns string, req wire.ListRequest) (reply, error) {
	cur, err := parseListCursor(req.Cursor, ns)
	if err != nil {
		return reply{}, err
	}
	namespaces := []string{ns}
	if ns == "" {
		if namespaces, err = s.engine.Namespaces(ctx); err != nil {
			return reply{}, err
		}
		i, _ := slices.BinarySearch(namespaces, cur.ns)
		namespaces = namespaces[i:]
		if len(namespaces) == 0 || namespaces[0] != cur.ns {
			cur.pos = 0 // the cursor's namespace is gone: go on with the next one
		}
	}
	max := s.maxReply()
	var b bytes.Buffer
	b.WriteString(`{"sessions":[`)
	n := 0
	for i, space := range namespaces {
		pos := uint64(0)
		if i == 0 {
			pos = cur.pos
		}
		limit := listPageSessions
		for {
			if req.Limit > 0 { // the client's page size: never read more sessions than it still wants
				if n >= req.Limit {
					return endList(&b, &listCursor{ns: space, pos: max1(pos)}), nil
				}
				limit = min(limit, req.Limit-n)
			}
			heads, next, err := s.engine.Sessions(ctx, space, pos, limit)
			if err != nil {
				return reply{}, err
			}
			items, err := encodeHeads(heads, req.Session)
			if err != nil {
				return reply{}, err
			}
			if int64(b.Len()+len(items))+128 > max {
				if limit > 1 {
					limit /= 2 // the page that does not fit, in halves: the cursor goes on where one ends
					continue
				}
				if n > 0 {
					return endList(&b, &listCursor{ns: space, pos: max1(pos)}), nil
				}
			}
			if len(items) > 0 {
				if n > 0 {
					b.WriteByte(',')
				}
				b.Write(items)
				n += bytes.Count(items, []byte("\n")) + 1
			}
			if next == 0 {
				break
			}
			pos = next
		}
	}
	return endList(&b, nil), nil
}

// max1 is the cursor of the start of a namespace's index, which the engine calls 0 and a reply's
// cursor cannot (0 is no cursor).
func max1(pos uint64) uint64 { return max(pos, 1) }

// encodeHeads encodes the sessions of heads (only those of session, when set), comma-separated,
// one a line: a line break outside JSON strings counts them. A session leased before its first
// version has no head to list.
func encodeHeads(heads []engine.SessionHead, session string) ([]byte, error) {
	var out []byte
	for _, h := range heads {
		if session != "" && h.Key.Session != session || h.Record.Version == 0 {
			continue
		}
		enc, err := json.Marshal(edge.SessionHeadOf(h))
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			out = append(out, ",\n"...)
		}
		out = append(out, enc...)
	}
	return out, nil
}

// endList closes a listing's reply, with the cursor of the next page if there is one.
func endList(b *bytes.Buffer, next *listCursor) reply {
	b.WriteByte(']')
	if next != nil {
		b.WriteString(`,"more":true,"cursor":`)
		c, _ := json.Marshal(next.String())
		b.Write(c)
	}
	b.WriteByte('}')
	return reply{data: b.Bytes()}
}

// historyPageVersions is how many versions a newest-first history page holds when the request sets
// no limit (and the most it may ask for).
const (
	historyPageVersions = 256
	maxHistoryPage      = 4096
)

// historyNewestFirst serves a page of a session's history, newest first, from req.Cursor (the
// version the previous page ended at) down: the engine reads the entries since the last pack and
// one pack per page it goes back (engine.HistoryPage), so a long history's recent versions are
// cheap.
func (s *Service) historyNewestFirst(ctx context.Context, key wire.Key, req wire.HistoryRequest) (reply, error) {
	if req.After != 0 {
		return reply{}, fmt.Errorf("%w: after pages a history oldest first; newest first pages with cursor", edge.ErrBadRequest)
	}
	cur, err := parseHistoryCursor(req.Cursor)
	if err != nil {
		return reply{}, err
	}
	limit := historyPageVersions
	if req.Limit > 0 {
		limit = min(req.Limit, maxHistoryPage)
	}
	var recs []engine.Record
	var next engine.HistoryCursor
	err = s.afterQueued(ctx, wire.IngestSubject(key), func() (err error) {
		recs, next, err = s.engine.HistoryPage(ctx, edge.KeyOf(key), cur, limit)
		return err
	})
	if err != nil {
		return reply{}, err
	}
	versions := make([]wire.Version, len(recs))
	for i, r := range recs {
		versions[i] = edge.VersionOf(r)
	}
	// More follows the last version sent: the engine's next page, or the versions that did not fit.
	more := func(last wire.Version) string {
		if last.Version == versions[len(versions)-1].Version && next == (engine.HistoryCursor{}) {
			return ""
		}
		return `,"more":true,"cursor":"` + historyCursor(last.Version, next) + `"`
	}
	r, _, err := pageOf("versions", versions, s.maxReply(), more)
	return r, err
}

// historyCursor is the cursor of a newest-first page whose last version sent is last: the version,
// and the engine's pack hint when its page ended there too ("<version>.<pack sequence>"), so that
// the next page is walked from that pack rather than from the head: a page deep in a long history
// costs the same as one near its head (BenchmarkHistoryDeepPages: 24× less at 10,000 versions
// down). A page cut short to fit the reply ends at another version, whose pack the engine did not
// say: the version alone, walked from the head.
func historyCursor(last uint64, next engine.HistoryCursor) string {
	c := strconv.FormatUint(last, 10)
	if next.Pack != 0 && next.Before == last {
		c += "." + strconv.FormatUint(next.Pack, 10)
	}
	return c
}

// parseHistoryCursor reads a cursor historyCursor made (also one of a daemon before the pack hint:
// the version alone). The hint is the client's to send, so the engine checks it (a stale or forged
// one costs a walk from the head); the numbers are plain decimals, as every number of the protocol.
func parseHistoryCursor(s string) (engine.HistoryCursor, error) {
	if s == "" {
		return engine.HistoryCursor{}, nil
	}
	before, pack, hinted := strings.Cut(s, ".")
	n, ok := plainUint(before)
	var p uint64
	if ok && hinted {
		p, ok = plainUint(pack)
	}
	if !ok || n < 2 || n > wire.MaxVersion || hinted && p == 0 {
		return engine.HistoryCursor{}, fmt.Errorf("%w: cursor %.64q is not one this daemon gave (send the cursor of the previous reply as it came)", edge.ErrBadRequest, s)
	}
	return engine.HistoryCursor{Before: n, Pack: p}, nil
}

// plainUint reads a plain decimal (digits only, no sign, no leading zero).
func plainUint(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && strconv.FormatUint(n, 10) == s
}
