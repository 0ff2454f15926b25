package engine

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/pieces"
)

// Config tunes an Engine. The zero value of each field picks its default.
type Config struct {
	// Window is the zstd window of a session's stream (default 1 MiB): more compresses better and
	// costs that much memory per cached session, and per read.
	Window int
	// PackBytes and PackEntries: the entries since the last pack are packed into one once their
	// data reaches PackBytes or they are PackEntries (docs/format.md §8.7). NoPack: never.
	//
	// Default 256 KiB / 256 entries, recompressed (not PackOpen): of the policies measured on the
	// corpus (§8.15), it is the only one with packs that meets both the disk target (du 2.29×
	// zstd(final) = 717 kB ≤ 1.5× + 256 KiB = 732 kB) and the bytes-written one (2.17× ≤ 3×).
	// Smaller packs restore faster (64 KiB: 1.63× a raw get against 2.22×) but write 2.7–3.2× and
	// leave 2.8–3.3× on disk; no packs at all restores 3.9×. FastSaves (below) adds ~8% to the
	// unpacked tail, which brings written bytes near the disk bound: the lead's benchmark decides.
	PackBytes   int64
	PackEntries int
	NoPack      bool
	// PackOpen keeps the packed saves' stored bytes as they are instead of compressing them
	// again as one frame (§8.7): fewer bytes written, reads ~10% slower. Whatever this says, a
	// tail written in groups (SaveGroup: 3/4 of its versions) is packed open (§8.15s).
	PackOpen bool
	// FastSaves compresses saves at zstd's fastest level instead of the default one (§8.19 item 3:
	// ~0.1–0.2× of a raw publish less per save, a stream 8% larger until packed); packs always
	// compress at SpeedBetterCompression (stream.go). Off by default: through the daemon, the
	// corpus saved turn by turn left 718 KB on disk (du -sb) at the default level and 747 KB with
	// FastSaves, the saves' latency differing by less than the noise (checkpointbench,
	// BENCHMARKS.md); since s18-disk 682 KB, and 745.5 KB counting whole blocks (du -s), over
	// issue 12's 732 KB (docs/format.md §8.15d). A frame a group entry starts (SaveGroup) is at
	// the fastest level whatever this says (§8.15p).
	FastSaves bool
	// Sessions is how many sessions the engine caches, each with its last entry and its zstd
	// encoder (~2–4 MiB with a 1 MiB window); default 64. The least recently used goes first; its
	// next save reads the head again and starts a new frame (a few hundred bytes worse).
	Sessions int
	// ValueGrace bounds the time between a save's check that its values are stored and its
	// commit (a save that takes longer is refused: ErrBusy), and is how long a swept value waits
	// in the trash before it goes (values.go); default 1 minute.
	ValueGrace time.Duration
	// Clock is the time (default time.Now); tests move it.
	Clock func() time.Time
}

// Window bounds: zstd's smallest window, and the largest every read decodes (stream.go).
const (
	minWindow = 1 << 10
	maxWindow = 8 << 20
)

