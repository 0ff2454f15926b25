// Package upgrade turns a format-2 store (the five KV buckets cp_heads, cp_versions, cp_layouts,
// cp_segments, cp_values; docs/format.md §2–§6) into the log engine's (stream CP_LOG, §8) in
// place, crash-safely: a kill at any point leaves the old format complete, and the new one either
// complete or redone by the next run (docs/format.md §8.17).
//
// It is the edge between the two formats, so it knows NATS: it reads format 2 through its own code
// (internal/snapshot over kvstore.Store), writes sessions through the engine (engine.CopyVersion
// and CopyState keep every record field), and keeps its progress in a marker on CP_LOG written
// with compare-and-swap. The daemon calls it at start-up, before it serves (docs/format.md §8.17):
//
//	need, err := upgrade.Needed(ctx, js)       // an error: do not serve (ErrIncomplete among others)
//	if need && noUpgrade { return upgrade.Refusal(dataDir) }
//	report, err := upgrade.Run(ctx, js, eng, log, upgrade.Options{...}) // every start: nil when nothing is to do
//
// Every older checkpointd on the store must be stopped first: format 2 has no way to fence one
// out, so Run can only notice what one writes (ErrChangedAfter), not prevent it.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Buckets are format 2's five KV buckets, in the order the upgrade deletes them once it is done:
// cp_heads first, so that a store whose deletion was cut short is never taken for a format-2
// store an older daemon wrote to after the upgrade (Run checks that case only while cp_heads is
// there).
var Buckets = []string{wire.BucketHeads, wire.BucketVersion, wire.BucketLayouts, wire.BucketSegment, wire.BucketValues}

// Options configure Run. The zero value of each field picks its default.
type Options struct {
	// Stream is the log engine's stream (logstore.LogConfig.Stream), where the marker goes;
	// default "CP_LOG". It must exist (the daemon opens its Log first).
	Stream string
	// Owner names this daemon in the marker for people (host name, server name). Which run is
	// whose is told by a random id per process, written beside it: a run finds its own process's
	// unfinished run (an earlier call of Run that returned) and takes it over at once.
	Owner string
	// Embedded says the store is on the daemon's embedded server, on a data directory it holds
	// locked: no other daemon can be running on it, so an unfinished run found is a dead one and
	// is taken over at once. Otherwise (--nats-url) another process's run is taken over only once
	// its marker has stayed still for StaleAfter.
	Embedded bool
	// StaleAfter is how long another process's run may go without writing its marker before this
	// run takes over (default 1 minute), measured on this host's clock: Run waits that long,
	// watching the marker, and returns ErrInProgress if it moves. A run writes its marker every
	// HeartbeatEvery (default 10 s); StaleAfter must be well above it.
	StaleAfter, HeartbeatEvery time.Duration
	// ChunkSize is format 2's --chunk-size, for kvstore.OpenStore (reads do not depend on it;
	// default 64 KiB). Keys are format 2's --namespace-keys: segments were sealed with them.
	ChunkSize int
	Keys      *sealing.Keys
	// LogSeals says the Log given to Run seals what it stores with the same namespace keys (the
	// daemon wraps it with internal/sealing's decorator when --namespace-keys is set). With Keys
	// and not LogSeals, Run refuses (ErrSealed): the copy would hold the sealed namespaces'
	// conversations in clear on CP_LOG, lowering what the operator chose.
	LogSeals bool
	// Logger reports progress (default: slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time

	// step, set by tests only, runs after every write of the upgrade (n counts them from 1; what
	// says what was written); an error stops the upgrade there, as a crash would.
	step func(n int, what string) error
	// process names this process in the marker (default processID); tests set it to play
	// another daemon.
	process string
}

func (o Options) withDefaults() Options {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = time.Minute
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = 10 * time.Second
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = 64 << 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.process == "" {
		o.process = processID
	}
	return o
}

// Report says what Run did.
type Report struct {
	// AlreadyDone: an earlier run had finished copying; this one only removed format 2's buckets.
	AlreadyDone bool
	Sessions    int // sessions copied by this run
	Skipped     int // sessions an earlier (killed) run had copied completely
	Redone      int // sessions an earlier run left half-copied: purged and copied again
	Purged      int // sessions on CP_LOG that format 2 does not have (deleted meanwhile): purged
	Versions    int // versions copied
	Leases      int // sessions whose lease was copied (with or without versions)
	Moved       int // sessions whose seal was copied
	// ConversationBytes is the size of every conversation copied (what format 2's reads returned).
	ConversationBytes int64
	// StoredBytes is what the engine stored for them (its records' StoredBytes, values included).
	StoredBytes    int64
	BucketsDeleted []string
	Took           time.Duration
}

