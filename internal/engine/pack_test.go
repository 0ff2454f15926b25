package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
	// Meanwhile a housekeeper packs (forced), forgets, forks the head and reads, on both engines.
	stop := make(chan struct{})
	var forks sync.Map // fork key → the version's content it must read as
	housekeeper := func() {
		defer close(stop)
		for i := 0; ; i++ {
			mu.Lock()
			done := len(acked) == writers*saves
			mu.Unlock()
			if done {
				return
			}
			e := []*engine.Engine{a, b}[i%2]
			if _, err := e.Pack(ctx, k, true); err != nil {
				t.Errorf("pack: %v", err)
				return
			}
			if i%3 == 0 {
				e.Forget()
			}
			if i%5 == 0 {
				fk := engine.Key{Namespace: "n", Session: fmt.Sprint("fork", i), Agent: "a"}
				s, err := e.Fork(ctx, engine.ForkRequest{From: k, To: fk, SaveID: "f", Now: now})
				if errors.Is(err, engine.ErrNotFound) {
					continue // no version yet
				}
				if err != nil {
					t.Errorf("fork: %v", err)
					return
				}
				forks.Store(fk, s.Record.Hash)
			}
			if _, _, err := e.ReadZstd(ctx, k, 0); err != nil && !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("read: %v", err)
				return
			}
		}
	}
	go housekeeper()
	wg.Wait()
	<-stop
	require.Len(t, acked, writers*saves)
	n := 0
	forks.Range(func(fk, hash any) bool {
		_, rec, err := b.Read(ctx, fk.(engine.Key), 1, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, hash, rec.Hash)
		n++
		return true
	})
	t.Logf("%d forks made while saving", n)
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

// Lease renewals between saves do not pile up: a pack deletes state entries even when there is no
// version to pack; and saves with long strings pack before their records outgrow an entry.
func TestPack_StateEntriesAndLongRecords(t *testing.T) {
	e, log := newEngine(t, 64<<10, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(2)})
	require.NoError(t, err)
	l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	for range 300 {
		_, err = e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, TTL: time.Minute, Now: now})
		require.NoError(t, err)
	}
	_, err = e.Pack(ctx, k, true)
	require.NoError(t, err)
	require.LessOrEqual(t, entries(t, log, k), 3)
	st, err := e.LeaseStatus(ctx, k)
	require.NoError(t, err)
	require.Equal(t, l.Lease.Epoch, st.Lease.Epoch)
	checkHistory(t, e, k, 1)

	long := strings.Repeat("w", 4000)
	for i := range 100 {
		s, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(long, i), Writer: long, Reason: long, Epoch: l.Lease.Epoch,
			Payload: conversation(4 + 2*i)})
		require.NoError(t, err)
		if s.PackDue {
			_, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
		}
	}
	require.Less(t, entries(t, log, k), 50, "packed (each pack a few of these records: they fit an entry)")
	checkHistory(t, e, k, 101)
}
