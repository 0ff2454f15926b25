package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Forks (docs/format.md §8.11).
//
// A fork's first entry (kindFork) says "version 1 is version v of session S": nothing of the
// conversation is copied, and a read of the fork reads S at v (checked against the fork's
// version 1 hash). S's packs never delete what the fork needs: they keep every version, and the
// fork reads S by version, not by sequence. What could take v away is S's retention or deletion,
// so S's head carries a pin {fork, v} (written before the fork entry): retention keeps pinned
// versions, and a deletion of S first copies each pinning fork in. The fork's first pack copies
// S's version into its own log (one frame, off the fork's latency: Fork returns PackDue) and then
// unpins it, so the dependency lasts until the caller's first Pack of the fork.
//
// Crash points: a pin without its fork entry (the fork failed or crashed) is stale; a fork packed
// but not unpinned leaves a stale pin. Stale pins are dropped when S's deletion or retention looks
// at them (the fork no longer starts with a fork entry of S at v). A session holds at most
// maxPins pins: a fork beyond that is a copy (one save of the whole conversation). A fork of a
// fork not packed yet packs it first, so a read goes through one source at most.
//
// The fork entry is always the first of its session's live entries (logOf, collect, packFork and
// forkReads rely on it): a fork is only written into a session without a version, and resolve
// leaves out the state entries (a deletion, a lease) that may come before it.

// ForkRequest starts session To at version Version of session From.
type ForkRequest struct {
	From    Key
	Version uint64 // 0: the head
	To      Key
	SaveID  string
	Writer  string
	Epoch   uint64 // the writer's lease epoch on To (0: none)
	Now     time.Time
}

// errNoPin: the source holds maxPins pins already.
var errNoPin = errors.New("no pin left")

// Fork makes version 1 of req.To version req.Version of req.From, recording where it came from
// (ForkOf, reason "fork"); To must not have a version yet (a conflict otherwise). It writes a pin
// on From and a fork entry on To (a few hundred bytes whatever the conversation's size); the
// caller then runs Pack on To (Saved.PackDue), which copies the conversation in.
func (e *Engine) Fork(ctx context.Context, req ForkRequest) (Saved, error) {
	if req.From == req.To {
		return Saved{}, fmt.Errorf("%w: a session cannot be forked into itself", ErrBadRequest)
	}
	// A fork of a fork not packed yet would read through two sessions, and so on: the source
	// copies its own source in first, so that a fork reads through one session at most.
	if err := e.packFork(ctx, req.From); err != nil {
		return Saved{}, err
	}
	last, err := e.last(ctx, req.From)
	if err != nil {
		return Saved{}, err
	}
	v, err := checkVersion(req.From, last.meta.Head, req.Version)
	if err != nil {
		return Saved{}, err
	}
	conv, rec, err := e.Read(ctx, req.From, v, ReadOptions{})
	if err != nil {
		return Saved{}, err
	}
	pin := forkPin{Fork: req.To, Version: v, At: e.cfg.Clock()}
	err = e.pin(ctx, req.From, pin)
	if errors.Is(err, errNoPin) {
		return e.forkCopy(ctx, req, conv, rec)
	}
	if err != nil {
		return Saved{}, err
	}
	// The pin names the version by number: make sure it pins the conversation read (the source
	// may have been deleted and saved again up to that number meanwhile).
	if now, err := e.Version(ctx, req.From, v); err != nil || now.Hash != rec.Hash {
		_ = e.unpin(ctx, req.From, pin) // best effort: a pin left is stale, and dropped later
		if err == nil || errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("%w: session %s: version %d changed during the fork (deleted and saved again); fork again", ErrBusy, req.From, v)
		}
		return Saved{}, err
	}
	state, err := extendHash(nil, conv[1:len(conv)-1])
	if err != nil {
		return Saved{}, err
	}
	// The pin protects a fork in flight for one grace (pinUse): the fork entry commits within it,
	// or not at all.
	saved, err := e.writeFork(ctx, req, rec, state, pin.At.Add(e.cfg.ValueGrace))
	if err != nil && !saved.Duplicate && (IsRefusal(err) || errors.Is(err, ErrBusy)) {
		// Refused: no fork entry was written. Any other failure may have stored it (an append
		// whose answer was lost): the pin stays, and is dropped as stale once it is 2 ×
		// ValueGrace old if the fork entry never came (pinUse).
		_ = e.unpin(ctx, req.From, pin) // best effort: a pin left is stale, and dropped later
	}
	return saved, err
}

