package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// system is one store of the rivals section: how it appends 2 messages and reads the 598 KB
// conversation back, or why it was skipped.
type system struct {
	name    string
	skipped string
	append  op
	read    op
}

// runRivals: the same two messages appended and the same 598 KB conversation read from
// checkpointd, raw JetStream, Redis and PostgreSQL at matched durability, interleaved (issue 12,
// second table): checkpointd's default against Redis without fsync, checkpointd --sync always
// against Redis appendfsync always and PostgreSQL's synchronous commit.
func runRivals(ctx context.Context, b *bench) error {
	conv := b.corpus.medium
	var systems []*system
	for _, sync := range []bool{false, true} {
		cp, raw, err := b.checkpointdSystems(ctx, sync)
		if err != nil {
			return err
		}
		systems = append(systems, cp, raw)
	}
	systems = append(systems,
		b.redisSystem(ctx, "Redis, no fsync", "redis-nofsync", "--appendonly", "no"),
		b.redisSystem(ctx, "Redis, appendfsync always", "redis-always", "--appendonly", "yes", "--appendfsync", "always"),
		b.postgresSystem(ctx))
	var ran []*system
	for _, s := range systems {
		if s.skipped == "" {
			ran = append(ran, s)
		} else {
			b.logf("rivals: %s skipped: %s", s.name, s.skipped)
		}
	}
	n := b.o.scale.Iterations
	b.logf("rivals: %d appends and %d reads of each of %d systems, interleaved", n, n, len(ran))
	var appends, reads []op
	for _, s := range ran {
		appends, reads = append(appends, s.append), append(reads, s.read)
	}
	appended, err := interleave(n, appends...)
	if err != nil {
		return err
	}
	read, err := interleave(n, reads...)
	if err != nil {
		return err
	}
	got := map[string][2]samples{}
	for i, s := range ran {
		got[s.name] = [2]samples{appended[i], read[i]}
	}
	t := b.report.add("rivals", "What users would pick instead: the same 2 messages appended, the same "+size(int64(len(conv.bytes())))+" conversation read (interleaved)",
		append([]string{"operation"}, names(systems)...)...)
	for _, r := range []struct {
		label string
		which int
		p     float64
	}{{"append 2 messages, p50", 0, 50}, {"append 2 messages, p99", 0, 99}, {"read " + size(int64(len(conv.bytes()))) + ", p50", 1, 50}, {"read, p99", 1, 99}} {
		cells := []string{r.label}
		for _, s := range systems {
			if s.skipped != "" {
				cells = append(cells, "skipped")
				continue
			}
			cells = append(cells, ms(got[s.name][r.which].pct(r.p)))
		}
		t.row(cells...)
	}
	for _, s := range systems {
		if s.skipped != "" {
			t.note("%s: skipped, %s", s.name, s.skipped)
		}
	}
	t.note("checkpointd: checkpoint.Client.Append and Restore (head); raw JetStream: sync publish, and direct get + zstd decode of the conversation published compressed. " +
		"Redis: RPUSH of the 2 messages, LRANGE of the conversation's messages. PostgreSQL: one INSERT of 2 rows (a transaction, synchronous_commit on), SELECT of the conversation's rows in order.")
	matched := b.report.add("rivals", "At matched durability (p50 ratios)", "comparison", "checkpointd", "rival", "ratio")
	// compare adds a row of cp against rival; a row with a target also says what the raw
	// JetStream operations on the same server (raw, at cp's durability) take against the rival:
	// the floor under any checkpointd built on JetStream.
	compare := func(label, cp, raw, rival string, which int, target bool) {
		a, ok1 := got[cp]
		r, ok2 := got[rival]
		if !ok1 || !ok2 {
			rw := matched.row(label, "", "", "skipped")
			if target {
				rw.skip("≤ 1×")
			}
			return
		}
		x := ratio(a[which].pct(50), r[which].pct(50))
		rw := matched.row(label, ms(a[which].pct(50)), ms(r[which].pct(50)), times(x)).value("ratio", x)
		if !target {
			return
		}
		rw.check("≤ 1×", times(x), x <= 1)
		if f, ok := got[raw]; ok {
			fx := ratio(f[which].pct(50), r[which].pct(50))
			rw.floor("%s alone: %s, %s", raw, ms(f[which].pct(50)), times(fx)).value("floor_ratio", fx)
		}
	}
	compare("append, checkpointd (default) vs Redis without fsync", cpName(false), rawName(false), "Redis, no fsync", 0, false)
	compare("append, checkpointd --sync always vs Redis appendfsync always", cpName(true), rawName(true), "Redis, appendfsync always", 0, true)
	compare("append, checkpointd --sync always vs PostgreSQL synchronous commit", cpName(true), rawName(true), "PostgreSQL, synchronous commit", 0, true)
	compare("read, checkpointd (default) vs Redis", cpName(false), rawName(false), "Redis, no fsync", 1, true)
	compare("read, checkpointd (default) vs PostgreSQL", cpName(false), rawName(false), "PostgreSQL, synchronous commit", 1, false)
	matched.note("a row with a target also gives, after its verdict in the summary, the raw JetStream operations of the table above " +
		"(sync publish; direct get + zstd decode) against the same rival: the floor under a store built on JetStream.")
	return nil
}

func names(systems []*system) []string {
	var out []string
	for _, s := range systems {
		out = append(out, s.name)
	}
	return out
}

