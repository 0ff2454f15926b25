package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// scale is how much each section measures. --quick and --full choose one; the flags after them
// (--iterations, --sessions, ...) change a figure of it.
type scale struct {
	Name string `json:"name"`
	// Iterations: samples of each latency row (each side), and of each rival's operation.
	Iterations int `json:"iterations"`
	// IngestAgents each append 2 messages per save for IngestPhase, in IngestRounds rounds, each
	// round a checkpointd phase then a raw publish phase.
	IngestAgents int           `json:"ingest_agents"`
	IngestPhase  time.Duration `json:"ingest_phase"`
	IngestRounds int           `json:"ingest_rounds"`
	// Pace: the pause between turns of the checkpoint-per-turn session; Turns caps the assistant
	// turns saved (0: all 484); Settle: how long the daemon is left idle after the last save.
	Pace   time.Duration `json:"pace"`
	Turns  int           `json:"turns"`
	Settle time.Duration `json:"settle"`
	// Sessions and Versions: the large listing and history, measured against SmallSessions and
	// SmallVersions.
	Sessions      int `json:"sessions"`
	SmallSessions int `json:"small_sessions"`
	Versions      int `json:"versions"`
	SmallVersions int `json:"small_versions"`
	// LargeBytes: the size of the checkpoint whose save and restore peak RSS is measured.
	LargeBytes int64 `json:"large_bytes"`
}

var (
	quickScale = scale{Name: "quick", Iterations: 200, IngestAgents: 50, IngestPhase: 3 * time.Second, IngestRounds: 2,
		Pace: 50 * time.Millisecond, Settle: 10 * time.Second,
		Sessions: 10_000, SmallSessions: 1_000, Versions: 1_000, SmallVersions: 10, LargeBytes: 64 << 20}
	fullScale = scale{Name: "full", Iterations: 1000, IngestAgents: 50, IngestPhase: 10 * time.Second, IngestRounds: 3,
		Pace: 3 * time.Second, Settle: 5 * time.Minute,
		Sessions: 100_000, SmallSessions: 1_000, Versions: 10_000, SmallVersions: 10, LargeBytes: 64 << 20}
)

