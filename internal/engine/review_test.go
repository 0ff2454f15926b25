package engine_test

// Review of internal/engine (session 17, reviewer 2). Each TestReview_ test shows one finding
// and FAILS on the code as reviewed; the report (and each test's comment) says what is wrong.
// Each passes since the s17-enginefix commit that names it (the finding numbers in the comments
// are the reviewer's first draft's; the commits use /work/wt/review2-engine.md's).
// The interleavings are made deterministic with hookLog, a memlog wrapper that runs a chosen
// function before an Append, reads like a batched JetStream read (an entry deleted before the
// read reaches it is missing) and deletes one sequence at a time like logstore's pipelined
// STREAM.MSG.DELETEs (engine.Log does not say a Delete is atomic).

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// hookLog is a memlog.Log with hooks. The hooks are one-shot: each runs once, then is cleared.
type hookLog struct {
	*memlog.Log

	mu sync.Mutex
	// beforeAppend runs before the next Append to key onKey.
	onKey        engine.Key
	onKind       byte // when not 0: only before an entry of this kind (byte 4 of an entry)
	beforeAppend func()
	// beforeEntry runs in the next Range of key rangeKey before it delivers its entry number at.
	rangeKey    engine.Key
	rangeAt     int
	beforeEntry func()
	// afterDeletes pauses a Delete after it removed this many entries (one at a time), until
	// resume is closed; paused is closed when it gets there.
	afterDeletes    int
	paused, resume  chan struct{}
	deletesHookUsed bool
}

func newHookLog(inner *memlog.Log) *hookLog { return &hookLog{Log: inner} }

func (l *hookLog) takeAppendHook(key engine.Key, data []byte) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.beforeAppend == nil || key != l.onKey || l.onKind != 0 && (len(data) < 5 || data[4] != l.onKind) {
		return nil
	}
	f := l.beforeAppend
	l.beforeAppend = nil
	return f
}

func (l *hookLog) Append(c ctxT, key engine.Key, data []byte, after uint64) (uint64, error) {
	if f := l.takeAppendHook(key, data); f != nil {
		f()
	}
	return l.Log.Append(c, key, data, after)
}

// Range reads like a batched direct get: the entries are those of the log when the read began,
// but one deleted before the read reaches it is not delivered.
func (l *hookLog) Range(c ctxT, key engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	var seqs []uint64
	if err := l.Log.Range(c, key, from, upTo, func(en engine.Entry) bool { seqs = append(seqs, en.Seq); return true }); err != nil {
		return err
	}
	for i, seq := range seqs {
		l.mu.Lock()
		var f func()
		if l.beforeEntry != nil && key == l.rangeKey && i == l.rangeAt {
			f, l.beforeEntry = l.beforeEntry, nil
		}
		l.mu.Unlock()
		if f != nil {
			f()
		}
		en, err := l.Log.Get(c, key, seq)
		if errors.Is(err, engine.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		if !fn(en) {
			return nil
		}
	}
	return nil
}

// Delete removes the entries one at a time, in order, as pipelined deletes do.
func (l *hookLog) Delete(c ctxT, key engine.Key, seqs ...uint64) error {
	for i, seq := range seqs {
		l.mu.Lock()
		pause := l.paused != nil && !l.deletesHookUsed && i == l.afterDeletes
		if pause {
			l.deletesHookUsed = true
		}
		l.mu.Unlock()
		if pause {
			close(l.paused)
			<-l.resume
		}
		if err := l.Log.Delete(c, key, seq); err != nil {
			return err
		}
	}
	return nil
}

func reviewKey(s string) engine.Key { return engine.Key{Namespace: "n", Session: s, Agent: "a"} }

// saveAppends2 saves version v+1 of k (messages 2v, 2v+1) as an append.
func saveAppends2(t *testing.T, e *engine.Engine, k engine.Key, v int) {
	t.Helper()
	base := uint64(v)
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("%s-%d", k.Session, v+1), Base: &base,
		Payload: array(2*v, 2*v+2)})
	require.NoError(t, err)
}

// saveAppends saves versions 1..n of k, two messages each, as appends.
func saveAppends(t *testing.T, e *engine.Engine, k engine.Key, n int) {
	t.Helper()
	for v := 0; v < n; v++ {
		base := uint64(v)
		_, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("%s-%d", k.Session, v+1), Base: &base,
			Payload: array(2*v, 2*v+2)})
		require.NoError(t, err)
	}
}

