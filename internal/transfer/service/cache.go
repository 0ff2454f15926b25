package service

import (
	"container/list"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// byteCache keeps recently served read bodies, bounded by their total size, so that the pieces of one
// large read cost one load rather than one each. Entries are immutable (keyed by content hash).
//
// A read that comes in several pieces is also held apart from that bound while it is in progress
// (Hold, until Release after its last piece, or until no piece was asked for in readIdle): a
// conversation bigger than the cache is assembled once per read, not once per piece, and several
// large reads at once do not evict each other between their pieces. At most maxReading reads, and
// maxHeldBytes of their bodies, are held at once (see Hold): clients that keep asking for pieces
// cannot pin more.
type byteCache struct {
	mu       sync.Mutex
	max      int64
	size     int64
	order    *list.List // front = most recently used
	items    map[string]*list.Element
	reading  map[string]*heldRead
	held     int64  // bytes of the bodies held in reading
	heldMax  int64  // maxHeldBytes, but for tests
	gen      uint64 // counts holds, so that a timer knows whether its hold is still the current one
	readIdle time.Duration

	hits, misses atomic.Uint64 // lookups of GetOrLoad, for /metrics (stats)
}

// stats reports the lookups that found their bytes cached, those that did not, and the bytes the
// cache holds.
func (c *byteCache) stats() (hits, misses uint64, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits.Load(), c.misses.Load(), c.size
}

// readIdle is how long a read in pieces is held without a piece being asked for: far more than a
// client takes between two pieces of one read.
const readIdle = 10 * time.Second

// maxReading is how many reads in pieces are held at once.
const maxReading = 8

// maxHeldBytes bounds the bodies of the reads held at once: four of the largest conversations a
// daemon takes by default (--max-checkpoint-bytes 64 MiB). A read past it is served without being
// held, each of its pieces assembled anew.
const maxHeldBytes = 256 << 20

type cacheEntry struct {
	key  string
	data []byte
	hash string // the SHA-256 of the identity bytes: wire.Hash(data) once asked for, unless compressed
	raw  int64  // the length of the identity bytes: len(data), unless compressed
	enc  string // data's encoding: wire.EncodingIdentity or wire.EncodingZstd
}

// body is the read body e holds.
func (e *cacheEntry) body() readBody {
	return readBody{data: e.data, hash: e.hash, raw: e.raw, enc: e.enc}
}

// readBody is what a read serves in pieces: its bytes in the read's encoding, and the SHA-256 and
// length of the identity bytes they decode to (the same bytes, for identity).
type readBody struct {
	data []byte
	hash string
	raw  int64
	enc  string
}

// identityBody is a read body of data as they are, whose hash is hash ("": not computed yet).
func identityBody(data []byte, hash string) readBody {
	return readBody{data: data, hash: hash, raw: int64(len(data)), enc: wire.EncodingIdentity}
}

type heldRead struct {
	entry   *cacheEntry
	readers int       // reads in progress, approximately: the daemon cannot tell readers apart (see Hold)
	gen     uint64    // which hold this is, for its idle timer
	last    time.Time // when a piece was last asked for
	timer   *time.Timer
	bytes   int64 // of the body, counted in byteCache.held
}

// unhold lets go of the read held under key. c.mu is held.
func (c *byteCache) unhold(key string, h *heldRead) {
	h.timer.Stop()
	delete(c.reading, key)
	c.held -= h.bytes
}

func newByteCache(maxBytes int64) *byteCache {
	return &byteCache{max: maxBytes, order: list.New(), items: map[string]*list.Element{},
		reading: map[string]*heldRead{}, heldMax: maxHeldBytes, readIdle: readIdle}
}

// GetOrLoad returns the cached bytes of key, or loads and (if they fit) caches them. Two concurrent
// misses may both load; that costs work, never correctness.
func (c *byteCache) GetOrLoad(key string, load func() ([]byte, error)) ([]byte, error) {
	b, err := c.GetOrLoadBody(key, func() (readBody, error) {
		data, err := load()
		return identityBody(data, ""), err
	})
	return b.data, err
}

// GetOrLoadBody is GetOrLoad of a read body: its bytes are what the cache's bound counts.
func (c *byteCache) GetOrLoadBody(key string, load func() (readBody, error)) (readBody, error) {
	c.mu.Lock()
	if e := c.lookup(key); e != nil {
		c.mu.Unlock()
		c.hits.Add(1)
		return e.body(), nil
	}
	c.mu.Unlock()
	c.misses.Add(1)
	b, err := load()
	if err != nil {
		return b, err
	}
	c.Put(key, b)
	return b, nil
}

// Get returns the cached body of key, if it is cached (or held), counted as a lookup of GetOrLoad
// is: for a caller that learns what to look up while it loads (service.headZstd), and Puts what it
// loaded.
func (c *byteCache) Get(key string) (readBody, bool) {
	c.mu.Lock()
	e := c.lookup(key)
	c.mu.Unlock()
	if e == nil {
		c.misses.Add(1)
		return readBody{}, false
	}
	c.hits.Add(1)
	return e.body(), true
}

// Put caches b under key, if it fits.
func (c *byteCache) Put(key string, b readBody) {
	if int64(len(b.data)) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; !ok {
		c.items[key] = c.order.PushFront(&cacheEntry{key: key, data: b.data, hash: b.hash, raw: b.raw, enc: b.enc})
		c.size += int64(len(b.data))
	}
	for c.size > c.max {
		last := c.order.Back()
		ent := last.Value.(*cacheEntry)
		c.order.Remove(last)
		delete(c.items, ent.key)
		c.size -= int64(len(ent.data))
	}
}

// lookup finds key among the cached entries and the reads held; c.mu is held.
func (c *byteCache) lookup(key string) *cacheEntry {
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*cacheEntry)
	}
	if h, ok := c.reading[key]; ok {
		h.last = time.Now()
		h.timer.Reset(c.readIdle)
		return h.entry
	}
	return nil
}

