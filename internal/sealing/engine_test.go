package sealing_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
	"github.com/checkpointd/checkpointd/internal/sealing"
)

func turns(from, to int) []byte {
	b := []byte{'['}
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"role":"user","content":"turn %d"}`, i)
	}
	return append(b, ']')
}

// Rotation as the engine lives it (docs/security.md §6): after the new key comes first, new saves
// and packs are sealed with it and every version reads, the old key opening the old entries. A
// pack is never packed again and a session's versions are read from its first pack on, so once
// the old key is dropped every version of a session it sealed a pack of fails with
// engine.ErrCorrupt (a SealError naming the entry), its head too, and the engine refuses to save
// on it rather than write; a session started after the rotation is untouched.
func TestEngine_RotationAndDroppedKey(t *testing.T) {
	k1, k2 := newKey(), newKey()
	l := sealing.NewLog(memlog.New(1<<20), keysOf(t, map[string]any{"*": k1}))
	e := engine.New(l, engine.Config{})
	old, fresh := engine.Key{Namespace: "team", Session: "old", Agent: "main"}, engine.Key{Namespace: "team", Session: "new", Agent: "main"}
	save := func(k engine.Key, v int) error {
		base := uint64(v - 1)
		_, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(k.Session, v), Base: &base, Payload: turns(2*v-2, 2*v), Now: time.Now()})
		return err
	}
	for v := 1; v <= 3; v++ {
		require.NoError(t, save(old, v))
	}
	r, err := e.Pack(ctx, old, true)
	require.NoError(t, err)
	require.Positive(t, r.Entries, "packed under k1")

	_, err = l.SetKeys(keysOf(t, map[string]any{"team": []string{k2, k1}}))
	require.NoError(t, err)
	for v := 4; v <= 5; v++ {
		require.NoError(t, save(old, v))
	}
	for v := 1; v <= 2; v++ {
		require.NoError(t, save(fresh, v))
	}
	e.Forget()
	for v := uint64(1); v <= 5; v++ {
		got, _, err := e.Read(ctx, old, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "both keys open version %d", v)
		require.Equal(t, string(turns(0, 2*int(v))), string(got))
	}

	dropped, err := l.SetKeys(keysOf(t, map[string]any{"team": k2}))
	require.NoError(t, err)
	require.Len(t, dropped, 1)
	e.Forget()
	for v := uint64(1); v <= 5; v++ {
		got, _, err := e.Read(ctx, old, v, engine.ReadOptions{})
		require.ErrorIs(t, err, engine.ErrCorrupt, "version %d", v)
		require.Nil(t, got)
		var se *sealing.SealError
		require.True(t, errors.As(err, &se), "version %d: %v", v, err)
		require.Contains(t, err.Error(), "which this checkpointd does not hold")
	}
	require.ErrorIs(t, save(old, 6), engine.ErrCorrupt, "no save on a log it cannot read")
	got, _, err := e.Read(ctx, fresh, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "a session sealed only with k2 reads")
	require.Equal(t, string(turns(0, 4)), string(got))
	require.NoError(t, save(fresh, 3))
}
