package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// runLatency: each checkpointd operation against the raw JetStream operation on the same bytes,
// on the same server and client connection, interleaved (issue 12, first table).
func runLatency(ctx context.Context, b *bench) error {
	d, err := b.startDaemon(ctx, "latency")
	if err != nil {
		return err
	}
	c, err := b.connect(d)
	if err != nil {
		return err
	}
	if _, err := c.rawStream(ctx, "latency"); err != nil {
		return err
	}
	t := b.report.add("latency", "Latency against the raw JetStream operation on the same bytes (interleaved, same server and connection)",
		"checkpointd operation", "raw operation", "checkpointd p50", "raw p50", "ratio p50", "checkpointd p99", "raw p99", "ratio p99")
	n := b.o.scale.Iterations
	if err := appendPaths(ctx, b, c, t, n); err != nil {
		return err
	}
	steps := []struct {
		what string
		ops  opsFor
		raw  string
		max  float64
	}{
		{"whole-array save of a grown array (SDK)", wholeArrayOps(b.corpus.large), "sync publish of what grew", 3},
		{"first save, " + size(int64(len(b.corpus.small.bytes()))), firstSaveOps(b.corpus.small), "zstd + sync publish", 2},
		{"first save, " + size(int64(len(b.corpus.medium.bytes()))), firstSaveOps(b.corpus.medium), "zstd + sync publish", 2},
		{"restore head, " + size(int64(len(b.corpus.small.bytes()))), restoreOps(b.corpus.small), "direct get + zstd decode", 1.5},
		{"restore head, " + size(int64(len(b.corpus.medium.bytes()))), restoreOps(b.corpus.medium), "direct get + zstd decode", 1.5},
		{"restore head, " + size(int64(len(b.corpus.large.bytes()))), restoreOps(b.corpus.large), "direct get + zstd decode", 1.5},
	}
	for _, s := range steps {
		b.logf("latency: %s (%d samples each)", s.what, n)
		o, err := s.ops(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		got, err := interleave(n, o.cp, o.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		rw := ratioRow(t, s.what, s.raw, got[0], got[1], s.max)
		if o.floor.run == nil {
			continue
		}
		// A pass of its own, after the row's: a third operation interleaved with the two moves
		// the row itself (the 598.8 KB restore read 1.61-1.68× with it, 1.36-1.40× without).
		if got, err = interleave(n, o.raw, o.floor); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		f := ratio(got[1].pct(50), got[0].pct(50))
		rw.floor("%s: %s, %s", o.floor.name, ms(got[1].pct(50)), times(f)).
			value("floor_p50_s", got[1].pct(50).Seconds()).value("floor_ratio_p50", f)
	}
	t.note("append: checkpoint.Client.Append of 2 consecutive messages of %s (%d bytes on average) onto the session's head, "+
		"as a request to the daemon (docs/protocol.md §4.0, the SDK's way) and, interleaved in the same run, on the ingest stream "+
		"(§4.1, the fallback when no daemon answers; checkpoint.WithIngestSaves); "+
		"whole-array: checkpoint.Client.Save of the whole array after the previous save of it (the SDK sends what grew).", largeFile, avgPair(b.corpus.large))
	t.note("raw operations publish to (and direct-get from) a plain file stream created on the daemon's embedded server.")
	return d.stop()
}

// opsFor prepares a row's operations (ops) on a connection.
type opsFor func(ctx context.Context, c *conn) (ops, error)

// ops are a row's operations: checkpointd's, the raw one, and, where the raw one leaves out work
// checkpointd must do, the raw one with that work (floor: run is nil when there is none), measured
// against the raw one in a pass of its own and printed beside the row's verdict.
type ops struct{ cp, raw, floor op }

// ratioRow adds a row of checkpointd against raw, with the target ratio of the p50s.
func ratioRow(t *table, what, rawWhat string, cp, raw samples, limit float64) *row {
	r50, r99 := ratio(cp.pct(50), raw.pct(50)), ratio(cp.pct(99), raw.pct(99))
	return t.row(what, rawWhat, ms(cp.pct(50)), ms(raw.pct(50)), times(r50), ms(cp.pct(99)), ms(raw.pct(99)), times(r99)).
		check(fmt.Sprintf("p50 ≤ %g×", limit), times(r50), r50 <= limit).
		value("checkpointd_p50_s", cp.pct(50).Seconds()).value("raw_p50_s", raw.pct(50).Seconds()).
		value("checkpointd_p99_s", cp.pct(99).Seconds()).value("raw_p99_s", raw.pct(99).Seconds()).
		value("ratio_p50", r50).value("ratio_p99", r99)
}

func avgPair(c conversation) int {
	n := 0
	for i := range len(c.msgs) / 2 {
		n += len(c.pair(i))
	}
	return n / (len(c.msgs) / 2)
}

// appender appends the pairs of a conversation to a session one after the other, starting a new
// session when the conversation is used up.
type appender struct {
	c       *conn
	cp      *checkpoint.Client // the client appending (c.cp unless set)
	conv    conversation
	prefix  string
	session int
	base    uint64
	next    int // the next pair
}

func (a *appender) client() *checkpoint.Client {
	if a.cp != nil {
		return a.cp
	}
	return a.c.cp
}

func (a *appender) key() checkpoint.Key {
	return checkpoint.Key{Session: fmt.Sprintf("%s-%d", a.prefix, a.session)}
}

// prepare makes sure the session has a head to append the next pair to.
func (a *appender) prepare(ctx context.Context) error {
	if a.base != 0 && a.next < len(a.conv.msgs)/2 {
		return nil
	}
	a.session++
	v, err := a.client().Save(ctx, a.key(), a.conv.pair(0))
	a.base, a.next = v.Version, 1
	return err
}

func (a *appender) append(ctx context.Context) error {
	v, err := a.client().Append(ctx, a.key(), a.base, a.conv.pair(a.next))
	a.base = v.Version
	a.next++
	return err
}

// appendPaths measures a 2-message append through the SDK by its two paths, a request to the
// daemon and the ingest stream, interleaved with the raw publish of the same bytes: two rows
// against the same raw samples.
func appendPaths(ctx context.Context, b *bench, c *conn, t *table, n int) error {
	viaIngest, err := checkpoint.New(c.nc, checkpoint.WithTimeout(2*time.Minute), checkpoint.WithIngestSaves())
	if err != nil {
		return err
	}
	b.logf("latency: append 2 messages by request and by the ingest stream (%d samples each)", n)
	req := &appender{c: c, cp: c.cp, conv: b.corpus.large, prefix: "append"}
	ing := &appender{c: c, cp: viaIngest, conv: b.corpus.large, prefix: "append-ingest"}
	var pair []byte
	got, err := interleave(n,
		op{name: "append (request)", setup: func(int) error { return req.prepare(ctx) }, run: func(int) error { return req.append(ctx) }},
		op{name: "append (ingest)", setup: func(int) error { return ing.prepare(ctx) }, run: func(int) error { return ing.append(ctx) }},
		op{name: "publish", setup: func(i int) error { pair = b.corpus.large.pair(i + 1); return nil },
			run: func(int) error { _, err := c.js.Publish(ctx, "bench.latency.append", pair); return err }})
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	ratioRow(t, "append 2 messages, until the version is known", "sync publish of the 2 messages", got[0], got[2], 3)
	// The fallback has no target of its own: the row shows what the request path saves.
	ing50, ing99 := ratio(got[1].pct(50), got[2].pct(50)), ratio(got[1].pct(99), got[2].pct(99))
	t.row("… the same on the ingest stream (the fallback)", "sync publish of the 2 messages",
		ms(got[1].pct(50)), ms(got[2].pct(50)), times(ing50), ms(got[1].pct(99)), ms(got[2].pct(99)), times(ing99)).
		value("checkpointd_p50_s", got[1].pct(50).Seconds()).value("raw_p50_s", got[2].pct(50).Seconds()).
		value("ratio_p50", ing50).value("ratio_p99", ing99)
	return nil
}

func wholeArrayOps(conv conversation) opsFor {
	return func(ctx context.Context, c *conn) (ops, error) {
		cp, raw, err := wholeArray(ctx, c, conv)
		return ops{cp: cp, raw: raw}, err
	}
}

// wholeArray saves a growing prefix of conv, 2 messages longer each time, against a publish of
// those 2 messages.
func wholeArray(ctx context.Context, c *conn, conv conversation) (op, op, error) {
	session, upTo := 0, 0
	var whole, grew []byte
	key := func() checkpoint.Key { return checkpoint.Key{Session: fmt.Sprintf("whole-%d", session)} }
	setup := func(int) error {
		if upTo == 0 || upTo+2 > len(conv.msgs) {
			session++
			upTo = 2
			if _, err := c.cp.Save(ctx, key(), joinMessages(conv.msgs[:upTo])); err != nil {
				return err
			}
		}
		upTo += 2
		whole, grew = joinMessages(conv.msgs[:upTo]), joinMessages(conv.msgs[upTo-2:upTo])
		return nil
	}
	return op{name: "save", setup: setup, run: func(int) error { _, err := c.cp.Save(ctx, key(), whole); return err }},
		op{name: "publish", run: func(int) error { _, err := c.js.Publish(ctx, "bench.latency.grew", grew); return err }}, nil
}

func firstSaveOps(conv conversation) opsFor {
	return func(ctx context.Context, c *conn) (ops, error) {
		body := conv.bytes()
		return ops{
			cp: op{name: "first save", run: func(i int) error {
				_, err := c.cp.Save(ctx, checkpoint.Key{Session: fmt.Sprintf("first-%s-%d", conv.name, i)}, body, checkpoint.ExpectVersion(0))
				return err
			}},
			raw: op{name: "zstd + publish", run: func(int) error {
				_, err := c.js.Publish(ctx, "bench.latency.first", zenc.EncodeAll(body, nil))
				return err
			}},
		}, nil
	}
}

// restoreOps: a restore of the head through the SDK against a direct get and zstd decode of the
// same conversation, published compressed. The SDK also checks the SHA-256 of what it decoded
// against the version's record (end to end, nothing altered); the raw read does not, so the floor
// op is the raw read with that check after it.
func restoreOps(conv conversation) opsFor {
	return func(ctx context.Context, c *conn) (ops, error) {
		body := conv.bytes()
		key := checkpoint.Key{Session: "restore-" + conv.name}
		if _, err := c.cp.Save(ctx, key, body); err != nil {
			return ops{}, err
		}
		subject := "bench.latency.conv." + fmt.Sprint(len(body))
		if _, err := c.js.Publish(ctx, subject, zenc.EncodeAll(body, nil)); err != nil {
			return ops{}, err
		}
		stream, err := c.js.Stream(ctx, "latency")
		if err != nil {
			return ops{}, err
		}
		getDecode := func() ([]byte, error) {
			m, err := stream.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				return nil, err
			}
			got, err := zdec.DecodeAll(m.Data, nil)
			if err == nil && len(got) != len(body) {
				err = fmt.Errorf("decoded %d bytes, published %d", len(got), len(body))
			}
			return got, err
		}
		want := sha256.Sum256(body)
		return ops{
			cp: op{name: "restore", run: func(int) error {
				got, _, err := c.cp.Restore(ctx, key, 0)
				if err == nil && len(got) != len(body) {
					err = fmt.Errorf("restored %d bytes, saved %d", len(got), len(body))
				}
				return err
			}},
			raw: op{name: "direct get + decode", run: func(int) error {
				_, err := getDecode()
				return err
			}},
			floor: op{name: "direct get + zstd decode + SHA-256 check, in turn", run: func(int) error {
				got, err := getDecode()
				if err == nil && sha256.Sum256(got) != want {
					err = errors.New("decoded bytes of another SHA-256")
				}
				return err
			}},
		}, nil
	}
}
