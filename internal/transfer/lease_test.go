package transfer_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func turn(conv []byte, who string, n int) []byte {
	msg := fmt.Sprintf(`{"role":"user","content":"%s turn %d"}`, who, n)
	if string(conv) == "[]" || len(conv) == 0 {
		return []byte("[" + msg + "]")
	}
	return append(append(append([]byte(nil), conv[:len(conv)-1]...), ","+msg...), ']')
}

func client(t *testing.T, env *testenv.Env, writer string) *checkpoint.Client {
	t.Helper()
	c, err := checkpoint.New(env.Conn(), checkpoint.WithWriter(writer), checkpoint.WithTimeout(20*time.Second))
	require.NoError(t, err)
	return c
}

func TestLease_TakeoverFencesTheOldOwner(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Namespace: "team a", Session: "user@example.com/a.b*c >d"}
	a, b := client(t, env, "agent-a"), client(t, env, "agent-b")

	la, err := a.Acquire(ctx, key, checkpoint.WithOwner("agent-a"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), la.Epoch())
	conv := turn(nil, "a", 1)
	_, err = la.Save(ctx, conv)
	require.NoError(t, err)

	_, err = b.Acquire(ctx, key, checkpoint.WithOwner("agent-b"))
	require.ErrorIs(t, err, checkpoint.ErrLeased, "a live lease is not taken without force")
	var ce *checkpoint.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "agent-a", ce.Owner)
	require.Equal(t, uint64(1), ce.Epoch)
	_, err = b.Save(ctx, key, turn(conv, "b", 1))
	require.ErrorIs(t, err, checkpoint.ErrLeased, "a writer without the lease is refused while it is held")

	lb, err := b.Acquire(ctx, key, checkpoint.WithOwner("agent-b"), checkpoint.WithForce())
	require.NoError(t, err)
	require.Equal(t, uint64(2), lb.Epoch(), "every acquisition has a higher epoch")
	convB := turn(conv, "b", 1)
	vb, err := lb.Save(ctx, convB)
	require.NoError(t, err)

	_, err = la.Save(ctx, turn(conv, "a", 2))
	require.ErrorIs(t, err, checkpoint.ErrFenced, "the old owner's late write is refused")
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "agent-b", ce.Owner, "the refusal names the current owner")
	require.Equal(t, uint64(2), ce.Epoch)
	select {
	case <-la.Lost():
	default:
		t.Fatal("a fenced lease reports itself lost")
	}
	require.ErrorIs(t, la.Renew(ctx), checkpoint.ErrFenced)
	require.ErrorIs(t, la.Release(ctx), checkpoint.ErrFenced, "the old owner cannot release the new owner's lease")

	got, head, err := b.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, vb.Version, head.Version)
	require.Equal(t, string(convB), string(got), "nothing of the late write is in the session")

	list, err := b.List(ctx, key.Namespace)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NotNil(t, list[0].Lease)
	require.Equal(t, "agent-b", list[0].Lease.Owner)

	require.NoError(t, lb.Release(ctx))
	_, err = lb.Save(ctx, turn(convB, "b", 2))
	require.ErrorIs(t, err, checkpoint.ErrFenced, "a released epoch writes no more")
	_, err = a.Save(ctx, key, turn(convB, "anyone", 1))
	require.NoError(t, err, "a released session takes writes without a lease again")
	st, err := a.LeaseStatus(ctx, key)
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Epoch, "release keeps the epoch, so the next is higher")
	require.Empty(t, st.Owner)
}

func TestLease_ExpiryAndRenewal(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	a, b := client(t, env, "a"), client(t, env, "b")

	// A lease that is renewed keeps others out well past its TTL.
	kept := checkpoint.Key{Session: "kept"}
	la, err := a.Acquire(ctx, kept, checkpoint.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	time.Sleep(time.Second)
	_, err = b.Acquire(ctx, kept)
	require.ErrorIs(t, err, checkpoint.ErrLeased)
	require.NoError(t, la.Release(ctx))
	lb, err := b.Acquire(ctx, kept)
	require.NoError(t, err, "a released lease is free at once")
	require.NoError(t, lb.Release(ctx))

	// A lease that is not renewed expires and can be taken over without force.
	lapsed := checkpoint.Key{Session: "lapsed"}
	la, err = a.Acquire(ctx, lapsed, checkpoint.WithTTL(200*time.Millisecond), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	v1, err := la.Save(ctx, turn(nil, "a", 1))
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	_, err = la.Save(ctx, turn(turn(nil, "a", 1), "a", 2))
	require.NoError(t, err, "an expired lease nobody took over still holds the current epoch")
	time.Sleep(300 * time.Millisecond)
	lb, err = b.Acquire(ctx, lapsed)
	require.NoError(t, err)
	require.Equal(t, uint64(2), lb.Info().Head, "the acquisition reports the head")
	_, err = la.Save(ctx, turn(nil, "a", 3))
	require.ErrorIs(t, err, checkpoint.ErrFenced)
	require.ErrorIs(t, la.Renew(ctx), checkpoint.ErrFenced)
	h, err := b.History(ctx, lapsed)
	require.NoError(t, err)
	require.Len(t, h, 2)
	require.Equal(t, v1.Hash, h[0].Hash)
}

func TestLease_SessionWithoutVersions(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "fresh"}
	conv, v, l, err := env.Client.Resume(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "[]", string(conv))
	require.Zero(t, v.Version)

	list, err := env.Client.List(ctx, "")
	require.NoError(t, err)
	require.Empty(t, list, "a leased session without versions is not listed")
	_, _, err = env.Client.Restore(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	_, err = env.Client.History(ctx, key)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)

	v, err = l.Save(ctx, turn(nil, "me", 1), checkpoint.ExpectVersion(0))
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Version)
	v, err = l.Pause(ctx, turn(turn(nil, "me", 1), "me", 2))
	require.NoError(t, err)
	require.Equal(t, wire.ReasonPause, v.Reason)
}

