package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/procfs"
)

// Targets of the disk section (issue 12): the data directory of a settled session within 1.5 ×
// zstd of its final conversation plus a fixed store skeleton, the bytes the daemon writes for it
// within 3 ×, and a fork that shares what it forked.
const (
	diskFactor    = 1.5
	diskSkeleton  = 256 << 10
	writtenFactor = 3.0
	forkMaxBytes  = 1000
)

// runDisk: the disk and the bytes written for a session checkpointed after every assistant turn
// (whole-array saves; the SDK sends what grew), paced like an agent's turns, then settled; then a
// fork of it (issue 12, the disk table).
func runDisk(ctx context.Context, b *bench) error {
	d, err := b.startDaemon(ctx, "disk")
	if err != nil {
		return err
	}
	c, err := b.connect(d)
	if err != nil {
		return err
	}
	raw, err := b.startRawSession(ctx, "disk-raw")
	if err != nil {
		return err
	}
	sc := b.o.scale
	conv := b.corpus.large
	key := checkpoint.Key{Session: "per-turn"}
	start, err := procfs.ReadIO(d.pid())
	if err != nil {
		return fmt.Errorf("the daemon's /proc/%d/io: %w", d.pid(), err)
	}
	rawStart, err := procfs.ReadIO(raw.pid())
	if err != nil {
		return fmt.Errorf("nats-server's /proc/%d/io: %w", raw.pid(), err)
	}
	turns := assistantTurns(conv.msgs, sc.Turns)
	b.logf("disk: %d whole-array saves of %s, paced %s", len(turns), conv.name, sc.Pace)
	var final []byte
	began := time.Now()
	prev := 0
	for i, end := range turns {
		final = joinMessages(conv.msgs[:end])
		if _, err := c.cp.Save(ctx, key, final); err != nil {
			return fmt.Errorf("save of turn %d: %w", i+1, err)
		}
		if err := raw.save(ctx, conv.msgs[prev:end]); err != nil {
			return fmt.Errorf("turn %d: %w", i+1, err)
		}
		prev = end
		if err := sleep(ctx, sc.Pace); err != nil {
			return err
		}
	}
	saving := time.Since(began)
	b.logf("disk: settling for %s, then restarting the daemon", sc.Settle)
	if err := sleep(ctx, sc.Settle); err != nil {
		return err
	}
	end, err := procfs.ReadIO(d.pid())
	if err != nil {
		return err
	}
	written := end.Sub(start)
	rawEnd, err := procfs.ReadIO(raw.pid())
	if err != nil {
		return err
	}
	rawWritten := rawEnd.Sub(rawStart)
	if err := d.stop(); err != nil {
		return err
	}
	if err := d.start(ctx); err != nil {
		return err
	}
	usage, err := procfs.TreeUsage(d.dir)
	if err != nil {
		return err
	}
	z := int64(len(zenc.EncodeAll(final, nil)))
	t := b.report.add("disk", fmt.Sprintf("Disk and bytes written: %s saved after each of %d assistant turns, paced %s, settled %s and restarted",
		conv.name, len(turns), sc.Pace, sc.Settle), "figure", "bytes", "× zstd(final)")
	limit := diskFactor*float64(z) + diskSkeleton
	t.row("zstd(final conversation), default level", size(z), "1.00×").value("bytes", float64(z))
	t.row("data dir, apparent (du -sb)", size(usage.Apparent), times(float64(usage.Apparent)/float64(z))).
		check("≤ 1.5× zstd + 256 KiB", size(usage.Apparent), float64(usage.Apparent) <= limit).value("bytes", float64(usage.Apparent))
	t.row("data dir, allocated blocks (du -s)", size(usage.Allocated), times(float64(usage.Allocated)/float64(z))).
		check("≤ 1.5× zstd + 256 KiB", size(usage.Allocated), float64(usage.Allocated) <= limit).value("bytes", float64(usage.Allocated))
	t.row("daemon write_bytes (/proc/PID/io)", size(written.WriteBytes), times(float64(written.WriteBytes)/float64(z))).
		check("≤ 3×", times(float64(written.WriteBytes)/float64(z)), float64(written.WriteBytes) <= writtenFactor*float64(z)).
		floor("raw JetStream, the same turns alike: %s", times(float64(rawWritten.WriteBytes)/float64(z))).
		value("bytes", float64(written.WriteBytes))
	t.row("daemon cancelled_write_bytes", size(written.CancelledWriteBytes), times(float64(written.CancelledWriteBytes)/float64(z))).
		value("bytes", float64(written.CancelledWriteBytes))
	t.row("write_bytes − cancelled_write_bytes", size(written.Net()), times(float64(written.Net())/float64(z))).
		value("bytes", float64(written.Net()))
	t.row("raw JetStream, the same turns alike: write_bytes", size(rawWritten.WriteBytes), times(float64(rawWritten.WriteBytes)/float64(z))).
		value("bytes", float64(rawWritten.WriteBytes))
	t.row("  checkpointd's write_bytes / raw JetStream's", "", times(float64(written.WriteBytes)/float64(rawWritten.WriteBytes))).
		value("ratio", float64(written.WriteBytes)/float64(rawWritten.WriteBytes))
	t.note("raw JetStream: a nats-server process of its own (no checkpointd), one publish per turn of the turn's new messages "+
		"compressed in one zstd stream (1 MiB window) with the compare-and-swap header, right after each save, in the same pauses: %s published. "+
		"The kernel charges a page each time a clean one is dirtied: paced, the tail page of the file appended to is written back every ~30 s "+
		"(vm.dirty_expire_centisecs) and dirtied again, and nats-server rewrites each changed stream's index.db every 2-2.5 min; both pay that alike.",
		size(raw.stored))
	t.note("%d files in the data dir; the final conversation is %s (%d messages); saving took %s including the pauses.",
		usage.Files, size(int64(len(final))), turns[len(turns)-1], saving.Round(time.Millisecond))
	t.note("bytes written: from the first save to the end of the settling time (the restart's own writes are not counted); " +
		"the kernel counts write_bytes when a page is dirtied, and cancelled_write_bytes when a dirty page is dropped before it reaches the disk (a file truncated or removed).")
	if err := forkRow(ctx, b, d, key, t); err != nil {
		return err
	}
	return d.stop()
}

