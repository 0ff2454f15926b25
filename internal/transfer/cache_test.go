package transfer

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

// An entry larger than the cache is loaded once for all the pieces of its read, and let go of after
// the last piece or when no piece was asked for in a while: a 64 MiB restore does not stay in memory.
func TestByteCache_BigEntryLivesForOneRead(t *testing.T) {
	c := newByteCache(1 << 10)
	c.bigIdle = 2 * time.Second
	loads := 0
	big := bytes.Repeat([]byte("x"), 4<<10)
	get := func(key string) []byte {
		data, err := c.GetOrLoad(key, func() ([]byte, error) { loads++; return big, nil })
		require.NoError(t, err)
		return data
	}
	for range 3 {
		require.Equal(t, big, get("a"))
	}
	require.Equal(t, 1, loads, "one load for every piece")
	require.Equal(t, wire.Hash(big), c.Hash("a", big))
	require.Equal(t, wire.Hash(big), c.Hash("a", []byte("other")), "hashed once while cached")
	require.Equal(t, wire.Hash([]byte("other")), c.Hash("b", []byte("other")), "not cached: hashed, not stored")

	c.DropBig("b")
	get("a")
	require.Equal(t, 1, loads, "dropping another key keeps it")
	c.DropBig("a")
	get("a")
	require.Equal(t, 2, loads, "the last piece was served: loaded again")

	for range 4 { // asked for within bigIdle: kept
		time.Sleep(c.bigIdle / 20)
		get("a")
	}
	require.Equal(t, 2, loads)
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.big == nil
	}, 10*time.Second, 20*time.Millisecond, "idle: let go of")
	get("a")
	require.Equal(t, 3, loads)

	small := []byte("s")
	_, err := c.GetOrLoad("s", func() ([]byte, error) { loads++; return small, nil })
	require.NoError(t, err)
	c.DropBig("s")
	_, err = c.GetOrLoad("s", func() ([]byte, error) { loads++; return small, nil })
	require.NoError(t, err)
	require.Equal(t, 4, loads, "entries that fit stay in the cache")
}

// Once let go of, a large read's bytes are garbage: nothing in the cache (its idle timer included)
// keeps them alive.
func TestByteCache_DroppedBytesAreCollected(t *testing.T) {
	c := newByteCache(1 << 10)
	c.bigIdle = 50 * time.Millisecond
	collected := func(drop func(key string)) bool {
		var freed atomic.Bool
		func() {
			data, err := c.GetOrLoad("k", func() ([]byte, error) { return make([]byte, 1<<20), nil })
			require.NoError(t, err)
			runtime.AddCleanup(&data[0], func(*atomic.Bool) { freed.Store(true) }, &freed)
		}()
		drop("k")
		deadline := time.Now().Add(5 * time.Second)
		for !freed.Load() && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		return freed.Load()
	}
	require.True(t, collected(c.DropBig), "after the last piece")
	require.True(t, collected(func(string) { time.Sleep(4 * c.bigIdle) }), "after idling")
}

// Readers of the same entries at once, hashing them and dropping the big slot under each other, all
// get their own bytes and hash (run with -race: the hash used to be read outside the lock).
func TestByteCache_ConcurrentReadersHashAndDrop(t *testing.T) {
	c := newByteCache(64)
	c.bigIdle = time.Millisecond
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
					c.DropBig(k)
				}
				if !bytes.Equal(d, want) {
					errs <- "bytes changed under a reader after a drop: " + k
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
