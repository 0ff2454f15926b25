package enginetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// RunHistory runs the history scenarios on l: sessions whose versions are walked newest first
// across packs, state entries, a fork, retention, and a deletion with saves after it, each checked
// by CheckHistory (every version once, none past the first kept). Each scenario uses a namespace
// of its own.
func RunHistory(t *testing.T, l engine.Log) {
	for _, sc := range []struct {
		name string
		fn   func(t *testing.T, l engine.Log, k engine.Key)
	}{
		{"LongTail", historyLongTail},
		{"SmallPacks", historySmallPacks},
		{"StateEntries", historyStateEntries},
		{"Fork", historyFork},
		{"Retention", historyRetention},
		{"DeleteAndSaveAgain", historyDeleteAndSaveAgain},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sc.fn(t, l, engine.Key{Namespace: "history-" + sc.name, Session: "s", Agent: "a"})
		})
	}
}

// historyLongTail: the default packs, so that the newest pages are walked by back pointer over a
// tail of up to 256 entries, then through the pack before it.
func historyLongTail(t *testing.T, l engine.Log, k engine.Key) {
	e := engine.New(l, engine.Config{})
	SaveTurns(t, e, k, 0, 2*60, 0)
	CheckHistory(t, e, k, 1, 60)
	SaveTurns(t, e, k, 2*60, 2*300, 0) // a pack at 256 entries, then a tail of 44
	e.Forget()
	CheckHistory(t, e, k, 1, 300)
}

// historySmallPacks: packs of 8 entries, checked at each place the head can be in a pack's cycle.
func historySmallPacks(t *testing.T, l engine.Log, k engine.Key) {
	e := engine.New(l, engine.Config{PackEntries: 8})
	for v := 1; v <= 26; v++ {
		SaveTurns(t, e, k, 2*(v-1), 2*v, 0)
		if v%5 == 0 || v > 22 {
			CheckHistory(t, e, k, 1, uint64(v))
		}
	}
}

// historyStateEntries: leases taken and renewed between saves (state entries holding the head
// version's record: several per version, so that tails are long in entries and short in
// versions), one right after every pack, and one as the last entry.
func historyStateEntries(t *testing.T, l engine.Log, k engine.Key) {
	e := engine.New(l, engine.Config{PackEntries: 32})
	SaveTurns(t, e, k, 0, 2*3, 0)
	ls, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "me", TTL: time.Hour, Now: Now})
	require.NoError(t, err)
	renew := func() {
		_, err := e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: ls.Lease.Epoch, TTL: time.Hour, Now: Now})
		require.NoError(t, err)
	}
	for v := 4; v <= 40; v++ {
		saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("state-%d", v), Base: U64(uint64(v - 1)),
			Payload: Array(2*(v-1), 2*v), Epoch: ls.Lease.Epoch, Now: Now})
		require.NoError(t, err)
		if saved.PackDue {
			_, err = e.Pack(ctx, k, false)
			require.NoError(t, err)
			renew() // a state entry right after the pack: it names the pack, which holds its version too
		}
		for range v % 4 {
			renew()
		}
		if v%6 == 0 {
			CheckHistory(t, e, k, 1, uint64(v))
		}
	}
	CheckHistory(t, e, k, 1, 40)
}

// historyFork: a fork's history is its own, from its version 1 (the source's version it started
// from) up, before and after its first pack copies that version in; the source's is unchanged.
func historyFork(t *testing.T, l engine.Log, k engine.Key) {
	e := engine.New(l, engine.Config{PackEntries: 8})
	SaveTurns(t, e, k, 0, 2*30, 0)
	fork := engine.Key{Namespace: k.Namespace, Session: "fork", Agent: k.Agent}
	_, err := e.Fork(ctx, engine.ForkRequest{From: k, Version: 20, To: fork, SaveID: "fork", Now: Now})
	require.NoError(t, err)
	CheckHistory(t, e, fork, 1, 1)
	for v := 2; v <= 20; v++ { // no pack until a save makes one due: the fork shares meanwhile
		saved, err := e.Save(ctx, engine.SaveRequest{Key: fork, SaveID: fmt.Sprintf("fork-%d", v), Base: U64(uint64(v - 1)),
			Payload: Array(40+2*(v-2), 40+2*(v-1)), Now: Now})
		require.NoError(t, err)
		require.Equal(t, uint64(v), saved.Record.Version)
		if v == 5 {
			CheckHistory(t, e, fork, 1, 5)
		}
		if saved.PackDue && v > 5 {
			_, err = e.Pack(ctx, fork, false)
			require.NoError(t, err)
		}
	}
	CheckHistory(t, e, fork, 1, 20)
	CheckHistory(t, e, k, 1, 30)
}

// historyRetention: after a prune, history starts at the first version kept, whether that is in
// a pack or in the tail, and saves after it go on from there.
func historyRetention(t *testing.T, l engine.Log, k engine.Key) {
	e := engine.New(l, engine.Config{PackEntries: 16})
	SaveTurns(t, e, k, 0, 2*60, 0)
	_, err := e.Prune(ctx, k, engine.Retention{KeepLast: 25}, Now, false)
	require.NoError(t, err)
	CheckHistory(t, e, k, 36, 60)
	SaveTurns(t, e, k, 2*60, 2*70, 0)
	_, err = e.Prune(ctx, k, engine.Retention{KeepLast: 5}, Now, false)
	require.NoError(t, err)
	CheckHistory(t, e, k, 66, 70) // the first kept in the tail since the last pack
}

// historyDeleteAndSaveAgain: a deleted session saved again has only its new versions, from 1.
func historyDeleteAndSaveAgain(t *testing.T, l engine.Log, k engine.Key) {
	e := engine.New(l, engine.Config{PackEntries: 16})
	SaveTurns(t, e, k, 0, 2*40, 0)
	_, err := e.Delete(ctx, k, nil)
	require.NoError(t, err)
	_, _, err = e.HistoryPage(ctx, k, engine.HistoryCursor{}, 10)
	require.ErrorIs(t, err, engine.ErrNotFound)
	SaveTurns(t, e, k, 0, 2*3, 0)
	CheckHistory(t, e, k, 1, 3)
	SaveTurns(t, e, k, 2*3, 2*30, 0)
	e.Forget()
	CheckHistory(t, e, k, 1, 30)
}