type options struct {
	scale       scale
	only        []string
	output      string // text or json
	checkpointd string // a checkpointd binary to run instead of building one
	corpus      string // testdata/corpus
	redis       string // redis-server binary ("" or absent: the rivals skip Redis)
	pgBin       string // PostgreSQL's bin directory
	keep        bool   // keep the temporary directory
	quiet       bool   // no progress on stderr
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	o := options{scale: quickScale}
	fs := flag.NewFlagSet("checkpointbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var quick, full bool
	var only string
	fs.BoolVar(&quick, "quick", false, "small scale, a few minutes (the default)")
	fs.BoolVar(&full, "full", false, "the issue's scale: 100k sessions, 10k versions, turns paced 3 s, 5 min settle (about an hour)")
	fs.StringVar(&only, "only", "", "run only these sections, comma-separated: "+strings.Join(sectionNames(), ","))
	fs.StringVar(&o.output, "o", "text", "output: text (aligned tables) or json")
	fs.StringVar(&o.checkpointd, "checkpointd", "", "checkpointd binary to run (default: go build ./cmd/checkpointd into a temporary directory)")
	fs.StringVar(&o.corpus, "corpus", "", "directory of the corpus transcripts (default: testdata/corpus of this module)")
	fs.StringVar(&o.redis, "redis-server", "redis-server", "redis-server binary for the rivals section (skipped when not found)")
	fs.StringVar(&o.pgBin, "postgres-bin", "/usr/lib/postgresql/15/bin", "directory of PostgreSQL's initdb and postgres for the rivals section (skipped when not found)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (data directories, logs) and print where it is")
	fs.BoolVar(&o.quiet, "q", false, "no progress lines on stderr")
	// Each figure of the scale, after --quick/--full.
	var sc scale
	fs.IntVar(&sc.Iterations, "iterations", 0, "samples per latency row (default: the scale's)")
	fs.DurationVar(&sc.IngestPhase, "ingest-phase", 0, "length of each ingest phase (default: the scale's)")
	fs.IntVar(&sc.IngestRounds, "ingest-rounds", 0, "ingest rounds (checkpointd, then raw publish) (default: the scale's)")
	fs.DurationVar(&sc.Pace, "pace", 0, "pause between turns of the checkpoint-per-turn session (default: the scale's; the issue's realistic run: 3s)")
	fs.IntVar(&sc.Turns, "turns", 0, "assistant turns of the checkpoint-per-turn session (default and 0: all)")
	fs.DurationVar(&sc.Settle, "settle", 0, "idle time after the session's last save before the restart (default: the scale's)")
	fs.IntVar(&sc.Sessions, "sessions", 0, "sessions of the large listing (default: the scale's)")
	fs.IntVar(&sc.SmallSessions, "small-sessions", 0, "sessions of the small listing (default: the scale's)")
	fs.IntVar(&sc.Versions, "versions", 0, "versions of the long history (default: the scale's)")
	fs.IntVar(&sc.SmallVersions, "small-versions", 0, "versions of the short history (default: the scale's)")
	fs.Int64Var(&sc.LargeBytes, "large-bytes", 0, "bytes of the large checkpoint (memory section; default: the scale's)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./cmd/checkpointbench [flags]\n\n"+
			"Measures a checkpointd process against raw JetStream, zstd, Redis and PostgreSQL on the same bytes\n"+
			"and prints issue 12's tables with each target MET or NOT MET. Sections: %s.\n\nFlags:\n",
			strings.Join(sectionNames(), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (checkpointbench takes only flags)", fs.Arg(0))
	}
	if quick && full {
		return o, fmt.Errorf("--quick and --full: choose one")
	}
	if full {
		o.scale = fullScale
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	o.scale.override(sc, given)
	if only != "" {
		o.only = strings.Split(only, ",")
		for _, n := range o.only {
			if !slices.Contains(sectionNames(), strings.ToLower(n)) {
				return o, fmt.Errorf("--only: no section %q (sections: %s)", n, strings.Join(sectionNames(), ","))
			}
		}
	}
	if o.output != "text" && o.output != "json" {
		return o, fmt.Errorf("-o: %q is not text or json", o.output)
	}
	return o, o.scale.validate()
}

// override sets the figures given on the command line.
func (s *scale) override(f scale, given map[string]bool) {
	if len(given) == 0 {
		return
	}
	set := func(name string, dst *int, v int) {
		if given[name] {
			*dst = v
			s.Name = "custom"
		}
	}
	setD := func(name string, dst *time.Duration, v time.Duration) {
		if given[name] {
			*dst = v
			s.Name = "custom"
		}
	}
	set("iterations", &s.Iterations, f.Iterations)
	setD("ingest-phase", &s.IngestPhase, f.IngestPhase)
	set("ingest-rounds", &s.IngestRounds, f.IngestRounds)
	setD("pace", &s.Pace, f.Pace)
	set("turns", &s.Turns, f.Turns)
	setD("settle", &s.Settle, f.Settle)
	set("sessions", &s.Sessions, f.Sessions)
	set("small-sessions", &s.SmallSessions, f.SmallSessions)
	set("versions", &s.Versions, f.Versions)
	set("small-versions", &s.SmallVersions, f.SmallVersions)
	if given["large-bytes"] {
		s.LargeBytes, s.Name = f.LargeBytes, "custom"
	}
}

func (s scale) validate() error {
	switch {
	case s.Iterations < 1:
		return fmt.Errorf("--iterations: at least 1")
	case s.IngestPhase <= 0 || s.IngestRounds < 1:
		return fmt.Errorf("--ingest-phase and --ingest-rounds: positive")
	case s.Pace < 0 || s.Settle < 0 || s.Turns < 0:
		return fmt.Errorf("--pace, --settle and --turns: not negative")
	case s.Sessions < 1 || s.SmallSessions < 1 || s.Versions < 1 || s.SmallVersions < 1:
		return fmt.Errorf("--sessions, --small-sessions, --versions, --small-versions: at least 1")
	case s.LargeBytes < 1<<20:
		return fmt.Errorf("--large-bytes: at least 1 MiB")
	}
	return nil
}
