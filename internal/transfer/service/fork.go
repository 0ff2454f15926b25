package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// forkSubject is the fork endpoint's subject. A test moves it elsewhere to play a daemon from
// before the fork op (export_test.go).
var forkSubject = wire.APIOpSubjects(wire.OpFork)

// fork serves OpFork: the destination's version 1 becomes a version of the source, by reference
// (engine.Fork: a pin on the source and one fork entry of a few hundred bytes), not by copy. The
// conversation never crosses the wire. Both sessions are settled first (every save queued before
// the fork is in), and the destination's writes follow a save's rules: it must have no version
// (a conflict otherwise, as a save with Cp-Expected-Version 0), its lease and seal apply (leased,
// fenced, moved).
//
// The fork is not packed here, though the engine says its pack is due: packing would copy the
// source's version into the fork at once, and the fork would no longer share what it forked. The
// copy happens when it must: at the fork's own first pack (made due by its later saves), or when
// the source's deletion or retention would take the version away (the engine copies pinning forks
// in first). A source holds at most 64 such pins; beyond them a fork is a copy (docs/format.md
// §8.3.1).
func (s *Service) fork(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.ForkRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	if req.To.Namespace != "" && req.To.Namespace != ns {
		return reply{}, fmt.Errorf("%w: to.namespace %q: a fork stays in its namespace (%q); to copy across namespaces, restore and save",
			edge.ErrBadRequest, req.To.Namespace, ns)
	}
	from, err := s.settledKey(ctx, ns, req.SessionRequest)
	if err != nil {
		return reply{}, fmt.Errorf("source: %w", err)
	}
	to, err := s.settledKey(ctx, ns, wire.SessionRequest{Session: req.To.Session, Agent: req.To.Agent})
	if err != nil {
		return reply{}, fmt.Errorf("to: %w", err)
	}
	if from == to {
		return reply{}, fmt.Errorf("%w: to: %s is the source: a session cannot be forked into itself", edge.ErrBadRequest, to)
	}
	if rec, taken, err := s.taken(ctx, edge.KeyOf(to), req.SaveID); taken {
		if err != nil {
			return reply{}, err
		}
		return jsonReply(edge.VersionOf(rec)) // this very fork, asked again
	}
	saved, err := s.engine.Fork(ctx, engine.ForkRequest{From: edge.KeyOf(from), Version: req.Version, To: edge.KeyOf(to),
		SaveID: req.SaveID, Writer: req.Writer, Epoch: req.Epoch, Now: time.Now()})
	if err != nil {
		return reply{}, err
	}
	v := edge.VersionOf(saved.Record)
	s.log.Debug("fork", "from", from, "version", v.ForkOf, "to", to, "duplicate", saved.Duplicate)
	return jsonReply(v)
}

// taken refuses a fork into a session that has versions already without touching the source: the
// engine would pin the source, find the destination taken and unpin it, two entries on the source
// for each refused request. A retry of this very fork (its save id on version 1) is answered with
// its version. The engine checks again when it writes the fork (a save may come in between).
func (s *Service) taken(ctx context.Context, to engine.Key, saveID string) (engine.Record, bool, error) {
	head, err := s.engine.Head(ctx, to)
	if errors.Is(err, engine.ErrNotFound) {
		return engine.Record{}, false, nil
	}
	if err != nil {
		return engine.Record{}, true, err
	}
	if first, err := s.engine.Version(ctx, to, 1); err == nil && first.SaveID == saveID && first.Reason == engine.ReasonFork {
		return first, true, nil
	}
	return engine.Record{}, true, &engine.ConflictError{Key: to, Expected: 0, Head: head.Version}
}