// Many saves of the old owner race a forced takeover: none that started after the takeover
// returned is stored, and the history after the new owner's first version holds only its writes.
//
// The writers stop on what they saw, not on a count or a clock: the takeover is made once the old
// owner has a version stored, and each writer stops after a few saves started once the takeover
// had returned. (Under load the takeover's reply can arrive after the old owner's first refusals:
// writers that stopped after 5 refusals had all stopped before it, and no save was late.)
func TestLease_NoLateWriteSlipsPastATakeover(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "race"}
	a, b := client(t, env, "old"), client(t, env, "new")
	la, err := a.Acquire(ctx, key, checkpoint.WithOwner("old"))
	require.NoError(t, err)

	type attempt struct {
		late bool // started after the takeover had returned
		err  error
	}
	var (
		mu        sync.Mutex
		attempts  []attempt
		wg        sync.WaitGroup
		oldStored = make(chan struct{}) // closed once a save of the old owner succeeded
		storeOnce sync.Once
		takenOver = make(chan struct{}) // closed once the takeover returned
	)
	const lateSaves = 5 // each writer's saves started after the takeover returned
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, late := 0, 0; late < lateSaves && ctx.Err() == nil; i++ {
				at := attempt{late: isClosed(takenOver)}
				_, at.err = la.Save(ctx, turn(nil, fmt.Sprintf("old-%d", w), i))
				mu.Lock()
				attempts = append(attempts, at)
				mu.Unlock()
				if at.err == nil {
					storeOnce.Do(func() { close(oldStored) })
				}
				if at.late {
					late++
				}
			}
		}()
	}
	select {
	case <-oldStored:
	case <-ctx.Done():
		t.Fatal("no save of the old owner succeeded before the takeover")
	}
	lb, err := b.Acquire(ctx, key, checkpoint.WithOwner("new"), checkpoint.WithForce())
	require.NoError(t, err)
	close(takenOver)
	_, err = lb.Save(ctx, turn(nil, "new", 1))
	require.NoError(t, err)
	wg.Wait()

	late := 0
	for _, at := range attempts {
		if at.late {
			late++
			require.ErrorIs(t, at.err, checkpoint.ErrFenced, "a save started after the takeover")
		}
	}
	require.Equal(t, 4*lateSaves, late, "every writer made its late saves")
	h, err := b.History(ctx, key)
	require.NoError(t, err)
	seenNew := false
	for _, v := range h {
		if v.Writer == "new" {
			seenNew = true
		} else {
			require.False(t, seenNew, "version %d by %s after the takeover", v.Version, v.Writer)
		}
	}
	require.True(t, seenNew)
	require.Equal(t, "old", h[0].Writer, "the old owner's saves before the takeover are kept")
}

// isClosed says whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The helper process of TestLease_PauseResumeAcrossProcesses: resume, add two turns, pause.
func TestLease_HelperAgentProcess(t *testing.T) {
	url := os.Getenv("CHECKPOINTD_TEST_AGENT_URL")
	if url == "" {
		t.Skip("run as a helper process by TestLease_PauseResumeAcrossProcesses")
	}
	ctx := ctxT(t)
	who := os.Getenv("CHECKPOINTD_TEST_AGENT_NAME")
	c, err := checkpoint.Connect(url, nil, checkpoint.WithWriter(who))
	require.NoError(t, err)
	defer c.Close()
	conv, _, l, err := c.Resume(ctx, checkpoint.Key{Session: "handover"}, checkpoint.WithOwner(who))
	require.NoError(t, err)
	conv = turn(conv, who, 1)
	_, err = l.Save(ctx, conv)
	require.NoError(t, err)
	v, err := l.Pause(ctx, turn(conv, who, 2))
	require.NoError(t, err)
	require.NoError(t, json.NewEncoder(os.Stdout).Encode(map[string]any{"epoch": l.Epoch(), "version": v.Version}))
}

func TestLease_PauseResumeAcrossProcesses(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	for _, who := range []string{"first", "second", "third"} {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLease_HelperAgentProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CHECKPOINTD_TEST_AGENT_URL="+env.URL(), "CHECKPOINTD_TEST_AGENT_NAME="+who)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	conv, head, err := env.Client.Restore(ctx, checkpoint.Key{Session: "handover"}, 0)
	require.NoError(t, err)
	want := []byte("[]")
	for _, who := range []string{"first", "second", "third"} {
		want = turn(turn(want, who, 1), who, 2)
	}
	require.Equal(t, string(want), string(conv), "each process continued where the last paused")
	require.Equal(t, uint64(6), head.Version)
	require.Equal(t, wire.ReasonPause, head.Reason)
	require.Equal(t, "third", head.Writer)
	st, err := env.Client.LeaseStatus(ctx, checkpoint.Key{Session: "handover"})
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Epoch)
	require.Empty(t, st.Owner, "paused: released")
}