// forkCopy is a fork stored as one save of the whole conversation.
func (e *Engine) forkCopy(ctx context.Context, req ForkRequest, conv []byte, rec Record) (Saved, error) {
	zero := uint64(0)
	return e.Save(ctx, SaveRequest{Key: req.To, SaveID: req.SaveID, Expected: &zero, Writer: req.Writer, Reason: ReasonFork,
		ForkOf: &ForkRef{Key: req.From, Version: rec.Version}, Epoch: req.Epoch, Payload: conv, Now: req.Now,
		Limits: dialectLimits(rec.Dialect)})
}

// writeFork appends the fork entry as To's first version.
// It is refused (ErrBusy) if it would commit after deadline: the source's pin no longer keeps a
// deletion of the source from taking it for a stale one.
func (e *Engine) writeFork(ctx context.Context, req ForkRequest, src Record, state []byte, deadline time.Time) (Saved, error) {
	for attempt := 0; attempt < maxSwapAttempts; attempt++ {
		s := e.session(req.To)
		saved, err := e.writeForkOnce(ctx, s, req, src, state, deadline)
		if e.again(ctx, s, err) {
			continue
		}
		return saved, err
	}
	return Saved{}, fmt.Errorf("%w: session %s: head kept moving after %d attempts", ErrBusy, req.To, maxSwapAttempts)
}

func (e *Engine) writeForkOnce(ctx context.Context, s *session, req ForkRequest, src Record, state []byte, deadline time.Time) (Saved, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := e.load(ctx, s); err != nil {
		return Saved{}, err
	}
	h := s.last.Head
	if req.SaveID != "" {
		if rec, ok, err := e.savedBefore(ctx, s, req.SaveID); err != nil || ok {
			return Saved{Record: rec, Duplicate: ok}, err
		}
	}
	if h.Version > 0 {
		return Saved{}, &ConflictError{Key: req.To, Expected: 0, Head: h.Version}
	}
	if err := checkWrite(h, req.To, req.Epoch, false, req.Now); err != nil {
		return Saved{}, err
	}
	next := h
	next.Version, next.Parent, next.RawBytes, next.State, next.Counts = 1, 0, src.RawBytes-2, state, src.Counts
	next.SaveID, next.Writer, next.Reason, next.Dialect = req.SaveID, req.Writer, ReasonFork, src.Dialect
	next.Created, next.StoredBytes, next.Origin = req.Now.UTC(), 0, nil
	next.ForkOf = &ForkRef{Key: req.From, Version: src.Version}
	next.FirstVersion, next.Moved = 0, nil
	next.Pack, next.Deleted = s.lastPack(), s.lastDeleted()
	next.TailEntries, next.TailBytes = h.TailEntries+1, h.TailBytes
	m := entryMeta{Kind: kindFork, Head: next, Source: &forkPin{Fork: req.From, Version: src.Version}}
	if _, err := e.writeBy(ctx, s, m, nil, deadline); err != nil {
		return Saved{}, err
	}
	s.dropEncoder() // the fork's first save starts a frame
	rec, err := recordOf(req.To, next)
	if err != nil {
		return Saved{}, err
	}
	s.recent.add(rec)
	return Saved{Record: rec, PackDue: !e.cfg.NoPack}, nil
}

// pin adds p to key's pins (once; a pin there already takes p's time).
func (e *Engine) pin(ctx context.Context, key Key, p forkPin) error {
	_, err := e.changeHead(ctx, key, func(h *headState) error {
		i := slices.IndexFunc(h.Pins, p.is)
		switch {
		case h.Version == 0 || p.Version < h.FirstVersion:
			return fmt.Errorf("session %s version %d: %w", key, p.Version, ErrNotFound)
		case i >= 0 && h.Pins[i].At.Equal(p.At):
			return errUnchanged
		case i >= 0:
			h.Pins = slices.Clone(h.Pins)
			h.Pins[i] = p
			return nil
		case len(h.Pins) >= maxPins:
			return errNoPin
		}
		h.Pins = append(slices.Clip(h.Pins), p)
		return nil
	})
	return err
}

