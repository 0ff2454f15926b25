package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// bench is what the sections share: a temporary directory, the checkpointd binary, the corpus,
// the report, and the processes started so far (stopped by close).
type bench struct {
	o      options
	tmp    string
	bin    string
	corpus *corpus
	report *report
	stderr io.Writer
	stops  []func() // what close undoes, in reverse order: processes, connections
}

func newBench(ctx context.Context, o options, stderr io.Writer) (*bench, error) {
	b := &bench{o: o, stderr: stderr}
	var err error
	if b.tmp, err = os.MkdirTemp("", "checkpointbench-"); err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Fprintln(stderr, "checkpointbench: keeping", b.tmp)
	}
	if b.corpus, err = loadCorpus(o.corpus); err != nil {
		b.close()
		return nil, err
	}
	if b.bin = o.checkpointd; b.bin == "" {
		b.logf("building checkpointd")
		b.bin = filepath.Join(b.tmp, "checkpointd")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "github.com/checkpointd/checkpointd/cmd/checkpointd").CombinedOutput()
		if err != nil {
			b.close()
			return nil, fmt.Errorf("go build checkpointd: %w\n%s", err, out)
		}
	}
	return b, nil
}

// close stops every process the run started and removes the temporary directory (unless --keep).
func (b *bench) close() {
	b.closeSince(0)
	if !b.o.keep {
		_ = os.RemoveAll(b.tmp)
	}
}

// onClose registers a function close runs (in reverse order).
func (b *bench) onClose(f func()) { b.stops = append(b.stops, f) }

// mark and closeSince let a section stop what it started when it ends, so that its processes
// and connections do not run on beside the next section.
func (b *bench) mark() int { return len(b.stops) }

func (b *bench) closeSince(mark int) {
	for i := len(b.stops) - 1; i >= mark; i-- {
		b.stops[i]()
	}
	b.stops = b.stops[:mark]
}

// logf prints a progress line on stderr (not with -q).
func (b *bench) logf(format string, args ...any) {
	if !b.o.quiet {
		fmt.Fprintf(b.stderr, "%s checkpointbench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// startDaemon runs a checkpointd process of its own, named name, with extra flags, and waits
// until it serves.
func (b *bench) startDaemon(ctx context.Context, name string, extra ...string) (*daemon, error) {
	d, err := newDaemon(b.bin, filepath.Join(b.tmp, name), extra...)
	if err != nil {
		return nil, err
	}
	b.onClose(func() { d.kill(); d.log.Close() })
	return d, d.start(ctx)
}

// maxPendingPublishes: the asynchronous publishes a connection keeps in flight. With 50 agents
// nats.go's default (4000 each) goes past the server's limit of publishes in flight per stream.
const maxPendingPublishes = 256

// conn is one client connection to a daemon's server, used both by the SDK and for raw JetStream,
// as one agent process would.
type conn struct {
	nc *nats.Conn
	cp *checkpoint.Client
	js jetstream.JetStream
}

func (b *bench) connect(d *daemon) (*conn, error) {
	nc, err := nats.Connect(d.url(), nats.Name("checkpointbench"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	cp, err := checkpoint.New(nc, checkpoint.WithTimeout(2*time.Minute))
	if err != nil {
		nc.Close()
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPendingPublishes))
	if err != nil {
		nc.Close()
		return nil, err
	}
	b.onClose(nc.Close)
	return &conn{nc: nc, cp: cp, js: js}, nil
}

// rawStream creates the plain stream the raw JetStream operations use, on the daemon's own
// server: file storage, one replica, direct gets allowed, as checkpointd's streams.
func (c *conn) rawStream(ctx context.Context, name string) (jetstream.Stream, error) {
	return c.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{"bench." + name + ".>"}, Storage: jetstream.FileStorage,
		AllowDirect: true, MaxBytes: 1 << 30, Discard: jetstream.DiscardOld,
	})
}
