package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// listFactor: a listing of many sessions, or the history of a long session, may cost at most this
// many times the small one (issue 12).
const listFactor = 2.0

// runScale: list and history requests against a namespace of many sessions and a session of many
// versions, interleaved with the same requests against a small namespace and a short session.
func runScale(ctx context.Context, b *bench) error {
	d, err := b.startDaemon(ctx, "scale")
	if err != nil {
		return err
	}
	sc := b.o.scale
	clients := make([]*conn, 4)
	for i := range clients {
		if clients[i], err = b.connect(d); err != nil {
			return err
		}
	}
	var setup []string // how long creating each took: a figure of its own
	for _, ns := range []struct {
		name string
		n    int
	}{{"small", sc.SmallSessions}, {"large", sc.Sessions}} {
		b.logf("scale: creating %d sessions in namespace %s", ns.n, ns.name)
		began := time.Now()
		if err := createSessions(ctx, clients, ns.name, ns.n); err != nil {
			return err
		}
		setup = append(setup, rate(ns.n, "sessions", time.Since(began)))
	}
	for _, s := range []struct {
		name string
		n    int
	}{{"short", sc.SmallVersions}, {"long", sc.Versions}} {
		b.logf("scale: saving %d versions of session %s", s.n, s.name)
		began := time.Now()
		if err := createVersions(ctx, clients[0], checkpoint.Key{Namespace: "history", Session: s.name}, s.n); err != nil {
			return err
		}
		setup = append(setup, rate(s.n, "versions", time.Since(began)))
	}
	nc := clients[0].nc
	t := b.report.add("scale", fmt.Sprintf("list and history at %d sessions and %d versions against %d sessions and %d versions (one request: the first page)",
		sc.Sessions, sc.Versions, sc.SmallSessions, sc.SmallVersions),
		"request", "large p50", "small p50", "ratio p50", "large p99", "small p99", "large reply", "small reply")
	var pages [2]page
	list := func(ns string, limit int, into *page) op {
		return op{name: "list " + ns, run: func(int) error {
			body := map[string]any{}
			if limit > 0 {
				body["limit"] = limit
			}
			return request(ctx, nc, "cp.api."+ns+".list", body, into, "sessions")
		}}
	}
	// As for history, the target compares pages of the same size (the first SmallSessions heads of
	// each namespace, what checkpointctl list --limit asks): what a large namespace must not make
	// dearer. A whole first page holds as many heads as fit in a reply: shown, without a target.
	got, err := interleave(sc.Iterations, list("large", sc.SmallSessions, &pages[0]), list("small", sc.SmallSessions, &pages[1]))
	if err != nil {
		return err
	}
	scaleRow(t, fmt.Sprintf("list, first %d", sc.SmallSessions), got, pages, true)
	if got, err = interleave(sc.Iterations, list("large", 0, &pages[0]), list("small", 0, &pages[1])); err != nil {
		return err
	}
	scaleRow(t, "list, first page", got, pages, false)
	history := func(session string, limit int, into *page) op {
		return op{name: "history " + session, run: func(int) error {
			body := map[string]any{"session": session, "newestFirst": true}
			if limit > 0 {
				body["limit"] = limit
			}
			return request(ctx, nc, "cp.api.history.history", body, into, "versions")
		}}
	}
	// The target compares pages of the same size (the newest SmallVersions records of each session):
	// what a long history must not make dearer. A whole first page holds as many records as fit in
	// a reply, 25 times the short session's 10 here: shown, without a target.
	if got, err = interleave(sc.Iterations, history("long", sc.SmallVersions, &pages[0]), history("short", sc.SmallVersions, &pages[1])); err != nil {
		return err
	}
	scaleRow(t, fmt.Sprintf("history, newest %d", sc.SmallVersions), got, pages, true)
	if got, err = interleave(sc.Iterations, history("long", 0, &pages[0]), history("short", 0, &pages[1])); err != nil {
		return err
	}
	scaleRow(t, "history, first page", got, pages, false)
	t.note("raw requests per docs/protocol.md §5 (cp.api.<ns>.list and cp.api.<ns>.history of one session, newest first, each " +
		"with limit: what checkpointctl list --limit and history --limit ask, and without: the first page): a reply holds as much as " +
		"fits in one message, at most limit, so a large namespace answers with its first page (\"more\": true).")
	t.note("created with one-message saves, %d at once for sessions, one after another (appends) for versions: %s.",
		createWorkers, strings.Join(setup, "; "))
	return d.stop()
}

