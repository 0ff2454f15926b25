package checkpoint

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// DefaultLeaseTTL is how long a lease holds without renewal unless WithTTL says otherwise. A held
// Lease renews itself every third of it.
const DefaultLeaseTTL = 30 * time.Second

// LeaseOption configures Acquire and Resume.
type LeaseOption func(*leaseOptions)

type leaseOptions struct {
	ttl     time.Duration
	owner   string
	force   bool
	noRenew bool
}

// WithTTL sets how long the lease holds without renewal (default DefaultLeaseTTL).
func WithTTL(d time.Duration) LeaseOption { return func(o *leaseOptions) { o.ttl = d } }

// WithOwner names the owner (default: the client's writer name, "host/pid").
func WithOwner(name string) LeaseOption { return func(o *leaseOptions) { o.owner = name } }

// WithForce takes the lease even from an owner whose lease has not expired: its later writes are
// fenced off. For an operator moving a session away from a hung process.
func WithForce() LeaseOption { return func(o *leaseOptions) { o.force = true } }

// WithoutRenewal leaves renewing to the caller (Lease.Renew); the lease expires after its TTL.
func WithoutRenewal() LeaseOption { return func(o *leaseOptions) { o.noRenew = true } }

// Lease is this process's hold on one session: while it holds, saves made through it carry its
// epoch, and nobody else can save. It renews itself in the background; if a renewal finds the
// lease taken over, Lost is closed and every later save through it fails with ErrFenced.
type Lease struct {
	c   *Client
	key Key
	ttl time.Duration

	mu   sync.Mutex
	info LeaseInfo
	err  error // why the lease was lost

	stop, lost chan struct{}
	stopOnce   sync.Once
	lostOnce   sync.Once
	renewing   sync.WaitGroup
}

// Acquire takes the lease of key's session under a new epoch. It is refused with ErrLeased while
// another owner holds an unexpired lease (unless WithForce). Saves queued before it are settled
// first, so a handover never fences off what the previous owner wrote before letting go.
func (c *Client) Acquire(ctx context.Context, key Key, opts ...LeaseOption) (*Lease, error) {
	key, err := checkKey(key)
	if err != nil {
		return nil, err
	}
	o := leaseOptions{ttl: DefaultLeaseTTL, owner: c.writer}
	for _, opt := range opts {
		opt(&o)
	}
	var info LeaseInfo
	req := wire.LeaseRequest{SessionRequest: sessionRequest(key), Op: wire.LeaseAcquire, Owner: o.owner,
		TTLMillis: o.ttl.Milliseconds(), Force: o.force}
	if err := c.call(ctx, wire.APISubject(key.Namespace, wire.OpLease), req, &info); err != nil {
		return nil, err
	}
	l := newLease(c, key, o.ttl, info)
	if !o.noRenew {
		l.renewing.Add(1)
		go l.keepAlive()
	}
	return l, nil
}

// LeaseStatus reports key's lease without changing it (Epoch 0: never leased).
func (c *Client) LeaseStatus(ctx context.Context, key Key) (LeaseInfo, error) {
	key, err := checkKey(key)
	if err != nil {
		return LeaseInfo{}, err
	}
	var info LeaseInfo
	req := wire.LeaseRequest{SessionRequest: sessionRequest(key), Op: wire.LeaseStatus}
	return info, c.call(ctx, wire.APISubject(key.Namespace, wire.OpLease), req, &info)
}

// Resume acquires key's session and restores its head: the other half of Pause, in one call.
// A session with no version yet is not an error: conversation is "[]" and the Version zero.
func (c *Client) Resume(ctx context.Context, key Key, opts ...LeaseOption) ([]byte, Version, *Lease, error) {
	l, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return nil, Version{}, nil, err
	}
	if l.Info().Head == 0 {
		return []byte("[]"), Version{}, l, nil
	}
	conv, v, err := c.Restore(ctx, key, 0)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, Version{}, nil, err
	}
	c.remember(key.WithDefaults(), v, conv, nil)
	return conv, v, l, nil
}

// Key is the session the lease is on.
func (l *Lease) Key() Key { return l.key }