// Finding 1 (fork.go forkReads/releasePins + Fork): a Fork pins its source, then writes the fork
// entry. A deletion of the source on another daemon between the two sees a pin whose fork has no
// entry yet, takes it for a crash's stale pin, drops it and deletes the source. The fork entry is
// then written and the Fork acknowledged: version 1 of the fork reads through a source that is
// gone, for good.
func TestReview_ForkRacingSourceDeleteLosesAckedFork(t *testing.T) {
	inner := memlog.New(1 << 20)
	hl := newHookLog(inner)
	a := engine.New(hl, engine.Config{})    // the daemon forking
	b := engine.New(inner, engine.Config{}) // another daemon, deleting the source
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, a, src, 3)

	hl.mu.Lock()
	hl.onKey = dst
	var deleteErr error
	hl.beforeAppend = func() { // between the pin on src and the fork entry on dst
		_, deleteErr = b.Delete(ctx, src, nil)
	}
	hl.mu.Unlock()
	forked, err := a.Fork(ctx, engine.ForkRequest{From: src, Version: 2, To: dst, SaveID: "f", Now: now})
	require.ErrorIs(t, deleteErr, engine.ErrBusy, "the deletion meets a fork in flight: refusing it (busy) is one answer")
	if err != nil {
		return // refusing the fork is the other; acknowledging it is a promise
	}
	require.Equal(t, uint64(1), forked.Record.Version)
	got, _, err := a.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "the fork was acknowledged as version 1 of %s", dst)
	require.Equal(t, string(conversation(4)), string(got))

	_, err = b.Delete(ctx, src, nil) // now the fork has its entry: the deletion copies it in
	require.NoError(t, err)
	got, _, err = a.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(4)), string(got))
}

// A pin whose fork never got its entry (a Fork that crashed) stops holding its source after two
// graces: the source's deletion then drops it as stale.
func TestFork_PinOfACrashedForkExpires(t *testing.T) {
	const grace = time.Minute
	clk := &clock{t: now}
	inner := memlog.New(1 << 20)
	l := &lostAckLog{Log: inner}
	cfg := engine.Config{ValueGrace: grace, Clock: clk.now}
	a := engine.New(l, cfg)
	b := engine.New(inner, cfg)
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, a, src, 3)
	l.failAll = &dst // the Fork "crashes": its fork entry never gets written
	_, err := a.Fork(ctx, engine.ForkRequest{From: src, Version: 2, To: dst, SaveID: "f", Now: now})
	require.Error(t, err)
	_, err = b.Delete(ctx, src, nil)
	require.ErrorIs(t, err, engine.ErrBusy, "within the grace, the pin may be a fork in flight")
	clk.add(2*grace + time.Second)
	_, err = b.Delete(ctx, src, nil)
	require.NoError(t, err)
}

// Finding 2 (fork.go Fork): Fork reads the source's version, then pins it by number only. If
// the source is deleted and saved again up to that number in between, the pin lands on another
// conversation; the fork entry holds the hash of the one read; the Fork is acknowledged and the
// fork never reads (its source's version hashes to something else).
func TestReview_ForkPinsARecreatedSourceVersion(t *testing.T) {
	inner := memlog.New(1 << 20)
	hl := newHookLog(inner)
	a := engine.New(hl, engine.Config{})
	b := engine.New(inner, engine.Config{})
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, a, src, 3)

	hl.mu.Lock()
	hl.onKey = src
	hl.beforeAppend = func() { // the Fork has read version 2; its pin comes next
		_, err := b.Delete(ctx, src, nil)
		require.NoError(t, err)
		for v := 0; v < 3; v++ { // a new conversation, up to version 3 again
			base := uint64(v)
			_, err := save(b, engine.SaveRequest{Key: src, SaveID: fmt.Sprint("new-", v), Base: &base, Payload: array(100+v, 101+v)})
			require.NoError(t, err)
		}
	}
	hl.mu.Unlock()
	_, err := a.Fork(ctx, engine.ForkRequest{From: src, Version: 2, To: dst, SaveID: "f", Now: now})
	if err != nil {
		return
	}
	_, _, err = a.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "the fork was acknowledged as version 1 of %s", dst)
}