// unpin removes p from key's pins.
func (e *Engine) unpin(ctx context.Context, key Key, p forkPin) error {
	_, err := e.changeHead(ctx, key, func(h *headState) error {
		i := slices.IndexFunc(h.Pins, p.is)
		if i < 0 {
			return errUnchanged
		}
		h.Pins = slices.Delete(slices.Clone(h.Pins), i, i+1)
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// releasePins makes key's pins of versions up to upTo (0: all) go: each fork still reading key is
// packed (which copies the version in and unpins it), a stale pin is removed.
func (e *Engine) releasePins(ctx context.Context, key Key, pins []forkPin, upTo uint64) error {
	for _, p := range pins {
		if upTo != 0 && p.Version > upTo {
			continue
		}
		for attempt := 0; ; attempt++ {
			use, err := e.pinUse(ctx, key, p)
			if err != nil {
				return err
			}
			if use == pinInFlight {
				return fmt.Errorf("%w: session %s: fork %s of its version %d is being written; try again", ErrBusy, key, p.Fork, p.Version)
			}
			if use == pinStale {
				break
			}
			if attempt == maxReadAttempts {
				return fmt.Errorf("%w: fork %s of %s kept moving while it was copied in", ErrBusy, p.Fork, key)
			}
			if _, err := e.Pack(ctx, p.Fork, true); err != nil {
				return fmt.Errorf("copying fork %s of %s in: %w", p.Fork, key, err)
			}
		}
		if err := e.unpin(ctx, key, p); err != nil {
			return err
		}
	}
	return nil
}

// packFork packs key if its log still starts with a fork entry (copying its source in).
func (e *Engine) packFork(ctx context.Context, key Key) error {
	last, err := e.last(ctx, key)
	if errors.Is(err, ErrNotFound) || err == nil && lastPackOf(last) != 0 {
		return nil
	}
	if err != nil {
		return err
	}
	entries, err := e.entriesFor(ctx, key, sinceOf(last), last.seq, false)
	if err != nil || len(entries) == 0 || entries[0].meta.Kind != kindFork {
		return err
	}
	_, err = e.Pack(ctx, key, true)
	return err
}

// pinUse is what a pin's fork does with the pinned version.
type pinUse int

const (
	pinStale    pinUse = iota // nothing: the fork holds its copy, is gone, or failed
	pinReads                  // the fork's log starts with its fork entry: it reads the version
	pinInFlight               // no fork entry yet, but the pin is recent: the Fork may still commit
)

// pinUse tells what pin p of session src is for. A Fork pins its source, then writes the fork
// entry within ValueGrace of the pin or not at all (writeFork): until then the fork has no
// version, like the fork of a crashed Fork, and only the pin's time tells them apart. Twice the
// grace, one for the Fork, one for clocks apart (the pin's time is another daemon's).
func (e *Engine) pinUse(ctx context.Context, src Key, p forkPin) (pinUse, error) {
	reads, versions, err := e.forkReads(ctx, p.Fork, src, p.Version)
	switch {
	case err != nil:
		return pinStale, err
	case reads:
		return pinReads, nil
	case !versions && e.cfg.Clock().Before(p.At.Add(2*e.cfg.ValueGrace)):
		return pinInFlight, nil
	}
	return pinStale, nil
}

// forkReads reports whether fork's log still starts with a fork entry of src at version v, and
// whether the fork has a version at all.
func (e *Engine) forkReads(ctx context.Context, fork, src Key, v uint64) (reads, versions bool, err error) {
	last, err := e.last(ctx, fork)
	if errors.Is(err, ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	versions = last.meta.Head.Version > 0
	entries, err := e.entriesFor(ctx, fork, max(lastPackOf(last), sinceOf(last)), last.seq, false)
	if err != nil {
		return false, versions, err
	}
	if lastPackOf(last) != 0 || len(entries) == 0 {
		return false, versions, nil // packed: the fork holds its copy
	}
	first := entries[0]
	return first.meta.Kind == kindFork && first.meta.Source.is(forkPin{Fork: src, Version: v}), versions, nil
}
