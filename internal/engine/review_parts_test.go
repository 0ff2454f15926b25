package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// A save in parts that crashed after its parts (its own entry never written) leaves parts at the
// end of the log; the saves after them name the entry before (the parts hold its head). Walks by
// back pointer, the tail and reads all see every version once.
func TestEngine_BackAfterCrashedParts(t *testing.T) {
	engine.AlwaysBack(t)
	mem := memlog.New(4096)
	crash := &crashSave{Log: mem}
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	e := engine.New(crash, engine.Config{PackEntries: 1000})
	rng := rand.New(rand.NewPCG(1, 2))
	big := func(i int) []byte { // incompressible: its entry takes parts
		var b strings.Builder
		for range 12000 {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		return []byte(fmt.Sprintf(`[{"role":"user","content":"%d %s"}]`, i, b.String()))
	}
	head := uint64(0)
	for i := range 30 {
		crash.armed = i%3 == 1
		_, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s", i), Base: enginetest.U64(head), Payload: big(i), Now: now})
		if crash.armed {
			require.ErrorIs(t, err, errCrash)
			continue
		}
		require.NoError(t, err, "save %d", i)
		head++
		if i%5 == 0 {
			e.Forget()
		}
	}
	parts := 0
	require.NoError(t, mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		if save, _, _, err := engine.SavePiece(en.Data); err == nil && !save {
			parts++
		}
		return true
	}))
	require.Greater(t, parts, 20, "parts, some of them left by crashed saves")
	enginetest.CheckHistory(t, e, k, 1, head)
	enginetest.CheckHistory(t, engine.New(mem, engine.Config{}), k, 1, head)
	for v := uint64(1); v <= head; v++ {
		_, rec, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, v, rec.Version)
	}
}

var errCrash = errors.New("crashed before the save's own entry")

// crashSave fails, when armed, the append of a save's own entry (after its parts).
type crashSave struct {
	engine.Log
	armed bool
}

func (c *crashSave) Append(cx ctxT, k engine.Key, data []byte, after uint64) (uint64, error) {
	if save, _, _, err := engine.SavePiece(data); c.armed && err == nil && save {
		return 0, errCrash
	}
	return c.Log.Append(cx, k, data, after)
}