// page is what a list or history reply held.
type page struct {
	items int
	bytes int
	more  bool
}

// scaleRow adds a row of large against small; with target, the ratio is checked against listFactor.
func scaleRow(t *table, what string, got []samples, pages [2]page, target bool) {
	large, small := got[0], got[1]
	x := ratio(large.pct(50), small.pct(50))
	desc := func(p page) string {
		s := fmt.Sprintf("%d items, %s", p.items, size(int64(p.bytes)))
		if p.more {
			s += ", more"
		}
		return s
	}
	r := t.row(what, ms(large.pct(50)), ms(small.pct(50)), times(x), ms(large.pct(99)), ms(small.pct(99)), desc(pages[0]), desc(pages[1]))
	if target {
		r = r.check(fmt.Sprintf("≤ %g×", listFactor), times(x), x <= listFactor)
	}
	r.value("ratio_p50", x).value("large_p50_s", large.pct(50).Seconds()).value("small_p50_s", small.pct(50).Seconds())
}

// request sends a raw service request and decodes the reply's list (named field) into p; a busy
// daemon is asked again after the pause it names.
func request(ctx context.Context, nc *nats.Conn, subject string, body any, p *page, field string) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	for {
		m, err := nc.RequestWithContext(ctx, subject, data)
		if err != nil {
			return err
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			var e struct {
				Code         string `json:"code"`
				RetryAfterMs int    `json:"retryAfterMs"`
			}
			_ = json.Unmarshal(m.Data, &e)
			if e.Code == "busy" {
				time.Sleep(time.Duration(max(e.RetryAfterMs, 1)) * time.Millisecond)
				continue
			}
			return fmt.Errorf("%s: %s %s", subject, code, m.Header.Get("Nats-Service-Error"))
		}
		var reply map[string]json.RawMessage
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(reply[field], &items); err != nil {
			return fmt.Errorf("%s: %s: %w", subject, field, err)
		}
		*p = page{items: len(items), bytes: len(m.Data), more: string(reply["more"]) == "true"}
		return nil
	}
}

// createWorkers: the saves creating sessions at once.
const createWorkers = 64

func rate(n int, what string, d time.Duration) string {
	return fmt.Sprintf("%d %s in %s (%.0f/s)", n, what, d.Round(time.Millisecond), float64(n)/d.Seconds())
}

// createSessions saves n one-message sessions in namespace ns, many at once over the clients.
func createSessions(ctx context.Context, clients []*conn, ns string, n int) error {
	const workers = createWorkers
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		c := clients[w%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				conv := fmt.Appendf(nil, `[{"role":"user","content":"session %d of %d"}]`, i, n)
				if _, err := c.cp.Save(ctx, checkpoint.Key{Namespace: ns, Session: fmt.Sprintf("s%07d", i)}, conv); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// createVersions saves n versions of one session, a short message appended each time.
func createVersions(ctx context.Context, c *conn, key checkpoint.Key, n int) error {
	v, err := c.cp.Save(ctx, key, []byte(`[{"role":"user","content":"version 1"}]`))
	if err != nil {
		return err
	}
	for i := 2; i <= n; i++ {
		if v, err = c.cp.Append(ctx, key, v.Version, fmt.Appendf(nil, `[{"role":"user","content":"version %d"}]`, i)); err != nil {
			return err
		}
	}
	return nil
}
