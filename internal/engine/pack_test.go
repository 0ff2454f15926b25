package engine_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// Without packs every save stays an entry; with them, a crash between a pack's commit and the
// deletion of what it packed leaves entries that readers skip and the next pack deletes.
func TestPack_CrashBeforeDeletes(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", open), func(t *testing.T) {
			k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
			none, log := newEngine(t, 1<<20, engine.Config{NoPack: true})
			saveTurns(t, none, k, 0, 40)
			require.Equal(t, 20, entries(t, log, k))
			checkVersions(t, none, k, 20)

			e := engine.New(log, engine.Config{PackEntries: 6, PackOpen: open})
			engine.CrashBeforeDeletes(e, true)
			saveTurns(t, e, k, 40, 44) // 22 entries: packed, none deleted
			require.Equal(t, 23, entries(t, log, k))
			e.Forget()
			checkVersions(t, e, k, 22)
			checkHistory(t, e, k, 22)

			engine.CrashBeforeDeletes(e, false)
			saveTurns(t, e, k, 44, 56) // 6 more saves: packed; they and the 21 left deleted
			require.Equal(t, 3, entries(t, log, k), "two packs and the last save")
			checkVersions(t, e, k, 28)

			// A rewrite inside a pack: old versions keep their bytes, the head has the rewrite.
			kept := conversation(4)
			rw := string(kept[:len(kept)-1]) + "," + string(message(100)) + "]"
			_, err := save(e, engine.SaveRequest{Key: k, SaveID: "rw", Payload: []byte(rw)})
			require.NoError(t, err)
			_, err = e.Pack(ctx, k, true)
			require.NoError(t, err)
			e.Forget()
			got, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
			require.NoError(t, err)
			require.Equal(t, rw, string(got))
			for _, v := range []int{1, 21, 22, 27, 28} {
				got, _, err := e.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
				require.NoError(t, err)
				require.Equal(t, string(conversation(2*v)), string(got), "version %d", v)
			}
			// Saves go on after the pack, and pack again.
			_, err = save(e, engine.SaveRequest{Key: k, SaveID: "after", Payload: []byte(rw[:len(rw)-1] + "," + string(message(101)) + "]")})
			require.NoError(t, err)
			checkHistory(t, e, k, 30)
		})
	}
}

// Packs and saves of two engines on one log: a pack that loses its compare-and-swap writes
// nothing and undoes nothing; every version stays readable.
func TestPack_TwoEngines(t *testing.T) {
	a, log := newEngine(t, 1<<20, engine.Config{PackEntries: 3})
	b := engine.New(log, engine.Config{PackEntries: 3})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	for i := 0; i < 60; i += 2 {
		e := []*engine.Engine{a, b}[(i/2)%2]
		_, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(i), Payload: conversation(i + 2)})
		require.NoError(t, err)
		// Both try to pack, the other one with a stale cache.
		_, err = a.Pack(ctx, k, i%4 == 0)
		require.NoError(t, err)
		_, err = b.Pack(ctx, k, false)
		require.NoError(t, err)
	}
	checkVersions(t, a, k, 30)
	checkHistory(t, b, k, 30)
	require.Less(t, entries(t, log, k), 20)
}

// Two engines (daemons) saving to one session at once: no acknowledged save is lost, and no
// version number is given twice.
func TestSave_ConcurrentEngines(t *testing.T) {
	a, log := newEngine(t, 1<<20, engine.Config{PackEntries: 5})
	b := engine.New(log, engine.Config{PackEntries: 5})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	const writers, saves = 4, 25
	var mu sync.Mutex
	acked := map[uint64]string{}
	var wg sync.WaitGroup
	for w := range writers {
		e := []*engine.Engine{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range saves {
				id := fmt.Sprintf("w%d-%d", w, i)
				// Each save appends one message naming its writer; the head decides the base.
				s, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: id, Now: now,
					Payload: []byte(fmt.Sprintf(`[{"role":"user","content":%q}]`, id)), Base: nil, Reason: "turn"})
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				if s.PackDue {
					if _, err := e.Pack(ctx, k, false); err != nil {
						t.Errorf("pack: %v", err)
					}
				}
				mu.Lock()
				if prev, dup := acked[s.Record.Version]; dup {
					t.Errorf("version %d given to %s and %s", s.Record.Version, prev, id)
				}
				acked[s.Record.Version] = id
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, acked, writers*saves)
	h, err := b.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, writers*saves)
	for _, r := range h {
		require.Equal(t, acked[r.Version], r.SaveID, "version %d", r.Version)
		got, _, err := a.Read(ctx, k, r.Version, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Contains(t, string(got), r.SaveID)
	}
}
