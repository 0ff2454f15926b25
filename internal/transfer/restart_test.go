package transfer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// Writers keep saving while the daemon is restarted (gracefully, or by a crash). A writer whose save
// got no answer retries it with the same save id, as an agent would. Afterwards every session has
// exactly one version per save, in order, with the right content: nothing lost, nothing doubled.
func TestDaemon_WritersLoseNothingAcrossDaemonRestart(t *testing.T) {
	for _, mode := range []string{"graceful", "crash"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "crash" && testing.Short() {
				t.Skip("waits for the dead daemon's claims to expire")
			}
			env := testenv.Start(t)
			const writers, saves = 4, 15
			conv := func(w, n int) []byte {
				s := "["
				for i := 1; i <= n; i++ {
					if i > 1 {
						s += ","
					}
					s += fmt.Sprintf(`{"role":"user","content":"writer %d turn %d"}`, w, i)
				}
				return []byte(s + "]")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			progress := make(chan struct{}, writers*saves)
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					key := checkpoint.Key{Session: fmt.Sprintf("writer-%d", w)}
					for n := 1; n <= saves; n++ {
						id := fmt.Sprintf("w%d-turn%d", w, n)
						for {
							sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
							v, err := env.Client.Save(sctx, key, conv(w, n), checkpoint.WithSaveID(id), checkpoint.ExpectVersion(uint64(n-1)))
							scancel()
							if errors.Is(err, checkpoint.ErrUnavailable) && ctx.Err() == nil {
								continue // no answer: retry the same save, it is idempotent
							}
							if err == nil && v.Version != uint64(n) {
								err = fmt.Errorf("writer %d save %d became version %d", w, n, v.Version)
							}
							if err != nil {
								errs <- err
								return
							}
							break
						}
						progress <- struct{}{}
					}
				}(w)
			}
			for i := 0; i < writers*saves/3; i++ {
				<-progress
			}
			if mode == "graceful" {
				env.StopDaemon()
			} else {
				env.CrashDaemon()
			}
			env.StartDaemon()
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for w := 0; w < writers; w++ {
				key := checkpoint.Key{Session: fmt.Sprintf("writer-%d", w)}
				hist, err := env.Client.History(ctx, key)
				require.NoError(t, err)
				require.Len(t, hist, saves, "writer %d", w)
				for i, v := range hist {
					require.Equal(t, uint64(i+1), v.Version)
					require.Equal(t, fmt.Sprintf("w%d-turn%d", w, i+1), v.SaveID)
				}
				got, _, err := env.Client.Restore(ctx, key, 0)
				require.NoError(t, err)
				require.Equal(t, string(conv(w, saves)), string(got))
			}
		})
	}
}