// Finding 3 (retention.go Prune): the cut is decided from a history read before the head is
// changed; changeHead re-reads the head but never checks that it is still the same incarnation
// of the session (Deleted) or that the cut is below its head. A deletion and new saves on another
// daemon in between make the prune set firstVersion past the new head: every acknowledged
// version of the new session but the head is gone (history empty, reads not found).
func TestReview_PruneAfterDeleteAndResaveHidesNewVersions(t *testing.T) {
	inner := memlog.New(1 << 20)
	hl := newHookLog(inner)
	a := engine.New(hl, engine.Config{})
	b := engine.New(inner, engine.Config{})
	k := reviewKey("s")
	saveAppends(t, a, k, 6)

	hl.mu.Lock()
	hl.onKey = k
	hl.beforeAppend = func() { // the prune read the history (cut = 4) and is about to commit
		_, err := b.Delete(ctx, k, nil)
		require.NoError(t, err)
		saveAppends(t, b, k, 2)
	}
	hl.mu.Unlock()
	_, err := a.Prune(ctx, k, engine.Retention{KeepLast: 2}, now, false)
	require.NoError(t, err)

	hist, err := a.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, hist, 2, "the new session's two versions are both within KeepLast 2")
	_, _, err = a.Read(ctx, k, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
}

// gapRead sets up k with 5 unpacked versions read by engine a through hl, and engine b packing
// k (forced) through a log that deletes one entry at a time and pauses after removing entries
// 1..3: run starts the pack when a's next Range of k is about to deliver its second entry, so
// that read meets entries 2 and 3 deleted and 4 and 5 (the read's last) still there.
func gapRead(t *testing.T) (a *engine.Engine, k engine.Key, run func(read func())) {
	return gapReadFrames(t, false)
}

// gapReadFrames is gapRead; frames makes every save start a zstd frame of its own (the engine
// forgets its sessions between saves, as a restart or another daemon's save would make it).
func gapReadFrames(t *testing.T, frames bool) (a *engine.Engine, k engine.Key, run func(read func())) {
	inner := memlog.New(1 << 20)
	hl := newHookLog(inner)
	a = engine.New(hl, engine.Config{NoPack: true})
	bl := newHookLog(inner)
	b := engine.New(bl, engine.Config{})
	k = reviewKey("s")
	for v := 0; v < 5; v++ {
		if frames {
			a.Forget()
		}
		saveAppends2(t, a, k, v)
	}
	run = func(read func()) {
		bl.afterDeletes, bl.paused, bl.resume = 3, make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		hl.mu.Lock()
		hl.rangeKey, hl.rangeAt = k, 1
		hl.beforeEntry = func() {
			go func() {
				_, err := b.Pack(ctx, k, true)
				done <- err
			}()
			<-bl.paused
		}
		hl.mu.Unlock()
		read()
		close(bl.resume)
		require.NoError(t, <-done)
	}
	return a, k, run
}

// Finding 4a (read.go read1): a read checks only that its last entry came. engine.Log says
// entries deleted meanwhile may be missing and a caller must check; a pack on another daemon
// deleting the entries it packed (logstore: pipelined deletes, one per entry) while a batched
// read goes on leaves a gap the read does not see. History then silently lacks versions.
func TestReview_HistoryMissesVersionsDeletedUnderTheRead(t *testing.T) {
	a, k, run := gapRead(t)
	var hist []engine.Record
	var err error
	run(func() { hist, err = a.History(ctx, k) })
	require.NoError(t, err)
	var versions []uint64
	for _, r := range hist {
		versions = append(versions, r.Version)
	}
	require.Equal(t, []uint64{1, 2, 3, 4, 5}, versions, "a history must list every version or fail")
}

// Finding 4b: the same gap under Read of the head: the version is healthy, but the read that missed
// entries reports the session as corrupt (ErrCorrupt, not the errShort that makes it start
// again). The value sweep's mark (markSession) has the same gap: it misses the values the missing
// entries list.
func TestReview_ReadReportsCorruptWhenAPackDeletesUnderIt(t *testing.T) {
	a, k, run := gapRead(t)
	var got []byte
	var err error
	run(func() { got, _, err = a.Read(ctx, k, 0, engine.ReadOptions{Verify: true}) })
	require.NoError(t, err, "a healthy session read while another daemon packs it")
	require.Equal(t, string(conversation(10)), string(got))
}