// Errors Run returns; callers tell them apart with errors.Is.
var (
	// ErrInProgress: another daemon is upgrading the store (its marker moved while this run
	// watched it, or it took this run's over), or one that finished is deleting format 2's
	// buckets. Retry later (the daemon waits and calls Run again).
	ErrInProgress = errors.New("another daemon is upgrading this store")
	// ErrChangedAfter: format 2's sessions changed after they were copied (an older checkpointd
	// ran on the store meanwhile): a session saved, leased or deleted in format 2 is not what the
	// log engine holds. Nothing of format 2 is deleted.
	ErrChangedAfter = errors.New("format 2 changed after it was copied")
	// ErrIncomplete: the marker says an upgrade started and never finished, and format 2's
	// buckets are gone (deleted by hand): the log engine holds part of the sessions. Only the
	// operator can tell where the rest is (a backup of the buckets, a bundle).
	ErrIncomplete = errors.New("the upgrade from format 2 is incomplete and format 2 is gone")
	// ErrMarker: the marker on CP_LOG is not one this code wrote.
	ErrMarker = errors.New("unreadable upgrade marker")
	// ErrSealed: format 2 is read with namespace keys, and the Log given to Run does not seal
	// (Options.LogSeals): the copy would be in clear.
	ErrSealed = errors.New("format 2 is sealed with namespace keys, and the log given to the upgrade does not seal")
)

// DefaultStream is the log engine's stream, where Needed looks for the marker.
const DefaultStream = "CP_LOG"

// Needed reports whether js holds any of format 2's buckets: the daemon must upgrade (Run) or
// refuse (Refusal) before it serves. With none, it reads the marker on DefaultStream: an upgrade
// started and never done is ErrIncomplete (the daemon must not serve that store either).
func Needed(ctx context.Context, js jetstream.JetStream) (bool, error) {
	present, err := presentBuckets(ctx, js)
	if err != nil || len(present) > 0 {
		return len(present) > 0, err
	}
	return false, checkComplete(ctx, js, DefaultStream)
}

// checkComplete returns ErrIncomplete when stream holds a marker that is not "done" (format 2's
// buckets being gone); nil when it holds none, or no stream.
func checkComplete(ctx context.Context, js jetstream.JetStream, stream string) error {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("upgrade: the log's stream %s: %w", stream, err)
	}
	m, seq, err := readMarker(ctx, st)
	if err != nil || seq == 0 || m.State == stateDone {
		return err
	}
	return fmt.Errorf("%w: the marker %s (message %d) says run %q of %q started at %s and never finished, and none of format 2's buckets (%s) is left; "+
		"%s holds only the sessions that run copied, so checkpointd does not serve it. Restore the buckets from a backup and start again, "+
		"or import the sessions from bundles into an empty store",
		ErrIncomplete, MarkerSubject, seq, m.Run, m.Owner, m.Started.Format(time.RFC3339), strings.Join(Buckets, ", "), stream)
}

// presentBuckets returns which of format 2's buckets exist, in Buckets' order.
func presentBuckets(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var present []string
	for _, b := range Buckets {
		_, err := js.Stream(ctx, "KV_"+b)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return nil, fmt.Errorf("upgrade: looking for format 2's bucket %s: %w", b, err)
		default:
			present = append(present, b)
		}
	}
	return present, nil
}

// Run upgrades the format-2 store on js into eng (whose Log is log, on stream Options.Stream),
// and returns when the store is in the new format with format 2's buckets deleted. The daemon
// calls it at every start and must not serve before it returns nil: until then, the new format
// is incomplete. With no bucket it returns nil at once, unless the marker says an upgrade started
// and never finished (ErrIncomplete).
//
// Steps (docs/format.md §8.17): the marker "started" (compare-and-swap on an empty marker
// subject); every session of cp_heads copied, one after the other: a session the engine already
// holds exactly as format 2 does is skipped (copied by a run that was killed later), one it holds
// otherwise is purged and copied again; sessions on CP_LOG that format 2 does not have are
// purged; each session is read back once copied; format 2 compared with the engine again, both
// ways (an older daemon still running may have written it since: ErrChangedAfter); the marker
// "done" (compare-and-swap on this run's last marker); the same comparison right before cp_heads
// is deleted; then the buckets deleted, cp_heads first. A kill before "done" leaves format 2 whole
// (nothing of it is changed before) and the next run goes on; a kill after it leaves the new format
// whole and the next run deletes what is left of the buckets. CP_INGEST, CP_CHUNKS and CP_RESULTS
// are not touched: saves queued there are the new daemon's to settle.
func Run(ctx context.Context, js jetstream.JetStream, eng *engine.Engine, log engine.Log, opts Options) (Report, error) {
	opts = opts.withDefaults()
	u := &upgrader{js: js, eng: eng, log: log, opts: opts, started: opts.Now()}
	rep, err := u.run(ctx)
	rep.Took = opts.Now().Sub(u.started)
	return rep, err
}