// Validate reports what is wrong with c (ErrConfig), or nil; zero fields take their defaults.
// The daemon checks its Config with it before New: an Engine made with an invalid Config refuses
// every write with this error (saves a read could not decode, or a raw zstd error per save, are
// worse).
func (c Config) Validate() error {
	switch {
	case c.Window != 0 && (c.Window < minWindow || c.Window > maxWindow || c.Window&(c.Window-1) != 0):
		return fmt.Errorf("%w: Window %d: a power of two from %d to %d (what every read decodes)", ErrConfig, c.Window, minWindow, maxWindow)
	case c.PackBytes < 0 || c.PackEntries < 0:
		return fmt.Errorf("%w: PackBytes %d, PackEntries %d: not negative", ErrConfig, c.PackBytes, c.PackEntries)
	case c.Sessions < 0:
		return fmt.Errorf("%w: Sessions %d: not negative", ErrConfig, c.Sessions)
	case c.ValueGrace < 0:
		return fmt.Errorf("%w: ValueGrace %s: not negative", ErrConfig, c.ValueGrace)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = 1 << 20
	}
	if c.PackBytes == 0 {
		c.PackBytes = 256 << 10
	}
	if c.PackEntries == 0 {
		c.PackEntries = 256
	}
	if c.Sessions == 0 {
		c.Sessions = 64
	}
	if c.ValueGrace == 0 {
		c.ValueGrace = time.Minute
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// Engine is the checkpoint domain over a Log: sessions, their versions, leases, packs. It is
// safe for concurrent use, and several Engines (daemons) may share one Log: every write is a
// compare-and-swap on the session's last entry, so a stale cache costs a retry, never a wrong
// version.
type Engine struct {
	log Log
	cfg Config

	mu       sync.Mutex
	sessions map[Key]*list.Element // of *session, most recently used at the front
	lru      *list.List
	values   knownValues

	// crashBeforeDeletes makes packs stop after their commit, as a crash would (tests).
	crashBeforeDeletes bool
	// maxRun is maxRun (save.go); tests lower it.
	maxRun int64
	// invalid is what Config.Validate said of the Config New was given: every write fails with it.
	invalid error
}

// New returns an Engine storing sessions in log. cfg should pass Validate: an Engine made with
// one that does not refuses every write with Validate's error (ErrConfig).
func New(log Log, cfg Config) *Engine {
	invalid := cfg.Validate()
	cfg = cfg.withDefaults()
	// A pack's records must fit in one entry (its data may take parts): packing by the bytes of
	// whole entries, at most half an entry's worth, keeps them there.
	cfg.PackBytes = min(cfg.PackBytes, int64(log.MaxEntry()/2))
	return &Engine{log: log, cfg: cfg, sessions: map[Key]*list.Element{}, lru: list.New(), invalid: invalid, maxRun: maxRun}
}

// session is what the engine caches of one session: its last entry and its compressor. It is
// loaded from the log's last entry when first used; a lost compare-and-swap means it was stale,
// and it is dropped.
type session struct {
	mu      sync.Mutex
	key     Key
	loaded  bool
	lastSeq uint64    // 0: the log is empty
	last    entryMeta // the last entry's meta (zero if none)
	enc     *encoder
	encRaw  int64 // bytes compressed by enc since its frame began (maxRun)
	// runRaw is what a reader decodes at once up to enc's last piece once the tail is packed open
	// (an open pack that continues a frame joins the run before it: logBuilder.addPack): the bytes
	// enc compressed since its frame began when that frame began a tail (no entry since a pack), -1
	// when it began inside one, after pieces not known here that a reader may join to it. It bounds
	// the frames that continue across an open pack (compress).
	runRaw int64
	// recent holds the records of the last pack's versions and of the saves after it (recent.go).
	recent recentRecords
	// creation is the creation of the log under way while a save that creates it is made
	// (saveOnce): the log's first Append goes through it.
	creation Creation
}

// session returns key's cached session (not necessarily loaded), making it the most recent.
func (e *Engine) session(key Key) *session {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.sessions[key]; ok {
		e.lru.MoveToFront(el)
		return el.Value.(*session)
	}
	s := &session{key: key}
	e.sessions[key] = e.lru.PushFront(s)
	for e.lru.Len() > e.cfg.Sessions {
		old := e.lru.Back()
		e.lru.Remove(old)
		delete(e.sessions, old.Value.(*session).key)
		old.Value.(*session).release()
	}
	return s
}

// forget drops a session from the cache: its next use reads the log again.
func (e *Engine) forget(s *session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.sessions[s.key]; ok && el.Value == s {
		e.lru.Remove(el)
		delete(e.sessions, s.key)
	}
	s.release()
}

// release gives the encoder of a session leaving the cache back for other sessions' frames, unless
// the session is in use (whoever holds it may still save with it: its encoder stays). A goroutine
// that took the session before it left may still use it afterwards: it finds no encoder and
// starts a new frame, as after a pack.
func (s *session) release() {
	if s.mu.TryLock() {
		s.dropEncoder()
		s.mu.Unlock()
	}
}

// dropEncoder ends the session's frame (s.mu held): its next save starts a new one, with an
// encoder from the pool, to which this one goes back.
func (s *session) dropEncoder() {
	s.enc.recycle()
	s.enc = nil
}

// Forget drops every cached session, as a restart would. Whoever purges a log (Log.Purge) calls
// it: a read of the head trusts a cached session unless the log has an entry after it (Log.Moved),
// which a purge does not write (readzstd.go, cachedHead).
func (e *Engine) Forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sessions, e.lru = map[Key]*list.Element{}, list.New()
}

// load reads the session's last entry if it is not loaded (s.mu held).
func (e *Engine) load(ctx context.Context, s *session) error {
	if s.loaded {
		return nil
	}
	last, err := e.log.Last(ctx, s.key)
	switch {
	case errors.Is(err, ErrNotFound):
		s.lastSeq, s.last = 0, entryMeta{Head: emptyHead()}
	case err != nil:
		return err
	default:
		m, _, err := decodeEntry(last.Data)
		if err != nil {
			return fmt.Errorf("session %s entry %d: %w", s.key, last.Seq, err)
		}
		s.lastSeq, s.last = last.Seq, m
	}
	s.dropEncoder()
	s.loaded = true
	s.recent.reset(false)
	return nil
}

// assumeEmpty loads the session as an empty log without reading it (s.mu held, not loaded): a
// save that creates the session checks it with its compare-and-swap on an empty log (saveOnce).
func (s *session) assumeEmpty() {
	s.dropEncoder()
	s.lastSeq, s.last = 0, entryMeta{Head: emptyHead()}
	s.loaded = true
	s.recent.reset(true)
}

// endCreation abandons the creation of the log a save began (s.mu held) if the save did not append
// (err is the save's outcome, returned as it is unless the abandon fails on a save that was not
// refused: a refusal is the answer about the request, whatever the store then says).
func (s *session) endCreation(ctx context.Context, err error) error {
	c := s.creation
	if c == nil {
		return err
	}
	s.creation = nil
	if aerr := c.Abandon(ctx); aerr != nil && err != nil && !IsRefusal(err) {
		return errors.Join(err, aerr)
	}
	return err
}

// unload forgets what assumeEmpty assumed (s.mu held): the next use reads the log.
func (s *session) unload() {
	s.dropEncoder()
	s.lastSeq, s.last = 0, entryMeta{}
	s.loaded = false
	s.recent.reset(false)
}

// again decides what an attempt's error means for the next: true to try again, after dropping the
// session, when the log moved on under the attempt (a lost compare-and-swap, a short read) or when
// the attempt refused, or found nothing to do, from a cached head the log has moved past (another
// daemon wrote since: its lease, its version must be seen). Any other failure drops the session
// too (an append whose answer was lost may have been stored).
func (e *Engine) again(ctx context.Context, s *session, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrConflict) || errors.Is(err, errShort):
		e.forget(s)
		return true
	case errors.Is(err, errNoRoom): // the caller's budget refused a read: nothing about the session
		return false
	case IsRefusal(err) || errors.Is(err, ErrNotFound) || errors.Is(err, errUnchanged) || errors.Is(err, ErrBusy):
		if e.stale(ctx, s) {
			e.forget(s)
			return true
		}
		return false
	}
	e.forget(s)
	return false
}