// Finding 0 (read.go logAtDepth, pack.go collect, fork.go forkReads/packFork): a deletion entry
// stays the first live entry of a deleted session's log (reads start at it), but everything
// that handles forks expects the fork entry to be the first live entry. A fork into a session
// that was deleted before is acknowledged, then never reads ("a fork entry after the first",
// ErrCorrupt), never packs (the same error), and its source's deletion or retention takes its
// pin for a stale one (forkReads looks at the deletion entry) and removes what it reads.
func TestReview_ForkIntoADeletedSessionNeverReads(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, e, src, 3)
	saveAppends(t, e, dst, 1)
	_, err := e.Delete(ctx, dst, nil)
	require.NoError(t, err)
	_, err = e.Fork(ctx, engine.ForkRequest{From: src, Version: 2, To: dst, SaveID: "f", Now: now})
	require.NoError(t, err)
	got, _, err := e.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "the fork was acknowledged")
	require.Equal(t, string(conversation(4)), string(got))
	_, err = e.Pack(ctx, dst, true)
	require.NoError(t, err, "the fork's first pack copies its source in")
}

// The same, seen from the source: its deletion drops the pin of a fork into a deleted session
// (forkReads sees the deletion entry first and calls the pin stale) and deletes what the fork
// reads.
func TestReview_SourceDeleteDropsThePinOfAForkIntoADeletedSession(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, e, src, 3)
	saveAppends(t, e, dst, 1)
	_, err := e.Delete(ctx, dst, nil)
	require.NoError(t, err)
	_, err = e.Fork(ctx, engine.ForkRequest{From: src, Version: 2, To: dst, SaveID: "f", Now: now})
	require.NoError(t, err)
	_, err = e.Delete(ctx, src, nil)
	if err != nil {
		return // refusing is fine
	}
	_, _, err = e.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "a deletion of the source must leave its forks readable")
}

// Finding 5 (pack.go packOnce): Pack decides "due" from the engine's cached head and never checks
// it against the log, even when forced. releasePins (a deletion or prune of a fork's source)
// relies on a forced Pack of the fork to copy it in: with a stale cached fork the Pack does
// nothing, four times, and the source's Delete fails with ErrBusy — and again at every retry,
// for as long as the fork stays cached. Here the engine cached the fork's session while it was
// empty (a save to it was refused), then another daemon forked into it.
func TestReview_StaleCacheMakesForcedPackANoOp(t *testing.T) {
	inner := memlog.New(1 << 20)
	a := engine.New(inner, engine.Config{})
	b := engine.New(inner, engine.Config{})
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, a, src, 3)
	_, err := save(a, engine.SaveRequest{Key: dst, SaveID: "bad", Payload: []byte(`[{"role":`)})
	require.Error(t, err) // refused: a caches dst as an empty session

	_, err = b.Fork(ctx, engine.ForkRequest{From: src, Version: 3, To: dst, SaveID: "f", Now: now})
	require.NoError(t, err) // another daemon forks into dst (and has not packed it yet)

	for try := 0; try < 2; try++ {
		_, err = a.Delete(ctx, src, nil)
		if err == nil {
			break
		}
	}
	require.NoError(t, err, "deleting the source copies its fork in first")
	got, _, err := a.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(6)), string(got))
}

// Finding 6 (engine.go Config.Window, stream.go decoder): Window is taken as given, but every
// read decodes with a window of at most 8 MiB. An engine configured with a larger window
// acknowledges saves that no read can decode (ErrCorrupt).
func TestReview_WindowLargerThanReadsDecode(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{Window: 16 << 20})
	k := reviewKey("s")
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(4)})
	if err != nil {
		return // refused at save (or at New): fine
	}
	got, _, err := e.Read(ctx, k, 0, engine.ReadOptions{})
	require.NoError(t, err, "an acknowledged save must read back")
	require.Equal(t, string(conversation(4)), string(got))
}