// Hold keeps key's bytes, data, whose hash is hash, while a read of them has pieces to come (see
// byteCache). first says the piece is a read's first: several reads of the same bytes at once (a
// session and its forks hold the same conversation) are counted, and Release lets go after the last.
// The count is a hint, not a lease: a client that resumes a read midway is not counted, and its
// Release may end another read's hold early (that read assembles its bytes again); a read whose
// client went away is let go of after readIdle.
//
// With maxReading reads held, a new one takes the place of the one asked for least recently only if
// that one has been idle for readIdle/10; otherwise it is served without being held. Interleaved
// reads beyond the limit would otherwise push each other out piece by piece, every one of them
// assembling its bytes for each piece; this way only the reads beyond the limit do.
func (c *byteCache) Hold(key string, data []byte, hash string, first bool) {
	_ = c.HoldBody(key, identityBody(data, hash), first)
}

// HoldBody is Hold of a read body, and returns the body the read's pieces are served from: b, or,
// when a read's first piece finds a hold of the same content (the same hash and encoding, perhaps
// other frames: assembled before a compaction), the held one, so that all readers of the key are
// served from one body. A first piece whose bytes are not the held ones (the session was deleted and
// saved again) replaces the hold: the later pieces of its read must continue its bytes, never
// another body's (docs/protocol.md §5: every piece of one read carries the same headers).
func (c *byteCache) HoldBody(key string, b readBody, first bool) readBody {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if h, ok := c.reading[key]; ok {
		held := h.entry.body()
		if !first || held.hash == b.hash && held.enc == b.enc && held.raw == b.raw {
			h.last = now
			h.timer.Reset(c.readIdle)
			if first {
				h.readers++
			}
			return held
		}
		c.unhold(key, h) // stale: held again below with b
	}
	size := int64(len(b.data))
	if size > c.heldMax {
		return b
	}
	for len(c.reading) >= maxReading || c.held+size > c.heldMax {
		oldest := ""
		for k, r := range c.reading {
			if oldest == "" || r.last.Before(c.reading[oldest].last) {
				oldest = k
			}
		}
		if now.Sub(c.reading[oldest].last) < c.readIdle/10 {
			return b
		}
		c.unhold(oldest, c.reading[oldest])
	}
	e := &cacheEntry{key: key, data: b.data, hash: b.hash, raw: b.raw, enc: b.enc}
	if el, ok := c.items[key]; ok {
		e = el.Value.(*cacheEntry) // the same bytes
		if e.hash == "" {
			e.hash = b.hash
		}
	}
	c.gen++
	gen := c.gen // the timer refers to the hold by number: it must not keep the bytes alive
	c.held += size
	c.reading[key] = &heldRead{entry: e, readers: 1, gen: gen, last: now, bytes: size, timer: time.AfterFunc(c.readIdle, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if h, ok := c.reading[key]; ok && h.gen == gen {
			c.unhold(key, h)
		}
	})}
	return b
}

// Held returns the body of the read in pieces held under key, if one is, and counts this as a piece
// asked for (its idle timer starts again). It never looks among the cached entries: it is how the
// pieces after a read's first find what the first assembled, without looking anything up again.
func (c *byteCache) Held(key string) (readBody, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.reading[key]
	if !ok {
		return readBody{}, false
	}
	h.last = time.Now()
	h.timer.Reset(c.readIdle)
	return h.entry.body(), true
}

// Release ends one read of key: its last piece was served. The bytes are let go of once no other
// read of them is in progress.
func (c *byteCache) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.reading[key]; ok {
		if h.readers--; h.readers <= 0 {
			c.unhold(key, h)
		}
	}
}

// DropHeld lets go of every read held under a key that starts with prefix (a deleted session's,
// readSession): their later pieces are looked up again, and so not served once the session is gone.
func (c *byteCache) DropHeld(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, h := range c.reading {
		if strings.HasPrefix(key, prefix) {
			c.unhold(key, h)
		}
	}
}

// Hash returns wire.Hash(data), data being what key holds: computed once while key is cached, not
// once per piece of a large read.
func (c *byteCache) Hash(key string, data []byte) string {
	c.mu.Lock()
	e := c.lookup(key)
	if e != nil && e.hash != "" {
		h := e.hash
		c.mu.Unlock()
		return h
	}
	c.mu.Unlock()
	h := wire.Hash(data)
	if e != nil {
		c.mu.Lock()
		e.hash = h
		c.mu.Unlock()
	}
	return h
}
