package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rawSession is the disk section's baseline: the same session written to a plain nats-server
// process (JetStream alone, no checkpointd), one publish per turn of the turn's new messages
// compressed with one zstd stream (as checkpointd compresses them, docs/format.md §8.4), with the
// same compare-and-swap header, in the same pauses. The kernel charges a process a page each
// time it dirties a clean one, so a session paced over minutes costs more than its bytes (the
// tail page of the file appended to is written back every ~30 s and dirtied again, and a
// journal-less ext4 charges the inode's block to the writer too); the baseline pays that alike,
// and the ratio of the two is what checkpointd adds.
type rawSession struct {
	cmd    *exec.Cmd
	dir    string
	nc     *nats.Conn
	js     jetstream.JetStream
	enc    *zstd.Encoder
	buf    bytes.Buffer
	last   uint64 // the subject's last sequence, for the compare-and-swap
	stored int64  // bytes published
}

const rawSubject = "raw.per-turn"

// startRawSession builds nats-server from the module's own dependency, runs it on a data
// directory of its own and makes a file stream for the session.
func (b *bench) startRawSession(ctx context.Context, name string) (*rawSession, error) {
	bin := filepath.Join(b.tmp, "nats-server")
	if _, err := os.Stat(bin); err != nil {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("go build nats-server: %w\n%s", err, out)
		}
	}
	r := &rawSession{dir: filepath.Join(b.tmp, name)}
	var err error
	for attempt := 1; ; attempt++ { // new ports when the one picked was taken meanwhile
		if err = r.start(ctx, b, bin); err == nil || attempt == startAttempts {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		return nil, err
	}
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		return nil, err
	}
	r.enc, err = zstd.NewWriter(&r.buf, zstd.WithWindowSize(1<<20))
	return r, err
}

// start runs the server on a free port and connects to it, or says why not.
func (r *rawSession) start(ctx context.Context, b *bench, bin string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	log, err := os.OpenFile(r.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	b.onClose(func() { log.Close() })
	cmd := exec.Command(bin, "-js", "-sd", r.dir, "-a", host, "-p", port)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	r.cmd = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.onClose(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for ctx.Err() == nil {
		select {
		case <-exited:
			return fmt.Errorf("nats-server exited while starting (%v); its log: %s", cmd.ProcessState, log.Name())
		default:
		}
		if r.nc, err = nats.Connect("nats://"+addr, nats.Name("checkpointbench-raw")); err == nil {
			b.onClose(r.nc.Close)
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill() // the next attempt runs another; close waits for this one
			return fmt.Errorf("nats-server never accepted a connection: %w; its log: %s", err, log.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ctx.Err()
}

func (r *rawSession) pid() int { return r.cmd.Process.Pid }

// save publishes a turn's new messages, compressed in the session's stream, and waits for the ack.
func (r *rawSession) save(ctx context.Context, msgs []json.RawMessage) error {
	r.buf.Reset()
	if _, err := r.enc.Write(joinMessages(msgs)); err != nil {
		return err
	}
	if err := r.enc.Flush(); err != nil {
		return err
	}
	ack, err := r.js.Publish(ctx, rawSubject, r.buf.Bytes(), jetstream.WithExpectLastSequencePerSubject(r.last))
	if err != nil {
		return fmt.Errorf("raw JetStream publish: %w", err)
	}
	r.last = ack.Sequence
	r.stored += int64(r.buf.Len())
	return nil
}