// Config.Validate names what is wrong (ErrConfig), and an Engine made with such a Config refuses
// saves with it instead of a raw zstd error per save, or saves no read decodes.
func TestConfig_InvalidIsRefused(t *testing.T) {
	for name, cfg := range map[string]engine.Config{
		"window not a power of two": {Window: 3 << 20},
		"window above 8 MiB":        {Window: 16 << 20},
		"window below 1 KiB":        {Window: 512},
		"negative pack entries":     {PackEntries: -1},
		"negative pack bytes":       {PackBytes: -1},
		"negative sessions":         {Sessions: -1},
		"negative grace":            {ValueGrace: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, cfg.Validate(), engine.ErrConfig)
			e, _ := newEngine(t, 1<<20, cfg)
			_, err := save(e, engine.SaveRequest{Key: reviewKey("s"), SaveID: "1", Payload: conversation(2)})
			require.ErrorIs(t, err, engine.ErrConfig)
		})
	}
	require.NoError(t, engine.Config{}.Validate())
	require.NoError(t, engine.Config{Window: 8 << 20}.Validate())
}

// lostAckLog stores the next Append to key failKey, then reports a failure (a publish whose
// acknowledgement was lost: the outcome is unknown to the caller).
type lostAckLog struct {
	*memlog.Log
	mu      sync.Mutex
	failKey *engine.Key
	failAll *engine.Key // every Append to this key fails without storing anything
}

func (l *lostAckLog) Append(c ctxT, key engine.Key, data []byte, after uint64) (uint64, error) {
	l.mu.Lock()
	fail := l.failAll != nil && *l.failAll == key
	l.mu.Unlock()
	if fail {
		return 0, errors.New("nats: no responders")
	}
	seq, err := l.Log.Append(c, key, data, after)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.failKey != nil && *l.failKey == key {
		l.failKey = nil
		return 0, errors.New("nats: timeout")
	}
	return seq, err
}

// Finding 8 (fork.go Fork): when the fork entry's append fails with an unknown outcome (a lost
// acknowledgement), Fork unpins the source "best effort" although the fork entry may be stored.
// The fork then exists, reads through a source that no longer protects it, and the source's next
// prune or deletion leaves its version 1 unreadable.
func TestReview_ForkUnpinsAfterAnUnknownOutcome(t *testing.T) {
	inner := memlog.New(1 << 20)
	l := &lostAckLog{Log: inner}
	e := engine.New(l, engine.Config{})
	src, dst := reviewKey("src"), reviewKey("dst")
	saveAppends(t, e, src, 3)
	l.failKey = &dst
	_, err := e.Fork(ctx, engine.ForkRequest{From: src, Version: 1, To: dst, SaveID: "f", Now: now})
	require.Error(t, err)
	head, err := e.Head(ctx, dst)
	require.NoError(t, err, "the fork entry was stored")
	require.Equal(t, uint64(1), head.Version)

	_, err = e.Prune(ctx, src, engine.Retention{KeepLast: 1}, now, false)
	require.NoError(t, err)
	_, _, err = e.Read(ctx, dst, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "a stored fork's version 1 must stay readable")
}

// Finding 9 (pack.go packData/decodeRuns): a recompressing pack decodes the saves since the last
// pack on their own, but after an open pack (PackOpen) those saves continue the open pack's
// frame. Two daemons on one log with different PackOpen (a rolling change of the setting) leave
// a session no recompressing pack can ever pack: every Pack fails, and the tail grows for good.
func TestReview_RecompressingPackAfterAnOpenPackFails(t *testing.T) {
	inner := memlog.New(1 << 20)
	a := engine.New(inner, engine.Config{PackOpen: true, PackEntries: 4})
	b := engine.New(inner, engine.Config{PackEntries: 4})
	k := reviewKey("s")
	saveAppends(t, a, k, 4)
	r, err := a.Pack(ctx, k, false)
	require.NoError(t, err)
	require.Positive(t, r.Seq, "an open pack")
	saveAppends2 := func(from, n int) {
		for v := from; v < from+n; v++ {
			base := uint64(v)
			_, err := save(a, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("x", v), Base: &base, Payload: array(2*v, 2*v+2)})
			require.NoError(t, err)
		}
	}
	saveAppends2(4, 2) // these continue the open pack's frame
	_, err = b.Pack(ctx, k, true)
	require.NoError(t, err)
	got, _, err := b.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(12)), string(got))
}

