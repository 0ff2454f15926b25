// Command checkpointbench measures checkpointd side by side with the parts it is built from and
// with what users would pick instead, in one run, and says which of issue 12's targets are met.
//
// It drives a real checkpointd process (built from this module, on random ports and a temporary
// data directory) through the public SDK and raw NATS only, so it keeps working whatever the
// storage engine inside is. Every latency is a ratio to the raw JetStream operation on the same
// bytes, on the same server, measured interleaved, so a loaded machine slows both sides alike.
//
//	go run ./cmd/checkpointbench                 # quick: a few minutes
//	go run ./cmd/checkpointbench --full          # the scale
//	go run ./cmd/checkpointbench --only latency,disk -o json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "checkpointbench:", err)
		os.Exit(1)
	}
}

// section is one part of the benchmark: it measures and adds its tables to the report.
type section struct {
	name string
	run  func(ctx context.Context, b *bench) error
}

// sections in the order they run and print; --only picks some by name.
var sections = []section{
	{"latency", runLatency}, // latency.go
	{"ingest", runIngest},   // ingest.go
	{"disk", runDisk},       // disk.go
	{"rivals", runRivals},   // rivals.go
	{"scale", runScale},     // scale.go
	{"memory", runMemory},   // memory.go
}

func sectionNames() []string {
	var names []string
	for _, s := range sections {
		names = append(names, s.name)
	}
	return names
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBench(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	rep := newReport(args, o)
	b.report = rep
	for _, s := range sections {
		if !o.wants(s.name) {
			continue
		}
		b.logf("== %s", s.name)
		mark := b.mark()
		err := s.run(ctx, b)
		b.closeSince(mark)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.output == "json" {
		return rep.writeJSON(stdout)
	}
	return rep.writeText(stdout)
}

// wants says whether --only (empty: everything) names section s.
func (o options) wants(s string) bool {
	if len(o.only) == 0 {
		return true
	}
	for _, n := range o.only {
		if strings.EqualFold(n, s) {
			return true
		}
	}
	return false
}
