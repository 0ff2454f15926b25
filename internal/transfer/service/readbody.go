package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer/admission"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// readKey names one read by everything that decides its bytes (the namespace, from the subject,
// and every member of the request but its offset, with its encoding spelled out), so that the
// pieces of one read share it and nothing else does. It is a digest: a request's size does not
// become the size of a key the cache keeps. It starts with readSession's prefix, so that the
// reads held for a session can be let go of when the session is deleted.
func readKey(ns string, req wire.ReadRequest, enc string) string {
	req.Offset, req.Encoding = 0, enc
	j, _ := json.Marshal(req) // a map's keys (merge) are sorted: one request, one key
	sum := sha256.Sum256(append([]byte(ns+"\x00"), j...))
	return readSession(ns, req.Session) + hex.EncodeToString(sum[:])
}

// readSession is the prefix of the keys of every read of session in namespace ns (any agent, any
// version, any view, merges): namespace and session are names a key of the store holds, so
// bounded, and EncodeID writes no '/'.
func readSession(ns, session string) string {
	return "read/" + wire.EncodeID(ns) + "/" + wire.EncodeID(session) + "/"
}

// fullZstd returns the whole conversation of v as a zstd stream, stored frames passed through
// (engine.ReadZstd), cached under the version's hash as the identity bytes are, and only when
// they would be (the conversation fits the cache): a conversation too large to cache is held for
// its read only, as before, rather than kept compressed afterwards beside everything else.
func (s *Service) fullZstd(ctx context.Context, v wire.Version) (readBody, error) {
	load := func() (readBody, error) {
		if err := takeLoad(ctx, 1, v); err != nil {
			return readBody{}, err
		}
		data, rec, err := s.engine.ReadZstd(ctx, edge.KeyOf(v.Key), v.Version)
		if err == nil && rec.Hash != v.Hash {
			err = fmt.Errorf("%w: version %d of %s changed while it was read (the session was deleted and saved again); read it again", edge.ErrUnavailable, v.Version, v.Key)
		}
		return readBody{data: data, hash: v.Hash, raw: v.RawBytes, enc: wire.EncodingZstd}, err
	}
	if v.RawBytes > s.cache.max {
		return load()
	}
	return s.cache.GetOrLoadBody(zstdConvKey(v), load)
}

// zstdConvKey is the cache key of v's whole conversation as a zstd stream (fullZstd, headZstd):
// by its hash, so that a read of the head and one of its number share it.
func zstdConvKey(v wire.Version) string {
	return "zstd/conv/" + wire.EncodeID(v.Key.Namespace) + "/" + v.Hash
}

// headZstd is fullZstd of the head of r's session, found as version finds it (once the saves
// queued for it are settled, the queue asked beside the engine's read: afterQueued) and read
// together with its record, in one storage read where the engine can (engine.ReadZstdIf): the
// log's last entry is read once, for the record and the body both, and for a session whose head
// that entry holds alone (saved once) nothing else is. Once the record is known and before
// anything more is read, the conversation is looked up in the cache by its hash, as fullZstd does
// (a repeated read costs the last entry only, or, for a head this daemon's engine holds for saves,
// a question whether the log moved past it: docs/format.md §8.6), and its load admitted; what is
// read is cached after.
func (s *Service) headZstd(ctx context.Context, ns string, r wire.SessionRequest) (readBody, wire.Version, error) {
	key, err := sessionKey(ns, r)
	if err != nil {
		return readBody{}, wire.Version{}, err
	}
	var b readBody
	var v wire.Version
	taken := int64(0) // admitted for this request: a second read (saves were queued) takes only what it needs more
	err = s.afterQueued(ctx, wire.IngestSubject(key), func() error {
		cached := false
		data, rec, err := s.engine.ReadZstdIf(ctx, edge.KeyOf(key), 0, func(rec engine.Record) (bool, error) {
			// Asked again about another record (the engine's cached head, then the log's), what an
			// earlier answer found in the cache is not this one's: a record too large to cache
			// must not take the body of the one asked about before.
			v, b, cached = edge.VersionOf(rec), readBody{}, false
			housekeeping.LargeRead(v.RawBytes) // as readBody does before a load (housekeeping/eagergc.go)
			if v.RawBytes <= s.cache.max {
				if b, cached = s.cache.Get(zstdConvKey(v)); cached {
					return false, nil
				}
			}
			if more := v.RawBytes - taken; more > 0 {
				if err := admission.TicketOf(ctx).Take(more); err != nil {
					return false, err
				}
				taken = v.RawBytes
			}
			return true, nil
		})
		if err != nil || cached {
			return err
		}
		if rec.Hash != v.Hash { // v is the head's record as get gives it (Cp-Version): the body must be its
			return fmt.Errorf("%w: the head of %s read as version %d (%s), its record says %s", engine.ErrCorrupt, key, rec.Version, rec.Hash, v.Hash)
		}
		b = readBody{data: data, hash: v.Hash, raw: v.RawBytes, enc: wire.EncodingZstd}
		if v.RawBytes <= s.cache.max {
			s.cache.Put(zstdConvKey(v), b)
		}
		return nil
	})
	if err != nil {
		return readBody{}, wire.Version{}, err
	}
	return b, v, nil
}

// encode returns b, whose bytes are cached under key, in encoding enc: as it is for identity,
// else compressed at the fastest level (a view or a merge is built here, so it has no stored
// frames to pass through), and cached beside it.
func (s *Service) encode(ctx context.Context, b readBody, key, enc string) (readBody, error) {
	if enc == wire.EncodingIdentity {
		return b, nil
	}
	return s.cache.GetOrLoadBody("zstd/"+key, func() (readBody, error) {
		if err := admission.TicketOf(ctx).Take(int64(len(b.data))); err != nil { // at most about as large as b
			return readBody{}, err
		}
		return readBody{data: codec.AppendZstdFast(nil, b.data), hash: b.hash, raw: b.raw, enc: wire.EncodingZstd}, nil
	})
}

// exactVersion finds version n (not 0) for a read. Versions are immutable, so one that is found is
// what it will always be, and the saves queued for its session cannot change it: only when it is not
// found does it wait for them to be settled (read-your-writes) and look again. A read of a version
// that exists costs no look at the ingest queue.
func (s *Service) exactVersion(ctx context.Context, ns string, r wire.SessionRequest, n uint64) (wire.Version, error) {
	key, err := sessionKey(ns, r)
	if err != nil {
		return wire.Version{}, err
	}
	rec, err := s.engine.Version(ctx, edge.KeyOf(key), n)
	if errors.Is(err, engine.ErrNotFound) {
		return s.version(ctx, ns, r, n)
	}
	if err != nil {
		return wire.Version{}, err
	}
	return edge.VersionOf(rec), nil
}
