package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
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

// words returns n bytes of text drawn from a small vocabulary: compressible, as conversations
// are, but not a repeat zstd turns into a few blocks.
func words(seed, n int) []byte {
	vocab := strings.Fields("the quick brown fox jumps over a lazy dog while seven agents read files edit code and run tests again")
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	var b []byte
	for len(b) < n {
		b = append(append(b, vocab[r.IntN(len(vocab))]...), ' ')
	}
	return b[:n]
}

// A version inside a recompressed pack of several 128 KiB blocks travels as the pack's blocks
// that lie within it, passed through, and the rest raw: cut anywhere (at a block's end, inside
// the last block, before the first block ends), it decodes to the pack's first bytes, and the
// blocks passed through keep it compressed.
func TestCutFrame(t *testing.T) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(8<<20))
	require.NoError(t, err)
	defer dec.Close()
	plain := words(1, 5*128<<10+12345)
	cuts := []int64{0, 1, 128<<10 - 1, 128 << 10, 128<<10 + 1, 3*128<<10 + 77, 5 * 128 << 10, 5*128<<10 + 1, int64(len(plain)) - 1, int64(len(plain))}
	require.Equal(t, 7, cutAll(t, dec, engine.CompressFrame(plain), plain, cuts, true))
	whole := words(2, 4*128<<10)
	require.Equal(t, 1, cutAll(t, dec, engine.CompressFrame(whole), whole, []int64{4 * 128 << 10}, true)) // its last block full

	// A frame of another encoder's making, whose blocks are not full (flushed every 120,000
	// bytes): not cut (its blocks' ends would have to be decoded).
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderCRC(false), zstd.WithWindowSize(1<<20))
	require.NoError(t, err)
	for at := 0; at < len(plain); at += 120000 {
		_, err = w.Write(plain[at:min(at+120000, len(plain))])
		require.NoError(t, err)
		require.NoError(t, w.Flush())
	}
	require.NoError(t, w.Close())
	require.Equal(t, 0, cutAll(t, dec, buf.Bytes(), plain, cuts, false))
}

// cutAll cuts frame f of plain at each of cuts, checks each cut made, and returns how many were;
// full: f's blocks are full (the pack encoder's), so every cut past the first block is made.
func cutAll(t *testing.T, dec *zstd.Decoder, f, plain []byte, cuts []int64, full bool) int {
	n := 0
	for _, raw := range cuts {
		out, got, ok, err := engine.CutFrame(f, raw)
		require.NoError(t, err, "cut at %d", raw)
		if !ok {
			require.False(t, full && raw >= 128<<10, "cut at %d", raw)
			continue
		}
		require.Equal(t, string(plain[:raw]), string(got), "cut at %d: the bytes it checks", raw)
		dz, err := dec.DecodeAll(out, nil)
		require.NoError(t, err, "cut at %d", raw)
		require.Equal(t, string(plain[:raw]), string(dz), "cut at %d", raw)
		require.Less(t, len(out), int(raw)/2+128<<10, "cut at %d: the blocks within it pass through compressed", raw)
		n++
	}
	return n
}