func cpName(sync bool) string {
	if sync {
		return "checkpointd --sync always"
	}
	return "checkpointd"
}

// rawName names the raw JetStream operations on the server of cpName(sync).
func rawName(sync bool) string {
	if sync {
		return "raw JetStream, sync always"
	}
	return "raw JetStream"
}

// checkpointdSystems starts a daemon (with --sync always if sync) and returns it and the raw
// JetStream operations on its server.
func (b *bench) checkpointdSystems(ctx context.Context, sync bool) (*system, *system, error) {
	name, rawWhat, extra := "rivals", rawName(sync), []string(nil)
	if sync {
		name, extra = "rivals-sync", []string{"--sync", "always"}
	}
	d, err := b.startDaemon(ctx, name, extra...)
	if err != nil {
		return nil, nil, err
	}
	c, err := b.connect(d)
	if err != nil {
		return nil, nil, err
	}
	stream, err := c.rawStream(ctx, "rivals")
	if err != nil {
		return nil, nil, err
	}
	conv := b.corpus.medium.bytes()
	key := checkpoint.Key{Session: "read"}
	if _, err := c.cp.Save(ctx, key, conv); err != nil {
		return nil, nil, err
	}
	if _, err := c.js.Publish(ctx, "bench.rivals.read", zenc.EncodeAll(conv, nil)); err != nil {
		return nil, nil, err
	}
	a := &appender{c: c, conv: b.corpus.large, prefix: "rivals"}
	cp := &system{name: cpName(sync),
		append: op{name: cpName(sync) + " append", setup: func(int) error { return a.prepare(ctx) }, run: func(int) error { return a.append(ctx) }},
		read: op{name: cpName(sync) + " restore", run: func(int) error {
			_, _, err := c.cp.Restore(ctx, key, 0)
			return err
		}}}
	raw := &system{name: rawWhat,
		append: op{name: rawWhat + " publish", run: func(i int) error {
			_, err := c.js.Publish(ctx, "bench.rivals.append", b.corpus.large.pair(i))
			return err
		}},
		read: op{name: rawWhat + " get", run: func(int) error { return getAndDecode(ctx, stream, "bench.rivals.read") }}}
	return cp, raw, nil
}

func getAndDecode(ctx context.Context, s jetstream.Stream, subject string) error {
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return err
	}
	_, err = zdec.DecodeAll(m.Data, nil)
	return err
}

// redisSystem starts a redis-server with settings and loads the conversation as a list of its
// messages.
func (b *bench) redisSystem(ctx context.Context, name, dir string, settings ...string) *system {
	rc, err := b.startRedis(ctx, dir, settings...)
	if err != nil {
		return &system{name: name, skipped: err.Error()}
	}
	var msgs []any
	for _, m := range b.corpus.medium.msgs {
		msgs = append(msgs, []byte(m))
	}
	if err := rc.RPush(ctx, "read", msgs...).Err(); err != nil {
		return &system{name: name, skipped: err.Error()}
	}
	conv := b.corpus.large
	return &system{name: name,
		append: op{name: name + " RPUSH", run: func(i int) error {
			j := (i % (len(conv.msgs) / 2)) * 2
			return rc.RPush(ctx, "append", []byte(conv.msgs[j]), []byte(conv.msgs[j+1])).Err()
		}},
		read: op{name: name + " LRANGE", run: func(int) error {
			got, err := rc.LRange(ctx, "read", 0, -1).Result()
			if err == nil && len(got) != len(msgs) {
				err = fmt.Errorf("LRANGE returned %d messages, not %d", len(got), len(msgs))
			}
			return err
		}}}
}

// postgresSystem starts PostgreSQL and loads the conversation as rows, a message each.
func (b *bench) postgresSystem(ctx context.Context) *system {
	const name = "PostgreSQL, synchronous commit"
	pg, err := b.startPostgres(ctx, "postgres")
	if err != nil {
		return &system{name: name, skipped: err.Error()}
	}
	if err := loadPostgres(ctx, pg, b.corpus.medium.msgs); err != nil {
		return &system{name: name, skipped: err.Error()}
	}
	conv := b.corpus.large
	want := len(b.corpus.medium.msgs)
	return &system{name: name,
		append: op{name: "PostgreSQL INSERT", run: func(i int) error {
			j := (i % (len(conv.msgs) / 2)) * 2
			_, err := pg.Exec(ctx, `INSERT INTO messages (session, body) VALUES ('append', $1), ('append', $2)`,
				string(conv.msgs[j]), string(conv.msgs[j+1]))
			return err
		}},
		read: op{name: "PostgreSQL SELECT", run: func(int) error {
			rows, err := pg.Query(ctx, `SELECT body FROM messages WHERE session = 'read' ORDER BY id`)
			if err != nil {
				return err
			}
			bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
			if err == nil && len(bodies) != want {
				err = fmt.Errorf("SELECT returned %d rows, not %d", len(bodies), want)
			}
			return err
		}}}
}

func loadPostgres(ctx context.Context, pg *pgx.Conn, msgs []json.RawMessage) error {
	if _, err := pg.Exec(ctx, `CREATE TABLE messages (id bigserial PRIMARY KEY, session text NOT NULL, body text NOT NULL);
		CREATE INDEX ON messages (session, id)`); err != nil {
		return err
	}
	for _, m := range msgs {
		if _, err := pg.Exec(ctx, `INSERT INTO messages (session, body) VALUES ('read', $1)`, string(m)); err != nil {
			return err
		}
	}
	return nil
}
