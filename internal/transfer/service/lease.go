package service

import (
	"context"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// maxLeaseTTL bounds a lease's TTL: a lease is renewed while its owner lives, it is not a lock to
// hold for days.
const maxLeaseTTL = 24 * time.Hour

// lease serves OpLease. Acquiring first lets the saves already queued for the session settle, so a
// graceful handover (the old owner's last save acknowledged, then the new owner acquires) never
// fences off what the old owner wrote before it let go.
func (s *Service) lease(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.LeaseRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	key, err := sessionKey(ns, req.SessionRequest)
	if err != nil {
		return reply{}, err
	}
	ttl := time.Duration(req.TTLMillis) * time.Millisecond
	if (req.Op == wire.LeaseAcquire || req.Op == wire.LeaseRenew) && (ttl <= 0 || ttl > maxLeaseTTL) {
		return reply{}, fmt.Errorf("%w: ttlMillis %d: want a TTL above 0 and at most %s", edge.ErrBadRequest, req.TTLMillis, maxLeaseTTL)
	}
	lr := engine.LeaseRequest{Key: edge.KeyOf(key), Owner: req.Owner, TTL: ttl, Epoch: req.Epoch, Force: req.Force, Now: time.Now()}
	var ls engine.LeaseState
	switch req.Op {
	case wire.LeaseAcquire:
		if err := wire.ValidateID(req.Owner); err != nil {
			return reply{}, fmt.Errorf("%w: owner: %v", edge.ErrBadRequest, err)
		}
		if err := s.awaitIngest(ctx, wire.IngestSubject(key)); err != nil {
			return reply{}, err
		}
		var took engine.Takeover
		ls, took, err = s.engine.Acquire(ctx, lr)
		if err == nil && took.From != "" && took.From != req.Owner {
			kind := "expired"
			if took.Forced {
				kind = "forced"
			}
			s.m.LeaseTakeovers.WithLabelValues(kind).Inc()
			s.log.Info("lease taken over", "session", key, "from", took.From, "to", req.Owner, "kind", kind, "epoch", ls.Lease.Epoch)
		}
	case wire.LeaseRenew:
		ls, err = s.engine.Renew(ctx, lr)
	case wire.LeaseRelease:
		// The holder's saves queued before the release are its own: settle them under its epoch.
		if err := s.awaitIngest(ctx, wire.IngestSubject(key)); err != nil {
			return reply{}, err
		}
		ls, err = s.engine.Release(ctx, lr)
	case wire.LeaseStatus:
		ls, err = s.engine.LeaseStatus(ctx, edge.KeyOf(key))
	default:
		return reply{}, fmt.Errorf("%w: lease op %q (want acquire, renew, release or status)", edge.ErrBadRequest, req.Op)
	}
	if err != nil {
		return reply{}, err
	}
	l := edge.LeaseOf(key, ls)
	s.log.Debug("lease", "op", req.Op, "session", key, "epoch", l.Epoch, "owner", l.Owner)
	return jsonReply(l)
}

// seal serves OpSeal: the last step of a migration, after the destination has every version.
func (s *Service) seal(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.SealRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	if req.MovedTo == "" {
		return reply{}, fmt.Errorf("%w: seal needs movedTo, where the session went", edge.ErrBadRequest)
	}
	key, err := s.settledKey(ctx, ns, req.SessionRequest)
	if err != nil {
		return reply{}, err
	}
	rec, err := s.engine.Seal(ctx, edge.KeyOf(key), req.Expected, req.MovedTo, time.Now())
	if err != nil {
		return reply{}, err
	}
	v := edge.VersionOf(rec)
	s.log.Info("session sealed: moved", "session", key, "version", v.Version, "to", req.MovedTo)
	return jsonReply(v)
}

// remove serves OpDelete.
func (s *Service) remove(ctx context.Context, ns string, body []byte) (reply, error) {
	var req wire.DeleteRequest
	if err := decodeRequest(body, &req); err != nil {
		return reply{}, err
	}
	key, err := s.settledKey(ctx, ns, req.SessionRequest)
	if err != nil {
		return reply{}, err
	}
	rec, err := s.engine.Delete(ctx, edge.KeyOf(key), req.Expected)
	if err != nil {
		return reply{}, err
	}
	v := edge.VersionOf(rec)
	s.cache.DropHeld(readSession(ns, req.Session)) // a read under way must not go on serving it
	s.log.Info("session deleted", "session", key, "head", v.Version)
	return jsonReply(v)
}
