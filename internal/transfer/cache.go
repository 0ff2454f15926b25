package transfer

import (
	"container/list"
	"sync"
)

// byteCache keeps recently served read bodies, bounded by their total size, so that the pieces of one
// large read cost one load rather than one each. Entries are immutable (keyed by content hash). One
// entry larger than the whole cache is still kept, alone in its own slot, until the next one: a
// conversation bigger than the cache is assembled once per read, not once per piece.
type byteCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // front = most recently used
	items map[string]*list.Element
	big   *cacheEntry
}

type cacheEntry struct {
	key  string
	data []byte
}

func newByteCache(maxBytes int64) *byteCache {
	return &byteCache{max: maxBytes, order: list.New(), items: map[string]*list.Element{}}
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
		c.big = &cacheEntry{key: key, data: data}
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