// Finding 4c: the same gap under ReadZstd, which passes the stored frames through undecoded:
// when the saves start frames of their own (each after a restart, an eviction or another
// daemon's save), the stream it returns decodes cleanly to a conversation that lacks the missing
// entries' messages, under the version's record, and no error.
func TestReview_ReadZstdReturnsOtherBytesWhenAPackDeletesUnderIt(t *testing.T) {
	a, k, run := gapReadFrames(t, true)
	var z []byte
	var rec engine.Record
	var err error
	run(func() { z, rec, err = a.ReadZstd(ctx, k, 0) })
	if err != nil {
		return // refusing (or reading again) is fine
	}
	got, derr := zstdDecoder.DecodeAll(z, nil)
	require.NoError(t, derr)
	require.Equal(t, uint64(5), rec.Version)
	require.Equal(t, string(conversation(10)), string(got), "ReadZstd returned other bytes than version 5")
}

// Finding 10 (save.go saveOnce): the save id is looked up before an import is told apart, so an
// import whose save id some other version of the session has (a source that reused a save id
// after a pack: savedBefore only remembers the last pack and after) is answered "duplicate" with
// that other version's record — another version number and hash than the import declared — and
// nothing is copied.
func TestReview_ImportAnsweredWithAnotherVersionBySaveID(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := reviewKey("s")
	imp := func(v uint64, n int) (engine.Saved, error) {
		return save(e, engine.SaveRequest{Key: k, SaveID: "same", Payload: conversation(n), Reason: engine.ReasonMigrate,
			Import: &engine.Import{Version: v, Created: now, Hash: hashOf(conversation(n)), Origin: engine.Origin{Via: engine.ReasonMigrate}}})
	}
	_, err := imp(1, 2)
	require.NoError(t, err)
	s, err := imp(2, 4)
	require.NoError(t, err)
	require.Equal(t, uint64(2), s.Record.Version, "an import of version 2 answered with version %d (duplicate %v)", s.Record.Version, s.Duplicate)
	require.Equal(t, hashOf(conversation(4)), s.Record.Hash)
}

// randomText is n characters of hex: text that hardly compresses (and, under 32 KiB, is no value).
func randomText(n int, seed uint64) string {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = "0123456789abcdef"[x%16]
	}
	return string(b)
}