// forkRow forks the settled session's head and adds what the fork added to the data directory.
func forkRow(ctx context.Context, b *bench, d *daemon, from checkpoint.Key, t *table) error {
	c, err := b.connect(d)
	if err != nil {
		return err
	}
	head, err := c.cp.Get(ctx, from, 0)
	if err != nil {
		return err
	}
	before, err := procfs.TreeUsage(d.dir)
	if err != nil {
		return err
	}
	io0, err := procfs.ReadIO(d.pid())
	if err != nil {
		return err
	}
	if _, err := c.cp.Fork(ctx, from, head.Version, checkpoint.Key{Session: "fork"}); err != nil {
		return err
	}
	if err := sleep(ctx, time.Second); err != nil { // what the fork's save writes after its acknowledgement
		return err
	}
	after, err := procfs.TreeUsage(d.dir)
	if err != nil {
		return err
	}
	io1, err := procfs.ReadIO(d.pid())
	if err != nil {
		return err
	}
	added := after.Apparent - before.Apparent
	t.row(fmt.Sprintf("a fork of the %s head: data dir grew", mib(head.RawBytes)), size(added), "").
		check("≤ 1 KB", size(added), added <= forkMaxBytes).value("bytes", float64(added))
	t.row("  and the daemon's write_bytes grew", size(io1.Sub(io0).WriteBytes), "").value("bytes", float64(io1.Sub(io0).WriteBytes))
	return nil
}

// assistantTurns returns, for each assistant message (up to max turns; 0: all), the number of
// messages of the conversation up to and including it: the arrays an agent checkpoints after
// each turn. The last array is the whole conversation.
func assistantTurns(msgs []json.RawMessage, max int) []int {
	var ends []int
	for i, m := range msgs {
		if role(m) == "assistant" {
			ends = append(ends, i+1)
		}
	}
	if max > 0 && len(ends) > max {
		ends = ends[:max]
	} else if len(ends) == 0 || ends[len(ends)-1] != len(msgs) {
		ends = append(ends, len(msgs))
	}
	return ends
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
