package ingest

import (
	"sync"
	"time"
)

// requestWatch notices a namespace whose saves come off the ingest stream while save requests
// work for others, and says so once (Ingester.handle logs it). A current SDK sends a save as a
// request first and falls back to the ingest stream only on "no responders" (docs/protocol.md
// §4.0). With per-namespace accounts, a tenant account configured from a --print-nats-config of
// checkpointd before 0.4 lacks the cp.save import: every save of that namespace silently takes the
// slower path, and nothing else tells the operator. The daemon cannot see another account's
// imports (only the server's system account can), so it judges by what reaches it:
//
//   - a save request has been received (from any namespace), so the daemon answers requests;
//   - the save off the stream was published after that (by the stream's clock; a second of margin
//     for the clocks of the server and the daemon apart), so its writer did not fall back because
//     no daemon answered then;
//   - its namespace never sent this daemon a request.
//
// Saves queued while no daemon ran, and saves sent to a daemon that has not answered a request yet,
// are never counted. Writers of an SDK before 0.4, or the Go SDK's WithIngestSaves, look the same,
// and the warning names them too.
//
// The namespaces remembered are bounded (maxWatchedNamespaces each for those that sent a request
// and those warned about): past that the oldest is forgotten, and judging goes on. A client that
// reaches many namespaces (a single-account deployment, or an admin) could fill a set that stopped
// judging when full, with a request to each, and so silence the warning for everyone else. Now a
// flood of requests only makes the watch forget older requesters, which at worst warns about one of
// them should it save off the stream later; a flood of saves off the stream gets its own
// namespaces warned about, and warnings forgotten may come again.
type requestWatch struct {
	mu        sync.Mutex
	first     time.Time // when the first save request was received; zero: none yet
	requested recentSet // namespaces that sent a save request
	warned    recentSet // namespaces warned about
}

// maxWatchedNamespaces bounds each set of namespaces requestWatch remembers.
const maxWatchedNamespaces = 4096

// clockMargin allows for the clocks of the NATS server (a message's stream timestamp) and of the
// daemon being apart.
const clockMargin = time.Second

// request notes a save request of namespace ns, received at now.
func (w *requestWatch) request(ns string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		w.first = now
	}
	w.requested.add(ns)
}

// ingested notes a save of namespace ns taken off the ingest stream, published at published (the
// stream's timestamp), and reports whether to warn about ns now (once per namespace remembered).
func (w *requestWatch) ingested(ns string, published time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() || !published.After(w.first.Add(clockMargin)) || w.requested.has(ns) || w.warned.has(ns) {
		return false
	}
	w.warned.add(ns)
	return true
}

// recentSet is a set of at most maxWatchedNamespaces strings: adding one more forgets the one
// added longest ago.
type recentSet struct {
	in    map[string]struct{}
	order []string // the members in the order added, a ring once full
	next  int      // where the next member goes once full: the oldest
}

func (s *recentSet) has(ns string) bool {
	_, ok := s.in[ns]
	return ok
}

func (s *recentSet) add(ns string) {
	if s.has(ns) {
		return
	}
	if s.in == nil {
		s.in = map[string]struct{}{}
	}
	if len(s.order) < maxWatchedNamespaces {
		s.order = append(s.order, ns)
	} else {
		delete(s.in, s.order[s.next])
		s.order[s.next] = ns
		s.next = (s.next + 1) % maxWatchedNamespaces
	}
	s.in[ns] = struct{}{}
}