// Finding 11 (pack.go pack, the "only state entries" branch): a pack of a tail without a version
// deletes every entry of it but the last without appending anything, so without a
// compare-and-swap: nothing tells it that a save is being written in parts right then. The parts
// already written are the tail's last entries; the pack deletes all of them but the last; the
// save's own entry then commits (its expected last sequence, its last part, is still the last)
// and is acknowledged, and no read ever gets it back (its parts are gone: short, then
// ErrCorrupt), nor can the session be packed again.
func TestReview_StateOnlyPackDeletesThePartsOfASaveInFlight(t *testing.T) {
	inner := memlog.New(4096)
	hl := newHookLog(inner)
	a := engine.New(hl, engine.Config{})    // the lease holder, saving
	b := engine.New(inner, engine.Config{}) // another daemon, packing (forced, or an idle pack)
	k := reviewKey("s")
	_, err := save(a, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(2)})
	require.NoError(t, err)
	_, err = a.Pack(ctx, k, true)
	require.NoError(t, err)
	ls, _, err := a.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "a", TTL: time.Hour, Now: now})
	require.NoError(t, err)
	for i := 0; i < 3; i++ { // renewals: the tail holds state entries only
		_, err = a.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: ls.Lease.Epoch, TTL: time.Hour, Now: now})
		require.NoError(t, err)
	}

	var msgs []string
	for i := 0; i < 20; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"%s"}]}`, randomText(2000, uint64(i))))
	}
	conv := []byte("[" + string(conversation(2)[1:len(conversation(2))-1]) + "," + strings.Join(msgs, ",") + "]")
	hl.mu.Lock()
	hl.onKey, hl.onKind = k, 1 // before the save's own entry: its parts are written
	hl.beforeAppend = func() {
		_, err := b.Pack(ctx, k, true)
		require.NoError(t, err)
	}
	hl.mu.Unlock()
	_, err = save(a, engine.SaveRequest{Key: k, SaveID: "2", Epoch: ls.Lease.Epoch, Payload: conv})
	if err != nil {
		return // refused: fine
	}
	got, _, err := a.Read(ctx, k, 2, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "version 2 was acknowledged")
	require.Equal(t, string(conv), string(got))
}

// Finding 12 (read.go HistoryPage/isPackOf): a cursor's Pack is checked to be a pack of the
// session, not to be the pack that holds the versions just below Before. A cursor of an old
// page's Pack with a recent Before (forged, or a client mixing cursors) pages from that old pack:
// the versions between are skipped, and the page still says there is more. The doc's claim "a
// stale or forged one only costs a walk from the head" does not hold.
func TestReview_HistoryCursorWithAnotherPackSkipsVersions(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{PackEntries: 4})
	k := reviewKey("s")
	saveTurns(t, e, k, 0, 40) // 20 versions, packs of 4
	var cursors []engine.HistoryCursor
	cur := engine.HistoryCursor{}
	for {
		_, next, err := e.HistoryPage(ctx, k, cur, 3)
		require.NoError(t, err)
		if next == (engine.HistoryCursor{}) {
			break
		}
		cursors = append(cursors, next)
		cur = next
	}
	require.GreaterOrEqual(t, len(cursors), 3)
	first, deep := cursors[0], cursors[len(cursors)-1]
	require.NotZero(t, deep.Pack)
	mixed := engine.HistoryCursor{Before: first.Before, Pack: deep.Pack}
	page, _, err := e.HistoryPage(ctx, k, mixed, 3)
	require.NoError(t, err)
	require.NotEmpty(t, page)
	require.Equal(t, first.Before-1, page[0].Version, "the page below version %d", first.Before)
}

// Finding 4d: the gap of finding 4 in the value sweep's mark loses a value for good. A save made
// sure of its value, a sweep trashed it before the save committed (the trash exists for this),
// and the next sweep, two graces later, settles the trash entry: its mark reads the session while
// a pack on another daemon deletes the entries it packed; the mark misses the save's entry
// (the read's last entry still came), finds the value unused, and deletes the trash entry. The
// value is gone; version 1 reads as corrupt.
func TestReview_SweepMarkMissesAValueAPackIsMoving(t *testing.T) {
	const grace = time.Minute
	clk := &clock{t: now}
	inner := memlog.New(1 << 20)
	hl := newHookLog(inner)
	cfg := engine.Config{ValueGrace: grace, Clock: clk.now, NoPack: true}
	a := engine.New(hl, cfg) // saves, and sweeps
	bl := newHookLog(inner)
	b := engine.New(bl, engine.Config{ValueGrace: grace, Clock: clk.now}) // packs
	k := reviewKey("s")
	img := image(40 << 10)
	first := []byte("[" + string(imageMessage(0, img)) + "]")

	hl.mu.Lock()
	hl.onKey, hl.onKind = k, 1 // the save stored its value; before it commits, a sweep runs
	hl.beforeAppend = func() {
		res, err := a.SweepValues(ctx, "n")
		require.NoError(t, err)
		require.Equal(t, 1, res.Trashed)
	}
	hl.mu.Unlock()
	_, err := save(a, engine.SaveRequest{Key: k, SaveID: "1", Payload: first})
	require.NoError(t, err)
	for v := 1; v < 5; v++ {
		base := uint64(v)
		_, err := save(a, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v + 1), Base: &base, Payload: array(10*v, 10*v+1)})
		require.NoError(t, err)
	}
	_, _, err = a.Read(ctx, k, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "read through the trash")

	clk.add(3 * grace)
	bl.afterDeletes, bl.paused, bl.resume = 3, make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	hl.mu.Lock()
	hl.rangeKey, hl.rangeAt = k, 0
	hl.beforeEntry = func() {
		go func() {
			_, err := b.Pack(ctx, k, true)
			done <- err
		}()
		<-bl.paused
	}
	hl.mu.Unlock()
	_, err = a.SweepValues(ctx, "n")
	close(bl.resume)
	require.NoError(t, <-done)
	require.NoError(t, err)

	got, _, err := a.Read(ctx, k, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "version 1 refers to its value")
	require.Equal(t, string(first), string(got))
}

// Finding 13 (decompression bomb): rewrites of a very compressible conversation cost a few
// hundred stored bytes each, so packs (due on stored bytes) came late and every generation piled
// into one zstd frame, decoded whole by each read and each rewrite. A save now counts at least
// its decoded bytes / 16 in the tail, and starts a new frame rather than take a run past the
// engine's limit (lowered here to 64 KiB).
func TestSave_CompressibleRewritesStayBounded(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{PackBytes: 16 << 10, PackEntries: 1000})
	engine.SetMaxRun(e, 64<<10)
	k := reviewKey("s")
	long := strings.Repeat("a", 30<<10)
	due := 0
	var convs [][]byte
	for v := 0; v < 10; v++ {
		conv := []byte(fmt.Sprintf(`[{"role":"user","content":[{"type":"text","text":"rewrite %d"}]},{"role":"assistant","content":[{"type":"text","text":"%s"}]}]`, v, long))
		convs = append(convs, conv)
		s, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v), Payload: conv})
		require.NoError(t, err)
		if s.PackDue {
			due++
		}
	}
	require.Positive(t, due, "10 rewrites decoding to 300 KiB are due to be packed at PackBytes 16 KiB")

	var run, most int64
	require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		isSave, frame, raw, err := engine.SavePiece(en.Data)
		require.NoError(t, err)
		if isSave {
			if frame {
				run = 0
			}
			run += raw
			most = max(most, run)
		}
		return true
	}))
	require.LessOrEqual(t, most, int64(64<<10), "a run of saves decodes to at most the limit")
	for v, conv := range convs {
		got, _, err := e.Read(ctx, k, uint64(v+1), engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, string(conv), string(got))
	}
}

// A pack that reads a log short although the log did not move has found entries missing (here a
// part of a committed save): it reports it (ErrCorrupt) instead of taking it for another writer
// that came first and returning nothing, which left the session unpacked for good.
func TestPack_ReportsMissingEntries(t *testing.T) {
	e, log := newEngine(t, 4096, engine.Config{})
	k := reviewKey("s")
	var msgs []string
	for i := 0; i < 4; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"%s"}]}`, randomText(2000, uint64(i))))
	}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: []byte("[" + strings.Join(msgs, ",") + "]")})
	require.NoError(t, err)
	var first uint64
	require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool { first = en.Seq; return false }))
	require.NoError(t, log.Delete(ctx, k, first)) // the save's first part
	_, err = e.Pack(ctx, k, true)
	require.ErrorIs(t, err, engine.ErrCorrupt)
}