type upgrader struct {
	js      jetstream.JetStream
	eng     *engine.Engine
	log     engine.Log
	opts    Options
	started time.Time
	rep     Report
	writes  int

	stream   jetstream.Stream
	runID    string    // this run's id, in the marker
	markSeq  uint64    // the sequence of this run's last marker
	lastBeat time.Time // when it was written
}

func (u *upgrader) run(ctx context.Context) (Report, error) {
	present, err := presentBuckets(ctx, u.js)
	if err != nil {
		return u.rep, err
	}
	if len(present) == 0 {
		return u.rep, checkComplete(ctx, u.js, u.opts.Stream)
	}
	if u.stream, err = u.js.Stream(ctx, u.opts.Stream); err != nil {
		return u.rep, fmt.Errorf("upgrade: the log's stream %s: %w", u.opts.Stream, err)
	}
	m, seq, err := readMarker(ctx, u.stream)
	if err != nil {
		return u.rep, err
	}
	if m.State != stateDone {
		if u.opts.Keys != nil && u.opts.Keys.Count() > 0 && !u.opts.LogSeals {
			return u.rep, fmt.Errorf("%w: upgrading would store the conversations of the namespaces it seals (%d keys) in clear on %s; nothing was changed. Upgrade with a checkpointd that seals the log engine's entries with --namespace-keys, or stay on the previous release",
				ErrSealed, u.opts.Keys.Count(), u.opts.Stream)
		}
		if !slices.Contains(present, wire.BucketHeads) {
			// Every session of format 2 is found through cp_heads, and an upgrade deletes it only
			// after "done": without it and without "done", this is not a store format 2 left.
			return u.rep, fmt.Errorf("upgrade: format 2's buckets %v are here without %s, and no upgrade finished (was it deleted by hand?); nothing was changed", present, wire.BucketHeads)
		}
		if err := u.claim(ctx, m, seq); err != nil {
			return u.rep, err
		}
		if err := u.copyAll(ctx); err != nil {
			return u.rep, err
		}
		// An older daemon still running may have written format 2 since its sessions were
		// copied: "done" only if format 2 is still exactly what the engine holds.
		if err := u.checkUnchanged(ctx, time.Time{}); err != nil {
			return u.rep, err
		}
		if err := u.writeMarker(ctx, stateDone); err != nil {
			return u.rep, err
		}
		m.At = u.lastBeat
		u.opts.Logger.Info("upgrade: format 2 copied into the log engine", "sessions", u.rep.Sessions+u.rep.Skipped,
			"versions", u.rep.Versions, "took", u.opts.Now().Sub(u.started).Round(time.Millisecond))
	} else {
		u.rep.AlreadyDone = true
	}
	if present, err = presentBuckets(ctx, u.js); err != nil { // opening format 2 creates a bucket an older release lacked
		return u.rep, err
	}
	if slices.Contains(present, wire.BucketHeads) {
		// Right before the deletion (this run's, or the rest of one killed after "done"), once
		// more: an older daemon may have written format 2 since, and the deletion would lose it.
		// Without cp_heads, a deletion was cut short (it goes first): the rest is deleted.
		if err := u.checkUnchanged(ctx, m.At); err != nil {
			return u.rep, err
		}
	}
	return u.rep, u.deleteBuckets(ctx, present)
}

// deleteBuckets deletes format 2's buckets that are still there, cp_heads first.
func (u *upgrader) deleteBuckets(ctx context.Context, present []string) error {
	for _, b := range present {
		err := u.js.DeleteKeyValue(ctx, b)
		if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("upgrade: deleting format 2's bucket %s (the upgrade is done; the next start deletes the rest): %w", b, err)
		}
		u.rep.BucketsDeleted = append(u.rep.BucketsDeleted, b)
		if err := u.wrote(ctx, "deleted bucket "+b); err != nil {
			return err
		}
	}
	return nil
}

// wrote counts a write and runs the test hook after it.
func (u *upgrader) wrote(ctx context.Context, what string) error {
	u.writes++
	if u.opts.step != nil {
		if err := u.opts.step(u.writes, what); err != nil {
			return err
		}
	}
	return ctx.Err()
}
