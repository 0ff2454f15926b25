package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Tenancy of the embedded server (--tenants FILE, --print-nats-config, SIGHUP). The model is in
// internal/transfer/embedded/accounts.go and docs/security.md.

// withTenants configures srv from --tenants: it loads the file and makes the daemon's own password,
// and returns the option the daemon's connection logs in with. Without --tenants it logs that the
// server is open and returns no option.
func withTenants(srv *embedded.ServerConfig, cfg config, log *slog.Logger) ([]nats.Option, error) {
	if cfg.Tenants == "" {
		log.Warn("the embedded NATS server is open: anyone who can reach "+cfg.NATSListen+
			" can read and write every namespace; run with --tenants FILE to require logins (docs/security.md)",
			"listen", cfg.NATSListen)
		return nil, nil
	}
	t, err := embedded.LoadTenants(cfg.Tenants)
	if err != nil {
		return nil, err
	}
	pw, err := embedded.NewDaemonPassword()
	if err != nil {
		return nil, fmt.Errorf("making the daemon's password: %w", err)
	}
	srv.Tenants, srv.DaemonPassword = t, pw
	log.Info("logins required: each tenant reaches only its own namespace", "tenants_file", cfg.Tenants,
		"namespaces", len(t.Namespaces()), "tenant_logins", len(t.Tenants), "admin_logins", len(t.Admins))
	return []nats.Option{nats.UserInfo(embedded.DaemonUser, pw)}, nil
}

// reloadTenants applies the tenants file at path to the running server and returns the
// configuration now in force: the new one, or, if the file is unusable or the server refuses it,
// the old one, which keeps working.
func reloadTenants(ns *server.Server, srv embedded.ServerConfig, path string, log *slog.Logger) embedded.ServerConfig {
	t, err := embedded.LoadTenants(path)
	if err != nil {
		log.Error("tenants file not reloaded; the previous logins stay in force", "err", err)
		return srv
	}
	next := srv
	next.Tenants = t
	if err := embedded.ReloadServer(ns, next); err != nil {
		log.Error("tenants file not reloaded; the previous logins stay in force", "tenants_file", path, "err", err)
		return srv
	}
	log.Info("tenants file reloaded", "tenants_file", path, "namespaces", len(t.Namespaces()),
		"tenant_logins", len(t.Tenants), "admin_logins", len(t.Admins))
	return next
}

// printNATSConfig writes the accounts block for an external NATS server (--print-nats-config).
func printNATSConfig(path string, w io.Writer) error {
	t, err := embedded.LoadTenants(path)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, `# NATS accounts for checkpointd, from %q (checkpointd --print-nats-config).
# Include this in the nats-server configuration of every server of the cluster, with JetStream
# enabled. It holds the tenants' passwords: keep it as private as the tenants file.
# The daemon logs in as user %q of account %s, with the password in the server's environment
# variable %s; run every checkpointd with
#   CHECKPOINTD_NATS_URL=nats://%s:<that password>@<host>:4222 checkpointd
# Each namespace's account imports only its own subjects; see docs/security.md.

%s`, path, embedded.DaemonUser, embedded.DaemonAccount, embedded.DaemonPasswordVar, embedded.DaemonUser, t.NATSConfig(""))
	return err
}