// ReadZstd of every version of a session whose recompressed pack spans several zstd blocks
// decodes to what Read returns, and stays compressed.
func TestReadZstd_InsideABigPack(t *testing.T) {
	e, _ := newEngine(t, 4<<20, engine.Config{PackEntries: 40, PackBytes: 2 << 20})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	var msgs [][]byte
	for i := range 45 {
		msgs = append(msgs, []byte(fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"%s"}]}`, words(i, 10000+i*1500))))
		s, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(i), Payload: append(append([]byte{'['}, bytes.Join(msgs, []byte(","))...), ']')})
		require.NoError(t, err)
		if s.PackDue {
			_, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
		}
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(8<<20))
	require.NoError(t, err)
	defer dec.Close()
	for v := uint64(1); v <= 45; v++ {
		want, rec, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		z, rec2, err := e.ReadZstd(ctx, k, v)
		require.NoError(t, err, "version %d", v)
		require.Equal(t, rec, rec2)
		got, err := dec.DecodeAll(z, nil)
		require.NoError(t, err, "version %d", v)
		require.Equal(t, string(want), string(got), "version %d", v)
		require.Less(t, len(z), len(want)/2+128<<10, "version %d", v)
	}
}

// rangeBounds records the upTo of every Range: on JetStream a batch fetches every entry up to it.
type rangeBounds struct {
	engine.Log
	upTo []uint64
	keys []engine.Key
}

func (r *rangeBounds) Range(cx ctxT, k engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	r.upTo, r.keys = append(r.upTo, upTo), append(r.keys, k)
	return r.Log.Range(cx, k, from, upTo, fn)
}

// A read of a version the last pack holds (or one before it) reads the packs, not the saves
// after them: Read, ReadZstd, and a fork read through its source; with more packs than a read
// fetches one at a time, a batch from the start up to the last pack.
func TestRead_StopsAtTheLastPack(t *testing.T) {
	mem := memlog.New(1 << 20)
	log := &rangeBounds{Log: mem}
	e := engine.New(log, engine.Config{PackEntries: 10})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 30) // 15 versions: a pack of 1–10, 11–15 after it, then two state entries
	l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, Now: now})
	require.NoError(t, err)
	last, err := mem.Last(ctx, k)
	require.NoError(t, err)
	for v := uint64(1); v <= 15; v++ {
		log.upTo = nil
		conv, _, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, string(conversation(int(2*v))), string(conv), "version %d", v)
		_, _, err = e.ReadZstd(ctx, k, v)
		require.NoError(t, err, "version %d", v)
		switch {
		case v <= 15-7: // seven entries after the last pack: at most seven versions
			require.Empty(t, log.upTo, "version %d is in the only pack: it is fetched alone", v)
		case v > 10:
			require.Equal(t, []uint64{last.Seq, last.Seq}, log.upTo, "version %d", v)
		}
	}
	f := engine.Key{Namespace: "n", Session: "fork", Agent: "a"}
	_, err = e.Fork(ctx, engine.ForkRequest{From: k, Version: 5, To: f, SaveID: "fork", Now: now})
	require.NoError(t, err)
	log.upTo, log.keys = nil, nil
	conv, _, err := e.Read(ctx, f, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(10)), string(conv))
	for i, upTo := range log.upTo {
		if log.keys[i] == k {
			require.Less(t, upTo, last.Seq, "the fork reads version 5 of its source up to the source's pack")
		}
	}

	// Three packs: a batch from the start, up to the last.
	saveTurns(t, e, k, 30, 80) // versions 16–40
	last, err = mem.Last(ctx, k)
	require.NoError(t, err)
	log.upTo = nil
	conv, _, err = e.Read(ctx, k, 3, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(6)), string(conv))
	require.Len(t, log.upTo, 1)
	require.Less(t, log.upTo[0], last.Seq)
}

// dataCounts counts a log's Range and ReadData calls; before, if set, runs before each ReadData
// (another writer moving the log between a read's Last and its ReadData).
type dataCounts struct {
	engine.Log
	ranges, datas int
	before        func()
}

func (d *dataCounts) Range(cx ctxT, k engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	d.ranges++
	return d.Log.Range(cx, k, from, upTo, fn)
}

func (d *dataCounts) ReadData(cx ctxT, k engine.Key, after uint64, n int, fn func([]byte) bool) error {
	d.datas++
	if d.before != nil {
		d.before()
	}
	return d.Log.(engine.DataReader).ReadData(cx, k, after, n, fn)
}

// A restore of a session with one pack fetches the pack and reads the entries after it without
// their sequences (DataReader), no batch from the start; when what it reads is not exactly those
// entries (a save in parts, a pack by another engine meanwhile), it reads them with Range.
func TestRead_TailWithoutSequences(t *testing.T) {
	mem := memlog.New(4 << 10)
	log := &dataCounts{Log: mem}
	e := engine.New(log, engine.Config{PackEntries: 10})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 30) // a pack of versions 1–10, 11–15 after it
	l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, Now: now})
	require.NoError(t, err)
	check := func(v uint64, want []byte, ranges, datas int) {
		t.Helper()
		log.ranges, log.datas = 0, 0
		conv, _, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, string(want), string(conv), "version %d", v)
		require.Equal(t, []int{ranges, datas}, []int{log.ranges, log.datas}, "version %d: Range and ReadData calls", v)
	}
	for v := uint64(1); v <= 15; v++ {
		check(v, conversation(int(2*v)), 0, map[bool]int{false: 0, true: 1}[v > 10])
	}

	// A save in parts (larger than an entry) after the pack: the entries counted are not those read.
	big := fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"%s"}]}`, words(7, 20000))
	base := uint64(15)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "big", Base: &base, Payload: []byte("[" + big + "]"), Now: now})
	require.NoError(t, err)
	want := append(append(conversation(30)[:len(conversation(30))-1], ","+big...), ']')
	check(16, want, 1, 1)

	// Another engine packs between the read's Last and its ReadData: the read starts again.
	other := engine.New(mem, engine.Config{PackEntries: 10})
	base = 16
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "17", Base: &base, Payload: array(32, 34), Now: now}) // not packed
	require.NoError(t, err)
	log.before = func() {
		log.before = nil
		_, err := other.Pack(ctx, k, true)
		require.NoError(t, err)
	}
	log.ranges, log.datas = 0, 0
	conv, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	want = append(append(want[:len(want)-1], ','), array(32, 34)[1:]...)
	require.Equal(t, string(want), string(conv))
	require.Equal(t, 1, log.datas)
	require.Positive(t, log.ranges, "what ReadData read was not the tail: Range read it")
}

