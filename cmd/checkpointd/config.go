package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
)

// config is everything checkpointd reads from flags and environment.
type config struct {
	DataDir         string
	NATSListen      string
	NATSURL         string
	NoUpgrade       bool // --no-upgrade: refuse a store of format 2 instead of upgrading it (upgrade.go)
	NATSCreds       string
	Sync            string // --sync: "default" or "always" (fsync every JetStream write; embedded server only)
	ConfigFile      string // --config FILE: settings as CHECKPOINTD_<FLAG>=VALUE lines, re-read on SIGHUP (reload.go)
	Tenants         string // --tenants FILE: logins and namespaces of the embedded server (tenants.go)
	PrintNATSConfig bool
	PrintVersion    bool // --version: print buildinfo and exit
	HTTPListen      string
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration
	CPUProfile      string // --cpuprofile FILE: a Go CPU profile of the daemon's whole run (profile.go)
	Daemon          transfer.Config
	Security        securityConfig // TLS and encryption at rest (security.go)
}

// The values of --sync.
const (
	syncDefault = "default"
	syncAlways  = "always"
)

// envPrefix: every flag may also be set as CHECKPOINTD_<FLAG>, e.g. --data-dir as CHECKPOINTD_DATA_DIR.
// A flag on the command line wins over the environment.
const envPrefix = "CHECKPOINTD_"

// parseConfig reads the flags, then the environment and --config. --help writes the usage to help
// (and returns flag.ErrHelp); a mistake returns its error with a pointer to --help, the usage not
// printed.
func parseConfig(args []string, help io.Writer) (config, error) {
	c := config{Daemon: transfer.DefaultConfig()}
	fs := flag.NewFlagSet("checkpointd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.ConfigFile, "config", "", "file of CHECKPOINTD_<FLAG>=VALUE lines (systemd EnvironmentFile format); it wins over the environment, the command line wins over it; on SIGHUP the log level and retention in it are applied")
	fs.StringVar(&c.DataDir, "data-dir", "checkpointd-data", "directory of the embedded NATS server's JetStream store")
	fs.StringVar(&c.NATSListen, "nats-listen", "127.0.0.1:4222", "address the embedded NATS server listens on for clients")
	fs.StringVar(&c.NATSURL, "nats-url", "", "use this NATS server or cluster (comma-separated URLs) instead of the embedded one")
	fs.BoolVar(&c.NoUpgrade, "no-upgrade", false, "on a store written by an earlier release (format 2: the KV buckets cp_heads and others), refuse to start with the commands that move the data by hand, instead of upgrading it in place at start-up (docs/format.md §8.17)")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "NATS credentials file for --nats-url")
	fs.StringVar(&c.Sync, "sync", syncDefault, "`mode` of the embedded server's JetStream writes: default (flushed to disk every 2 minutes, nats-server's default: an acknowledged save survives a crash of the daemon, and of the machine once flushed) or always (fsync before every acknowledgement: it survives a power loss too, at the cost of an fsync per write; see BENCHMARKS.md). With --nats-url set it on that server instead: sync_interval: always")
	fs.StringVar(&c.Tenants, "tenants", "", "JSON file of logins: each tenant reaches only its namespace, admins every namespace; anonymous clients are refused (re-read on SIGHUP; see docs/security.md)")
	fs.BoolVar(&c.PrintVersion, "version", false, "print the version, commit, Go version, protocol and storage format versions, and exit")
	fs.BoolVar(&c.PrintNATSConfig, "print-nats-config", false, "print the NATS accounts that isolate the --tenants for an external nats-server, and exit")
	fs.StringVar(&c.HTTPListen, "http-listen", "127.0.0.1:9333", "address of the HTTP server for /metrics, /healthz and /readyz (empty: off)")
	fs.IntVar(&c.Daemon.Replicas, "replicas", c.Daemon.Replicas, "JetStream replicas of the streams and buckets checkpointd creates (0: 3 when --nats-url is a cluster, else 1)")
	fs.Int64Var(&c.Daemon.MaxCheckpointBytes, "max-checkpoint-bytes", c.Daemon.MaxCheckpointBytes, "largest conversation accepted, in bytes")
	fs.Func("image-paths", "what a save does with an image part naming a local file (absolute path or file: URL): refuse (default), redact (keep only the extension) or allow", func(s string) error {
		p, err := codec.ParseImagePaths(s)
		c.Daemon.ImagePaths = p
		return err
	})
	fs.Int64Var(&c.Daemon.IngestBudgetBytes, "ingest-memory", 0, "bytes the saves being settled may hold at once (received and decompressed; 0: as much as --max-checkpoint-bytes). Beyond it a save waits up to 2 s, then is refused busy; the save in progress the longest may always go on, so saves hold at most this plus --max-checkpoint-bytes")
	fs.DurationVar(&c.Daemon.ResultTTL, "result-ttl", c.Daemon.ResultTTL, "how long the outcome of each save stays readable")
	fs.DurationVar(&c.Daemon.RequestTimeout, "request-timeout", c.Daemon.RequestTimeout, "longest a read request may take, including waiting for queued saves")
	fs.IntVar(&c.Daemon.Retention.Default.KeepLast, "retention-keep-last", 0, "keep at least the newest N versions of every session (0: no count limit)")
	fs.DurationVar(&c.Daemon.Retention.Default.MaxAge, "retention-max-age", 0, "keep versions younger than this (0: no age limit); with both limits a version goes only if both would remove it")
	fs.Func("namespace-retention", "retention for one namespace, NAMESPACE:keep=N,age=DURATION (repeatable)", func(s string) error {
		ns, r, err := housekeeping.ParseNamespaceRetention(s)
		if err != nil {
			return err
		}
		if c.Daemon.Retention.ByNamespace == nil {
			c.Daemon.Retention.ByNamespace = map[string]engine.Retention{}
		}
		c.Daemon.Retention.ByNamespace[ns] = r
		return nil
	})
	fs.DurationVar(&c.Daemon.RetentionInterval, "retention-interval", c.Daemon.RetentionInterval, "how often the retention policy is applied and segments orphaned by a crash are swept (0: never; prune with checkpointctl prune)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the whole run (daemon and embedded server) to this file, finished at shutdown; read it with go tool pprof (troubleshooting, README.md)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown may take before in-flight saves are left to the next start")
	c.Security.register(fs)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(help, "Usage: checkpointd [flags]\n       checkpointd healthcheck [HOST:PORT]   (asks a running daemon's /healthz: exit 0 when healthy)\n\n"+
				"Stores versioned checkpoints of agent conversations on NATS JetStream.\n"+
				"Without --nats-url it runs an embedded NATS server with JetStream in --data-dir.\n\n"+
				"Every flag can also be set in the environment as %s<FLAG>, e.g. CHECKPOINTD_DATA_DIR.\n\nFlags:\n", envPrefix)
			fs.SetOutput(help)
			fs.PrintDefaults()
			return c, err
		}
		return c, fmt.Errorf("%w (usage: checkpointd --help)", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (checkpointd takes only flags)", fs.Arg(0))
	}
	cmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cmdline[f.Name] = true })
	if err := applyEnv(fs, os.LookupEnv); err != nil {
		return c, err
	}
	if c.ConfigFile != "" {
		if err := applyConfigFile(fs, c.ConfigFile, cmdline); err != nil { // reload.go
			return c, err
		}
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, c.Security.load(&c)
}

