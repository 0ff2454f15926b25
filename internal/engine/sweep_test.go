package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// clock is a time tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func valueCount(t *testing.T, log *memlog.Log, ns string) int {
	t.Helper()
	n := 0
	require.NoError(t, log.Values(ctx, ns, func(string) bool { n++; return true }))
	return n
}

// A value nothing refers to goes to the trash, then, two graces later, away; a save that made
// sure of a value just before it was swept and committed after reads through the trash, and the
// next sweep puts the value back.
func TestSweepValues(t *testing.T) {
	const grace = time.Minute
	clk := &clock{t: now}
	log := memlog.New(1 << 20)
	cfg := engine.Config{ValueGrace: grace, Clock: clk.now}
	e1, sweeper := engine.New(log, cfg), engine.New(log, cfg)
	key := func(s string) engine.Key { return engine.Key{Namespace: "n", Session: s, Agent: "a"} }
	img1, img2 := image(30<<10), image(31<<10)
	payload := func(img string) []byte { return []byte("[" + string(imageMessage(0, img)) + "]") }
	for s, img := range map[string]string{"a": img1, "b": img2} {
		_, err := e1.Save(ctx, engine.SaveRequest{Key: key(s), SaveID: "1", Payload: payload(img), Now: now})
		require.NoError(t, err)
	}
	res, err := sweeper.SweepValues(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, engine.ValueSweep{}, res, "everything is referred to")

	// b goes: its image is swept into the trash, then away.
	_, err = e1.Delete(ctx, key("b"), nil)
	require.NoError(t, err)
	res, err = sweeper.SweepValues(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, 1, res.Trashed)
	res, err = sweeper.SweepValues(ctx, "n")
	require.NoError(t, err)
	require.Zero(t, res.Deleted, "not before two graces")

	// Meanwhile e1, which made sure of img2 a moment ago, saves it again in c: it writes no value
	// (its cache), commits in time, and c reads through the trash.
	clk.add(grace / 4)
	_, err = e1.Save(ctx, engine.SaveRequest{Key: key("c"), SaveID: "1", Payload: payload(img2), Now: now})
	require.NoError(t, err)
	got, _, err := sweeper.Read(ctx, key("c"), 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(payload(img2)), string(got))

	clk.add(2 * grace)
	res, err = sweeper.SweepValues(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, engine.ValueSweep{Restored: 1}, res)
	require.Equal(t, 2, valueCount(t, log, "n"), "img1 and img2, no trash")

	// c goes too: two sweeps two graces apart delete img2 for good.
	_, err = e1.Delete(ctx, key("c"), nil)
	require.NoError(t, err)
	res, err = sweeper.SweepValues(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, 1, res.Trashed)
	clk.add(2 * grace)
	res, err = sweeper.SweepValues(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, 1, res.Deleted)
	require.Positive(t, res.FreedBytes)
	require.Equal(t, 1, valueCount(t, log, "n"))
	got, _, err = sweeper.Read(ctx, key("a"), 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(payload(img1)), string(got))

	// A save of img2 now stores it again (e1's cache is stale: a grace has passed).
	_, err = e1.Save(ctx, engine.SaveRequest{Key: key("d"), SaveID: "1", Payload: payload(img2), Now: now})
	require.NoError(t, err)
	e1.Forget()
	got, _, err = e1.Read(ctx, key("d"), 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(payload(img2)), string(got))
}

// A save that commits later than a grace after it made sure of its values is refused, and writes
// nothing: the sweep may have taken them.
func TestSweepValues_SlowSaveIsRefused(t *testing.T) {
	const grace = time.Minute
	clk := &clock{t: now}
	ticking := func() time.Time { clk.add(grace + time.Second); return clk.now() } // every look: more than a grace later
	log := memlog.New(1 << 20)
	slow := engine.New(log, engine.Config{ValueGrace: grace, Clock: ticking})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	payload := []byte("[" + string(imageMessage(0, image(30<<10))) + "]")
	_, err := slow.Save(ctx, engine.SaveRequest{Key: k, SaveID: "1", Payload: payload, Now: now})
	require.ErrorIs(t, err, engine.ErrBusy)
	require.Equal(t, 0, entries(t, log, k))
	fast := engine.New(log, engine.Config{ValueGrace: grace, Clock: clk.now})
	s, err := fast.Save(ctx, engine.SaveRequest{Key: k, SaveID: "1", Payload: payload, Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.Record.Version)
	require.Equal(t, 1, entries(t, log, k))
}