// stale reports whether the log moved past the session's cached last entry.
func (e *Engine) stale(ctx context.Context, s *session) bool {
	s.mu.Lock()
	seq, loaded := s.lastSeq, s.loaded
	s.mu.Unlock()
	if !loaded {
		return true
	}
	last, err := e.log.Last(ctx, s.key)
	if errors.Is(err, ErrNotFound) {
		return seq != 0
	}
	return err != nil || last.Seq != seq
}

// checkCached returns ErrConflict if the log moved past the session's cached last entry (s.mu
// held): a write would lose its compare-and-swap, an answer from the cache would be stale.
func (e *Engine) checkCached(ctx context.Context, s *session) error {
	last, err := e.log.Last(ctx, s.key)
	switch {
	case errors.Is(err, ErrNotFound) && s.lastSeq == 0:
		return nil
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("session %s: %w: its log is empty", s.key, ErrConflict)
	case err != nil:
		return err
	case last.Seq != s.lastSeq:
		return fmt.Errorf("session %s: %w: cached entry %d, the log's last is %d", s.key, ErrConflict, s.lastSeq, last.Seq)
	}
	return nil
}

// lastPack is the sequence of the session's last pack (0: none).
func (s *session) lastPack() uint64 {
	if s.last.Kind == kindPack {
		return s.lastSeq
	}
	return s.last.Head.Pack
}

// lastDeleted is the sequence of the session's last deletion (0: none).
func (s *session) lastDeleted() uint64 {
	if s.last.Deletion {
		return s.lastSeq
	}
	return s.last.Head.Deleted
}

// emptyHead is the head of a session with no entry: the empty conversation "[]".
func emptyHead() headState {
	state, _ := extendHash(nil, nil)
	return headState{State: state}
}

// write appends an entry (as parts first if it is larger than the log takes) after the
// session's last entry, and makes it the session's last. Any error leaves the session to be
// dropped by the caller: the log may hold parts of it, which readers skip.
func (e *Engine) write(ctx context.Context, s *session, m entryMeta, data []byte) (uint64, error) {
	return e.writeBy(ctx, s, m, data, time.Time{})
}