// Epoch is the lease's fencing epoch.
func (l *Lease) Epoch() uint64 { return l.Info().Epoch }

// Info is the lease as last acquired or renewed.
func (l *Lease) Info() LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Lost is closed when the lease was found taken over or released; Err then says why.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lease holds, and the refusal that ended it after.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Save saves conversation as the next version, fenced by the lease's epoch (see Client.Save).
func (l *Lease) Save(ctx context.Context, conversation []byte, opts ...SaveOption) (Version, error) {
	v, err := l.c.Save(ctx, l.key, conversation, append(opts, WithEpoch(l.Epoch()))...)
	l.observe(err)
	return v, err
}

// Append saves the messages appended to version base, fenced by the lease's epoch (see
// Client.Append).
func (l *Lease) Append(ctx context.Context, base uint64, messages []byte, opts ...SaveOption) (Version, error) {
	v, err := l.c.Append(ctx, l.key, base, messages, append(opts, WithEpoch(l.Epoch()))...)
	l.observe(err)
	return v, err
}

// Pause writes the final checkpoint (reason "pause") and releases the session, so that another
// process can Resume it. If the save fails the lease is kept: nothing was handed over.
func (l *Lease) Pause(ctx context.Context, conversation []byte, opts ...SaveOption) (Version, error) {
	v, err := l.Save(ctx, conversation, append(opts, WithReason(wire.ReasonPause))...)
	if err != nil {
		return Version{}, err
	}
	return v, l.Release(ctx)
}

// Renew extends the lease by its TTL from now.
func (l *Lease) Renew(ctx context.Context) error {
	var info LeaseInfo
	req := wire.LeaseRequest{SessionRequest: sessionRequest(l.key), Op: wire.LeaseRenew, Epoch: l.Epoch(), TTLMillis: l.ttl.Milliseconds()}
	err := l.c.call(ctx, wire.APISubject(l.key.Namespace, wire.OpLease), req, &info)
	if err == nil {
		l.mu.Lock()
		l.info = info
		l.mu.Unlock()
	}
	l.observe(err)
	return err
}

// Release gives the session up and stops renewing; the lease's epoch can save no more.
// If the release fails the lease is kept, and renewed as before.
func (l *Lease) Release(ctx context.Context) error {
	var info LeaseInfo
	req := wire.LeaseRequest{SessionRequest: sessionRequest(l.key), Op: wire.LeaseRelease, Epoch: l.Epoch()}
	err := l.c.call(ctx, wire.APISubject(l.key.Namespace, wire.OpLease), req, &info)
	if err == nil {
		l.stopRenewing()
		l.mu.Lock()
		l.info = info
		l.mu.Unlock()
		l.markLost(errReleased)
	}
	l.observe(err)
	return err
}

var errReleased = errors.New("lease released")

// stopRenewing ends the background renewal and waits for it.
func (l *Lease) stopRenewing() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.renewing.Wait()
}

// keepAlive renews every third of the TTL until stopped or fenced. Transient failures are retried
// at the next tick; the TTL leaves room for two of them.
func (l *Lease) keepAlive() {
	defer l.renewing.Done()
	t := time.NewTicker(max(l.ttl/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), max(l.ttl/3, time.Second))
			_ = l.Renew(ctx)
			cancel()
		}
	}
}

// observe marks the lease lost when the daemon says its epoch is not current any more.
func (l *Lease) observe(err error) {
	if errors.Is(err, ErrFenced) || errors.Is(err, ErrMoved) {
		l.markLost(err)
	}
}

func (l *Lease) markLost(err error) {
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.lost)
	})
}

// Held returns a handle on a lease of key acquired elsewhere (another process, the CLI), by its
// epoch: to save under it, renew it for ttl, or release it. It does not renew by itself.
func (c *Client) Held(key Key, epoch uint64, ttl time.Duration) *Lease {
	k := key.WithDefaults()
	return newLease(c, k, ttl, LeaseInfo{Key: k, Epoch: epoch})
}

func newLease(c *Client, key Key, ttl time.Duration, info LeaseInfo) *Lease {
	return &Lease{c: c, key: key, ttl: ttl, info: info, stop: make(chan struct{}), lost: make(chan struct{})}
}
