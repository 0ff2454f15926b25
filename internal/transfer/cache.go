package transfer

import (
	"container/list"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// byteCache keeps recently served read bodies, bounded by their total size, so that the pieces of one
// large read cost one load rather than one each. Entries are immutable (keyed by content hash). One
// entry larger than the whole cache is still kept, alone in its own slot, until the next one, until
// its read's last piece (DropBig), or until it was not asked for in bigIdle: a conversation bigger
// than the cache is assembled once per read, not once per piece, and not held after.
type byteCache struct {
	mu       sync.Mutex
	max      int64
	size     int64
	order    *list.List // front = most recently used
	items    map[string]*list.Element
	big      *cacheEntry
	bigTimer *time.Timer
	bigSeq   uint64 // counts the entries that took the big slot
	bigIdle  time.Duration
}

// bigIdle is how long the entry larger than the cache is kept without being asked for: far more
// than a client takes between two pieces of one read.
const bigIdle = 10 * time.Second

type cacheEntry struct {
	key  string
	data []byte
	hash string // wire.Hash(data), once asked for
}

func newByteCache(maxBytes int64) *byteCache {
	return &byteCache{max: maxBytes, order: list.New(), items: map[string]*list.Element{}, bigIdle: bigIdle}
}

// GetOrLoad returns the cached bytes of key, or loads and (if they fit) caches them. Two concurrent
// misses may both load; that costs work, never correctness.
func (c *byteCache) GetOrLoad(key string, load func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		data := e.Value.(*cacheEntry).data
		c.mu.Unlock()
		return data, nil
	}
	if c.big != nil && c.big.key == key {
		data := c.big.data
		c.bigTimer.Reset(c.bigIdle)
		c.mu.Unlock()
		return data, nil
	}
	c.mu.Unlock()
	data, err := load()
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > c.max {
		c.mu.Lock()
		if c.bigTimer != nil {
			c.bigTimer.Stop()
		}
		c.big = &cacheEntry{key: key, data: data}
		c.bigSeq++
		seq := c.bigSeq // not the entry: the timer must not keep its bytes alive
		c.bigTimer = time.AfterFunc(c.bigIdle, func() {
			c.mu.Lock()
			if c.bigSeq == seq {
				c.big = nil
			}
			c.mu.Unlock()
		})
		c.mu.Unlock()
		return data, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; !ok {
		c.items[key] = c.order.PushFront(&cacheEntry{key: key, data: data})
		c.size += int64(len(data))
	}
	for c.size > c.max {
		last := c.order.Back()
		ent := last.Value.(*cacheEntry)
		c.order.Remove(last)
		delete(c.items, ent.key)
		c.size -= int64(len(ent.data))
	}
	return data, nil
}

// DropBig forgets key's entry if it is the one kept apart for being larger than the cache: its read
// got its last piece.
func (c *byteCache) DropBig(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.big != nil && c.big.key == key {
		c.bigTimer.Stop()
		c.big = nil
	}
}

// Hash returns wire.Hash(data), data being what key holds: computed once while key is cached, not
// once per piece of a large read.
func (c *byteCache) Hash(key string, data []byte) string {
	c.mu.Lock()
	e := c.big
	if el, ok := c.items[key]; ok {
		e = el.Value.(*cacheEntry)
	}
	if e == nil || e.key != key {
		e = nil
	} else if h := e.hash; h != "" {
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