// A daemon whose cache predates another daemon's deletion of a session does not answer a
// retried save id as a duplicate of the deleted session's version: it reads the log again.
func TestSave_RetryAfterAnotherDaemonDeletedIsNoDuplicate(t *testing.T) {
	inner := memlog.New(1 << 20)
	a := engine.New(inner, engine.Config{})
	b := engine.New(inner, engine.Config{})
	k := reviewKey("s")
	_, err := save(a, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)})
	require.NoError(t, err)
	_, err = b.Delete(ctx, k, nil)
	require.NoError(t, err)
	s, err := save(a, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)})
	require.NoError(t, err)
	require.False(t, s.Duplicate, "the version it duplicates was deleted")
	got, _, err := b.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(2)), string(got))
}

// After a state-only pack (its entry resets the tail's count), the saves after it read back,
// every version, through every read path (gap check, the tail read without sequences, history).
func TestPack_StateOnlyThenSavesRead(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := reviewKey("s")
	saveAppends(t, e, k, 1)
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	ls, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "a", TTL: time.Hour, Now: now})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err = e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: ls.Lease.Epoch, TTL: time.Hour, Now: now.Add(time.Duration(i) * time.Second)})
		require.NoError(t, err)
	}
	r, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	require.Positive(t, r.Entries, "a state-only pack")
	for v := 1; v < 4; v++ {
		base := uint64(v)
		_, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s", v), Base: &base, Epoch: ls.Lease.Epoch, Payload: array(2*v, 2*v+2)})
		require.NoError(t, err)
	}
	for _, fresh := range []bool{false, true} {
		if fresh {
			e.Forget()
		}
		for v := 1; v <= 4; v++ {
			got, _, err := e.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
			require.NoError(t, err)
			require.Equal(t, string(conversation(2*v)), string(got))
		}
		hist, err := e.History(ctx, k)
		require.NoError(t, err)
		require.Len(t, hist, 4)
	}
}