// writeBy is write, refused (ErrBusy, nothing more written) if the commit would come after
// deadline (zero: none): a save's values are safe from the sweep until then.
func (e *Engine) writeBy(ctx context.Context, s *session, m entryMeta, data []byte, deadline time.Time) (uint64, error) {
	if e.invalid != nil {
		return 0, e.invalid
	}
	m = s.withBack(m)
	body, err := encodeEntry(m, data)
	if err != nil {
		return 0, err
	}
	after := s.lastSeq
	if max := e.log.MaxEntry(); len(body) > max {
		var rest []byte
		if after, rest, err = e.writeParts(ctx, s, &m, data, len(body)-len(data)); err != nil {
			return 0, err
		}
		if body, err = encodeEntry(m, rest); err != nil {
			return 0, err
		}
	}
	if !deadline.IsZero() && e.cfg.Clock().After(deadline) {
		return 0, fmt.Errorf("%w: session %s: the write took longer than its grace (%s: for its values, or its fork's pin); send it again", ErrBusy, s.key, e.cfg.ValueGrace)
	}
	seq, err := e.append(ctx, s, body, after)
	if err != nil {
		return 0, err
	}
	s.lastSeq, s.last = seq, m
	return seq, nil
}

// append appends body to s's log after sequence after: through the creation under way when it is
// the log's first entry (after 0) and there is one (saveOnce), which it ends.
func (e *Engine) append(ctx context.Context, s *session, body []byte, after uint64) (uint64, error) {
	if c := s.creation; c != nil && after == 0 {
		s.creation = nil
		return c.Append(ctx, body)
	}
	return e.log.Append(ctx, s.key, body, after)
}

// encodedSize is the size of the entry of m and data written after the session's last entry (its
// tail bytes not counted yet: a varint more or less at most).
func (s *session) encodedSize(m entryMeta, data []byte) (int64, error) {
	b, err := encodeEntry(s.withBack(m), nil)
	return int64(len(b) + len(data)), err
}

// withBack returns m with the back pointer of an entry appended after the session's last entry
// (docs/format.md §8.3.1): every entry names where the walk back to the version before its head
// version goes on, so that the newest records are found without reading the whole tail (back.go).
// None on packs, whose walk back follows Head.Pack, and none when the last entry has none (written
// before back pointers: readers then read the tail as before, until the next pack).
func (s *session) withBack(m entryMeta) entryMeta {
	v, lv := m.Head.Version, s.last.Head.Version
	first := v - uint64(len(m.Group)) // the entry's first version (a group's: group.go)
	m.Back, m.HasBack = 0, true
	switch {
	case m.Kind == kindPack:
		m.HasBack = false
	case v == 0 || m.Deletion || lv == 0:
		// no version before this entry's head version in the log (an empty or deleted session,
		// a first save, a fork's entry, an import starting at its version)
	case first == lv+1:
		m.Back = s.lastSeq // every entry holds its head version's record
	case v == lv && (s.last.Kind == kindPack || len(s.last.Group) > 0):
		// The pack holds the version before (or names the pack that does); a group entry holds
		// it among its versions (its own pointer skips them).
		m.Back = s.lastSeq
	case v == lv:
		m.Back, m.HasBack = s.last.Back, s.last.HasBack // same head: same way back
	default:
		m.HasBack = false // (no entry skips versions; if one did, its readers read the tail)
	}
	if m.HasBack && m.Back != 0 && m.Back < m.Head.Pack {
		m.Back, m.HasBack = 0, false // never: the pointer is the last pack or after it
	}
	return m
}

// writeParts writes the first bytes of data as part entries, so that what is left fits in the
// entry of meta m (whose encoding without data is metaLen bytes); it sets m.Parts and returns
// the last part's sequence and the rest of the data. The parts are the pieces of
// internal/pieces, numbered by their place in the log (docs/format.md §8): each as large as an
// entry takes beside a part's meta, the entry itself holding the last bytes.
func (e *Engine) writeParts(ctx context.Context, s *session, m *entryMeta, data []byte, metaLen int) (uint64, []byte, error) {
	max := int64(e.log.MaxEntry())
	part := entryMeta{Kind: kindPart, Head: s.last.Head}
	part.Head.Pack, part.Head.Deleted = s.lastPack(), s.lastDeleted()
	hdr, err := encodeEntry(s.withBack(part), nil)
	if err != nil {
		return 0, nil, err
	}
	room, last := pieces.Size(max, int64(len(hdr))), pieces.Size(max, int64(metaLen+binaryMaxVarint))
	if room < minPart || last < minPart {
		return 0, nil, fmt.Errorf("session %s: an entry's meta of %d bytes leaves no room in entries of %d: %w", s.key, metaLen, max, ErrTooLarge)
	}
	split := int64(len(data)) - last // the parts hold data[:split], the entry itself the rest
	parts, err := pieces.Split(data[:split], room)
	if err != nil {
		return 0, nil, err
	}
	after := s.lastSeq
	for _, p := range parts {
		seq, err := e.append(ctx, s, append(hdr[:len(hdr):len(hdr)], p...), after)
		if err != nil {
			return 0, nil, err
		}
		after = seq
		m.Parts++
	}
	return after, data[split:], nil
}

const (
	binaryMaxVarint = 10
	minPart         = 512
)
