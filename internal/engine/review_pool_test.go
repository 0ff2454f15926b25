package engine_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// Sessions saved concurrently by two engines whose caches hold two sessions each (every save
// evicts another session and gives its encoder to the pool, which the next new frame takes),
// with packs and small runs (maxRun) ending frames: every version of every session reads back as
// it was saved, so no encoder's state went from one session's frame to another's.
func TestEngine_PooledEncodersUnderChurn(t *testing.T) {
	mem := memlog.New(1 << 20)
	cfg := engine.Config{Sessions: 2, PackEntries: 7}
	engines := []*engine.Engine{engine.New(mem, cfg), engine.New(mem, cfg)}
	engine.SetMaxRun(engines[1], 1500)
	const sessions, versions = 8, 24
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", s), Agent: "a"}
			for v := range versions {
				e := engines[(s+v)%2]
				for {
					saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("v", v), Base: enginetest.U64(uint64(v)),
						Payload: enginetest.Array(2*v+s, 2*v+s+2), Now: now})
					if err != nil {
						t.Errorf("session %d version %d: %v", s, v+1, err)
						return
					}
					if saved.PackDue {
						if _, err := e.Pack(ctx, k, false); err != nil {
							t.Errorf("session %d: pack: %v", s, err)
							return
						}
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	for s := range sessions {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", s), Agent: "a"}
		for v := 1; v <= versions; v++ {
			got, _, err := engines[v%2].Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "session %d version %d", s, v)
			require.Equal(t, string(enginetest.Array(s, 2*v+s)), string(got), "session %d version %d", s, v)
		}
	}
}
