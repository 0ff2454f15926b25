package service

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// A read in pieces is held from its first piece to its last, or until no piece was asked for in a
// while: a 64 MiB restore costs one assembly and does not stay in memory after it.
func TestByteCache_ReadHeldForItsPieces(t *testing.T) {
	c := newByteCache(1 << 10)
	c.readIdle = 2 * time.Second
	loads := 0
	big := bytes.Repeat([]byte("x"), 4<<10)
	get := func(key string) []byte {
		data, err := c.GetOrLoad(key, func() ([]byte, error) { loads++; return big, nil })
		require.NoError(t, err)
		return data
	}
	get("a")
	get("a")
	require.Equal(t, 2, loads, "larger than the cache and not held: not kept")
	c.Hold("a", get("a"), wire.Hash(big), true)
	for range 3 {
		require.Equal(t, big, get("a"))
	}
	require.Equal(t, 3, loads, "held: one load for every later piece")
	require.Equal(t, wire.Hash(big), c.Hash("a", []byte("other")), "its hash came with it")
	require.Equal(t, wire.Hash([]byte("other")), c.Hash("b", []byte("other")), "not cached: hashed, not stored")

	c.Release("b")
	get("a")
	require.Equal(t, 3, loads, "releasing another key keeps it")
	c.Release("a")
	get("a")
	require.Equal(t, 4, loads, "the last piece was served: loaded again")

	c.Hold("a", get("a"), "", true)
	for range 4 { // asked for within readIdle: kept
		time.Sleep(c.readIdle / 20)
		get("a")
	}
	require.Equal(t, 5, loads)
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.reading) == 0
	}, 10*time.Second, 20*time.Millisecond, "idle: let go of")
	get("a")
	require.Equal(t, 6, loads)

	small := []byte("s")
	_, err := c.GetOrLoad("s", func() ([]byte, error) { loads++; return small, nil })
	require.NoError(t, err)
	c.Hold("s", small, "", true)
	c.Release("s")
	_, err = c.GetOrLoad("s", func() ([]byte, error) { loads++; return small, nil })
	require.NoError(t, err)
	require.Equal(t, 7, loads, "entries that fit stay in the cache, held or not")
}

// Large reads in progress at once do not evict each other between their pieces (they used to share
// one slot, so interleaved readers assembled their conversation again for nearly every piece). Past
// maxReading, a new read is served without being held, unless a held one has gone idle.
func TestByteCache_InterleavedReadsEachLoadOnce(t *testing.T) {
	c := newByteCache(1 << 10)
	c.readIdle = 5 * time.Second // a held read counts as idle after 500 ms: far beyond a stall of this loop
	loads := map[string]int{}
	piece := func(key string) {
		data, err := c.GetOrLoad(key, func() ([]byte, error) { loads[key]++; return bytes.Repeat([]byte(key), 2<<10), nil })
		require.NoError(t, err)
		c.Hold(key, data, "", false)
	}
	keys := make([]string, maxReading)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	for range 5 { // five pieces of every read, and of one read more, interleaved
		for _, k := range append(keys, "one more") {
			piece(k)
		}
	}
	for _, k := range keys {
		require.Equal(t, 1, loads[k], "read %s assembled once", k)
	}
	require.Equal(t, 5, loads["one more"], "the read beyond the limit is assembled for every piece, and only it")

	time.Sleep(c.readIdle/10 + 100*time.Millisecond) // k0 goes idle; the others go on
	for _, k := range keys[1:] {
		piece(k)
	}
	piece("one more")
	piece("one more")
	require.Equal(t, 6, loads["one more"], "held now, in the place of the idle read")
	piece(keys[0])
	require.Equal(t, 2, loads[keys[0]], "the idle read was let go of")
}

// A read whose client goes away after some pieces is let go of after readIdle, however many pieces
// it was held for.
func TestByteCache_AbandonedReadIsLetGoOf(t *testing.T) {
	c := newByteCache(1 << 10)
	c.readIdle = 50 * time.Millisecond
	big := bytes.Repeat([]byte("x"), 4<<10)
	c.Hold("k", big, "", true)
	c.Hold("k", big, "", false)
	c.Hold("k", big, "", false)
	c.Hold("again", big, "", true) // a read retried from the start: counted twice, released never
	c.Hold("again", big, "", true)
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.reading) == 0
	}, 5*time.Second, 10*time.Millisecond)
}

