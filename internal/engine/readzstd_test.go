package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// ReadZstd decodes, with a plain zstd decoder, to exactly what Read returns, for every version,
// stored as it is or not: packs (recompressed or open), a restart's new frame, state entries
// between saves, saves that add nothing (a first save of "[]", the same array again), a rewrite,
// a version inside a pack.
func TestReadZstd(t *testing.T) {
	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()
	for name, cfg := range map[string]engine.Config{"packs": {PackEntries: 5}, "open packs": {PackEntries: 5, PackOpen: true},
		"no packs": {NoPack: true}} {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, 1<<20, cfg)
			k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
			var want []string
			step := func(payload []byte) {
				s, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(len(want)), Payload: payload})
				require.NoError(t, err)
				want = append(want, string(payload))
				if s.PackDue {
					_, err := e.Pack(ctx, k, false)
					require.NoError(t, err)
				}
			}
			step([]byte("[]"))
			for n := 2; n <= 24; n += 2 {
				step(conversation(n))
				if n == 12 {
					step(conversation(n)) // adds nothing
				}
				if n == 8 || n == 12 {
					l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
					require.NoError(t, err)
					_, err = e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, Now: now})
					require.NoError(t, err)
				}
				if n == 12 {
					e.Forget() // the next save starts a frame, right after a state entry
				}
			}
			step(conversation(7)) // a rewrite
			step(conversation(9))
			step(conversation(9))
			_, err := e.Pack(ctx, k, true)
			require.NoError(t, err)
			for _, cold := range []bool{false, true} {
				if cold {
					e.Forget()
				}
				for v := 1; v <= len(want); v++ {
					conv, rec, err := e.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
					require.NoError(t, err, "version %d", v)
					require.Equal(t, want[v-1], string(conv), "version %d", v)
					z, rec2, err := e.ReadZstd(ctx, k, uint64(v))
					require.NoError(t, err, "version %d", v)
					require.Equal(t, rec, rec2)
					got, err := dec.DecodeAll(z, nil)
					require.NoError(t, err, "version %d", v)
					require.Equal(t, want[v-1], string(got), "version %d", v)
				}
			}
		})
	}
}

// The head of a session without rewrites travels as its stored frames: a fraction of its size.
func TestReadZstd_PassesStoredFramesThrough(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{PackEntries: 5})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 60)
	z, _, err := e.ReadZstd(ctx, k, 0)
	require.NoError(t, err)
	require.Less(t, len(z), len(conversation(60))/4)
}
