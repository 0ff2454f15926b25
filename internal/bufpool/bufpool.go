// Package bufpool keeps the byte buffers of one request for the next. A buffer of a few hundred KB
// made for every request (a group of saves joined into one body) is a large object, which Go
// allocates zeroed each time; kept in a sync.Pool it is made once per goroutine that needs it.
package bufpool

import "sync"

// Pool holds buffers of at most Max bytes' room; a buffer it makes has at least Min.
type Pool struct {
	Min, Max int
	pool     sync.Pool // *[]byte
}

// Get returns an empty buffer with room for n bytes at least.
func (p *Pool) Get(n int) []byte {
	if b, ok := p.pool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, max(n, p.Min))
}

// Put gives b back once nothing refers to its bytes any more; a buffer of more than Max is dropped.
func (p *Pool) Put(b []byte) {
	if cap(b) <= p.Max {
		b = b[:0]
		p.pool.Put(&b)
	}
}
