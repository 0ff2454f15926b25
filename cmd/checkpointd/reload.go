package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// Settings that change at run time. On SIGHUP checkpointd reads its settings again, exactly as at
// start (command line, environment, then --config FILE over the environment), and applies what can
// change safely while it serves: the log level, the retention policy (default and per namespace),
// the namespace keys file (when encryption was on at start) and, with the embedded server, the
// tenants file. Everything else takes effect at the next start.
// A file that does not parse changes nothing: the running settings stay in force, and it says why.

// reloader holds what a reload changes.
type reloader struct {
	args  []string // the command line, parsed again on each reload
	level *slog.LevelVar
	log   *slog.Logger
	d     *transfer.Daemon

	// The embedded server and its tenants file, if any (tenants.go).
	ns      *server.Server
	srv     embedded.ServerConfig
	tenants string
}

// loop reloads on every signal of hup until ctx ends.
func (r *reloader) loop(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload()
		}
	}
}

func (r *reloader) reload() {
	cfg, err := parseConfig(r.args, io.Discard)
	if err != nil {
		r.log.Error("SIGHUP: settings not reloaded; the running ones stay in force", "err", err)
		return
	}
	r.log.Debug("SIGHUP: settings read", "config", cfg.ConfigFile, "log_level", cfg.LogLevel)
	level, _ := parseLevel(cfg.LogLevel) // validated by parseConfig
	if old := r.level.Level(); old != level {
		r.level.Set(level)
		r.log.Log(context.Background(), max(level, old), "SIGHUP: log level changed", "from", old, "to", level)
		r.log.Debug("SIGHUP: settings read", "config", cfg.ConfigFile, "log_level", cfg.LogLevel)
	}
	if err := r.d.SetRetention(cfg.Daemon.Retention); err != nil {
		r.log.Error("SIGHUP: retention not reloaded; the running policy stays in force", "err", err)
	} else {
		ret := cfg.Daemon.Retention
		r.log.Info("SIGHUP: retention policy in force", "keep_last", ret.Default.KeepLast, "max_age", ret.Default.MaxAge,
			"namespace_overrides", len(ret.ByNamespace))
	}
	r.reloadNamespaceKeys(cfg)
	// Tenants reload only where the server was started with them: turning logins on or off would
	// change how the daemon itself logs in.
	if r.ns != nil && r.tenants != "" {
		r.srv = reloadTenants(r.ns, r.srv, r.tenants, r.log)
	}
	r.log.Info("SIGHUP: reload done; other settings take effect at the next start")
}

// reloadNamespaceKeys puts the keys of --namespace-keys, read again, in force: a key added seals from
// now on, a key left out no longer opens what it sealed (said, with its id, as a warning).
func (r *reloader) reloadNamespaceKeys(cfg config) {
	if r.d == nil {
		return
	}
	dropped, err := r.d.SetNamespaceKeys(cfg.Daemon.NamespaceKeys)
	if err != nil {
		r.log.Error("SIGHUP: namespace keys not reloaded; the running keys stay in force", "err", err)
		return
	}
	if cfg.Daemon.NamespaceKeys == nil {
		return
	}
	r.log.Info("SIGHUP: namespace keys in force", "file", cfg.Security.NamespaceKeysFile, "keys", cfg.Daemon.NamespaceKeys.Count())
	if len(dropped) > 0 {
		r.log.Warn("SIGHUP: keys no longer in --namespace-keys; what they sealed no longer opens", "key_ids", dropped)
	}
}

// applyConfigFile sets, from path, every flag not given on the command line. The file holds
// CHECKPOINTD_<FLAG>=VALUE lines (the environment variables' names, so that one file can also be a
// systemd EnvironmentFile), blank lines and # comments; a value may be in double or single quotes.
// An unknown name or a bad value is an error naming the file and line.
func applyConfigFile(fs *flag.FlagSet, path string, cmdline map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	var errs []error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", path, n)
		key, value, ok := strings.Cut(line, "=")
		name, prefixed := strings.CutPrefix(strings.TrimSpace(key), envPrefix)
		name = strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		switch {
		case !ok || !prefixed:
			errs = append(errs, fmt.Errorf("%s: want %s<FLAG>=VALUE, got %q", where, envPrefix, line))
			continue
		case name == "config":
			errs = append(errs, fmt.Errorf("%s: a config file cannot name another", where))
			continue
		case fs.Lookup(name) == nil:
			errs = append(errs, fmt.Errorf("%s: %s%s is not a checkpointd setting", where, envPrefix, strings.ToUpper(strings.ReplaceAll(name, "-", "_"))))
			continue
		case cmdline[name]:
			continue
		}
		if err := fs.Set(name, unquote(strings.TrimSpace(value))); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", where, strings.TrimSpace(key), err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("--config %s: %w", path, err))
	}
	return errors.Join(errs...)
}

// unquote strips one pair of matching double or single quotes.
func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}