// Two reads of the same bytes at once (a session and its fork): the first to finish does not take
// the bytes from under the other; the second's end lets go of them.
func TestByteCache_ReadsOfTheSameBytesAreCounted(t *testing.T) {
	c := newByteCache(1 << 10)
	loads := 0
	big := bytes.Repeat([]byte("x"), 4<<10)
	piece := func(first, last bool) {
		data, err := c.GetOrLoad("conv", func() ([]byte, error) { loads++; return big, nil })
		require.NoError(t, err)
		if last {
			c.Release("conv")
		} else {
			c.Hold("conv", data, "", first)
		}
	}
	piece(true, false)  // read 1 starts
	piece(true, false)  // read 2 starts
	piece(false, false) // read 1 goes on
	piece(false, true)  // read 1 ends
	piece(false, false) // read 2 goes on
	require.Equal(t, 1, loads, "read 2 kept the bytes held")
	piece(false, true) // read 2 ends
	piece(true, false)
	require.Equal(t, 2, loads, "both reads ended: let go of")
}

// Once let go of, a read's bytes are garbage: nothing in the cache (its idle timer included) keeps
// them alive.
func TestByteCache_ReleasedBytesAreCollected(t *testing.T) {
	c := newByteCache(1 << 10)
	c.readIdle = 50 * time.Millisecond
	collected := func(release func(key string)) bool {
		var freed atomic.Bool
		func() {
			data, err := c.GetOrLoad("k", func() ([]byte, error) { return make([]byte, 1<<20), nil })
			require.NoError(t, err)
			c.Hold("k", data, "", true)
			runtime.AddCleanup(&data[0], func(*atomic.Bool) { freed.Store(true) }, &freed)
		}()
		release("k")
		deadline := time.Now().Add(5 * time.Second)
		for !freed.Load() && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		return freed.Load()
	}
	require.True(t, collected(c.Release), "after the last piece")
	require.True(t, collected(func(string) { time.Sleep(4 * c.readIdle) }), "after idling")
}

// Readers of the same entries at once, hashing, holding and releasing them under each other, all get
// their own bytes and hash (run with -race: the hash used to be read outside the lock).
func TestByteCache_ConcurrentReadersHashAndRelease(t *testing.T) {
	c := newByteCache(64)
	c.readIdle = time.Millisecond
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := fmt.Sprint("k", (i+g)%3)
				want := bytes.Repeat([]byte(k), 100) // larger than the cache: the big slot
				d, err := c.GetOrLoad(k, func() ([]byte, error) { return bytes.Repeat([]byte(k), 100), nil })
				if err != nil || !bytes.Equal(d, want) {
					errs <- "wrong bytes for " + k
					return
				}
				if h := c.Hash(k, d); h != wire.Hash(want) {
					errs <- "wrong hash for " + k
					return
				}
				if i%2 == 0 {
					c.Release(k)
				} else {
					c.Hold(k, d, wire.Hash(want), i%4 == 1)
				}
				if !bytes.Equal(d, want) {
					errs <- "bytes changed under a reader after a release: " + k
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// The bodies of held reads are bounded in bytes, not only in number: a read that would pass the
// bound takes the place of reads gone idle, else is served without being held, and a body larger
// than the bound is never held. Clients that keep asking for pieces cannot pin more.
func TestByteCache_HeldReadsAreBoundedInBytes(t *testing.T) {
	c := newByteCache(1 << 10)
	c.heldMax, c.readIdle = 100, time.Second // a hold counts as idle after 100 ms
	body := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	c.Hold("a", body(60), "", true)
	c.Hold("b", body(60), "", true)
	_, held := c.Held("b")
	require.False(t, held, "a second body past the bound while the first is busy")
	_, held = c.Held("a")
	require.True(t, held)
	require.Equal(t, int64(60), c.held)

	time.Sleep(150 * time.Millisecond) // a goes idle
	c.Hold("b", body(60), "", true)
	_, held = c.Held("a")
	require.False(t, held, "the idle read made room")
	_, held = c.Held("b")
	require.True(t, held)
	require.Equal(t, int64(60), c.held)

	c.Hold("huge", body(101), "", true)
	_, held = c.Held("huge")
	require.False(t, held, "a body larger than the bound is never held")

	c.Release("b")
	require.Zero(t, c.held)
	require.Empty(t, c.reading)
}