// applyEnv sets every flag not given on the command line from its environment variable, if any.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(name); ok && !given[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func (c config) validate() error {
	if c.NATSURL == "" && c.DataDir == "" {
		return errors.New("--data-dir: required when running the embedded NATS server")
	}
	if c.Sync != syncDefault && c.Sync != syncAlways {
		return fmt.Errorf("--sync: %q is not default or always", c.Sync)
	}
	if c.Sync == syncAlways && c.NATSURL != "" {
		return errors.New("--sync always: configures the embedded NATS server; with --nats-url, set `sync_interval: always` in the JetStream block of that server's configuration")
	}
	if c.NATSCreds != "" && c.NATSURL == "" {
		return errors.New("--nats-creds: only meaningful with --nats-url")
	}
	if err := c.Security.validate(c.NATSURL == ""); err != nil {
		return err
	}
	if c.PrintNATSConfig && c.Tenants == "" {
		return errors.New("--print-nats-config: needs --tenants FILE")
	}
	if c.Tenants != "" && c.NATSURL != "" && !c.PrintNATSConfig {
		return errors.New("--tenants: configures the embedded NATS server; with --nats-url, configure the cluster " +
			"with the accounts `checkpointd --print-nats-config --tenants FILE` prints")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--log-format: %q is not text or json", c.LogFormat)
	}
	if b := c.Daemon.IngestBudgetBytes; b != 0 && b < 1<<20 {
		return fmt.Errorf("--ingest-memory: %d bytes is below 1 MiB (0: as much as --max-checkpoint-bytes)", b)
	}
	if c.ShutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout: must be positive")
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log-level: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

// newLogger returns the daemon's logger and its level, which a reload may change (reload.go).
func newLogger(c config, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	parsed, _ := parseLevel(c.LogLevel)
	level := new(slog.LevelVar)
	level.Set(parsed)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), level
	}
	return slog.New(slog.NewTextHandler(w, opts)), level
}