// ReadZstdIf asks for the head's record once the log's last entry is read and before anything
// else is: a session saved once is read, record and body, with that one read; a caller that has
// the body (cached by the record's hash) gets the record and no bytes for it, and one that refuses
// (its error) gets its error. The record is the one Head and Version give, also when the last
// entry is a lease's; another version's is asked for once its entries are read.
func TestReadZstdIf(t *testing.T) {
	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()
	log := &countingLog{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{NoPack: true})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(6)})
	require.NoError(t, err)
	head, err := e.Head(ctx, k)
	require.NoError(t, err)

	var asked []engine.Record
	read := func(v uint64, answer bool, refuse error) ([]byte, engine.Record, error) {
		asked = nil
		return e.ReadZstdIf(ctx, k, v, func(r engine.Record) (bool, error) {
			asked = append(asked, r)
			return answer, refuse
		})
	}
	log.reads = 0
	z, rec, err := read(0, true, nil)
	require.NoError(t, err)
	require.Equal(t, 1, log.reads, "a session saved once: its last entry, read once")
	require.Equal(t, []engine.Record{head}, asked)
	require.Equal(t, head, rec)
	plain, err := dec.DecodeAll(z, nil)
	require.NoError(t, err)
	require.Equal(t, string(conversation(6)), string(plain))

	log.reads, log.moved = 0, 0
	z, rec, err = read(0, false, nil)
	require.NoError(t, err)
	require.Nil(t, z, "the caller has the body")
	require.Equal(t, head, rec)
	require.Equal(t, 0, log.reads, "the head as the engine saved it, checked with Moved")
	require.Equal(t, 1, log.moved)

	busy := errors.New("busy")
	z, rec, err = read(0, true, busy)
	require.ErrorIs(t, err, busy)
	require.Nil(t, z)
	require.Equal(t, engine.Record{}, rec)

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(8)})
	require.NoError(t, err)
	l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, Now: now})
	require.NoError(t, err)
	for v, payload := range map[uint64][]byte{0: conversation(8), 2: conversation(8), 1: conversation(6)} {
		want, err := e.Version(ctx, k, v)
		require.NoError(t, err)
		z, rec, err := read(v, true, nil)
		require.NoError(t, err)
		require.Equal(t, []engine.Record{want}, asked, "version %d", v)
		require.Equal(t, want, rec, "version %d", v)
		plain, err := dec.DecodeAll(z, nil)
		require.NoError(t, err)
		require.Equal(t, string(payload), string(plain), "version %d", v)
	}
}

// A read of the head whose body the caller has (found says no) trusts the head this engine saved
// only while the log has no entry after it: another engine on the same log (a second daemon) that
// saved a version, took a lease or deleted the session is seen at once (read-your-writes across
// daemons), and a purge is seen once the engine is told (Forget). The save's time carries a zone
// and a monotonic reading: the cached record is still the one the entry decodes to (a save keeps
// its time in UTC), as Head gives it.
func TestReadZstdIf_HeadSavedByAnotherEngine(t *testing.T) {
	log := &countingLog{Log: memlog.New(1 << 20)}
	mine, other := engine.New(log, engine.Config{NoPack: true}), engine.New(log, engine.Config{NoPack: true})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	headOf := func(e *engine.Engine) (engine.Record, error) {
		_, rec, err := e.ReadZstdIf(ctx, k, 0, func(engine.Record) (bool, error) { return false, nil })
		return rec, err
	}
	zoned := time.Now().In(time.FixedZone("UTC+5", 5*3600)) // with a monotonic reading, as the daemon's
	_, err := save(mine, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(4), Now: zoned})
	require.NoError(t, err)
	want, err := other.Head(ctx, k)
	require.NoError(t, err)
	log.reads = 0
	got, err := headOf(mine)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Zero(t, log.reads, "the head this engine saved: no entry read")

	_, err = save(other, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(6)})
	require.NoError(t, err)
	want, err = other.Head(ctx, k)
	require.NoError(t, err)
	got, err = headOf(mine)
	require.NoError(t, err)
	require.Equal(t, uint64(2), got.Version, "the version another engine saved")
	require.Equal(t, want, got)

	_, err = save(mine, engine.SaveRequest{Key: k, SaveID: "3", Payload: conversation(8)}) // this engine's cache moves on
	require.NoError(t, err)
	l, _, err := other.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	got, err = headOf(mine)
	require.NoError(t, err)
	require.Equal(t, uint64(3), got.Version, "a lease: an entry after, the same head")
	_, err = other.Release(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, Now: now})
	require.NoError(t, err)

	_, err = save(mine, engine.SaveRequest{Key: k, SaveID: "4", Payload: conversation(10)})
	require.NoError(t, err)
	_, err = other.Delete(ctx, k, nil)
	require.NoError(t, err)
	_, err = headOf(mine)
	require.ErrorIs(t, err, engine.ErrNotFound, "a session another engine deleted")

	_, err = save(mine, engine.SaveRequest{Key: k, SaveID: "5", Payload: conversation(2)})
	require.NoError(t, err)
	require.NoError(t, log.Purge(ctx, k))
	mine.Forget() // whoever purges forgets (the upgrade)
	_, err = headOf(mine)
	require.ErrorIs(t, err, engine.ErrNotFound, "a purged session")
}
