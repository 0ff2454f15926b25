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
// and the warning names them too. The namespaces remembered are bounded (maxWatchedNamespaces):
// past that the watch stops judging, rather than warn about namespaces it forgot.
type requestWatch struct {
	mu        sync.Mutex
	first     time.Time           // when the first save request was received; zero: none yet
	requested map[string]struct{} // namespaces that sent a save request
	warned    map[string]struct{} // namespaces warned about
	full      bool                // too many namespaces to remember: no more judging
}

// maxWatchedNamespaces bounds the namespaces requestWatch remembers (both sets together).
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
	if _, ok := w.requested[ns]; ok || w.full {
		return
	}
	if w.requested == nil {
		w.requested = map[string]struct{}{}
	}
	w.remember(w.requested, ns)
}

// ingested notes a save of namespace ns taken off the ingest stream, published at published (the
// stream's timestamp), and reports whether to warn about ns now (once per namespace).
func (w *requestWatch) ingested(ns string, published time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.full || w.first.IsZero() || !published.After(w.first.Add(clockMargin)) {
		return false
	}
	if _, ok := w.requested[ns]; ok {
		return false
	}
	if _, ok := w.warned[ns]; ok {
		return false
	}
	if w.warned == nil {
		w.warned = map[string]struct{}{}
	}
	w.remember(w.warned, ns)
	return !w.full
}

// remember adds ns to set, unless that makes too many namespaces: then the watch stops judging.
func (w *requestWatch) remember(set map[string]struct{}, ns string) {
	if len(w.requested)+len(w.warned) >= maxWatchedNamespaces {
		w.full = true
		return
	}
	set[ns] = struct{}{}
}
