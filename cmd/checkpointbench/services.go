package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The rivals (Redis, PostgreSQL) run as processes of their own, started by the benchmark on
// loopback, on free ports, with their data in the benchmark's temporary directory.

// startRedis runs redis-server with extra settings and returns a client of it, or why it cannot.
func (b *bench) startRedis(ctx context.Context, name string, settings ...string) (*redis.Client, error) {
	bin, err := exec.LookPath(b.o.redis)
	if err != nil {
		return nil, fmt.Errorf("%s not found (Debian: apt-get install redis-server)", b.o.redis)
	}
	dir := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", dir, "--save", "", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log")}, settings...)
	if err := b.startProcess(exec.Command(bin, args...), nil); err != nil {
		return nil, err
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	b.onClose(func() { rc.Close() })
	return rc, waitFor(ctx, func() error { return rc.Ping(ctx).Err() })
}

// startPostgres runs initdb and postgres (as the postgres or nobody user when the benchmark runs
// as root, which postgres refuses to be) and returns a connection, or why it cannot.
func (b *bench) startPostgres(ctx context.Context, name string) (*pgx.Conn, error) {
	initdb, postgres := filepath.Join(b.o.pgBin, "initdb"), filepath.Join(b.o.pgBin, "postgres")
	if _, err := os.Stat(postgres); err != nil {
		return nil, fmt.Errorf("%s not found (Debian: apt-get install postgresql, or give --postgres-bin)", postgres)
	}
	cred, err := unprivileged()
	if err != nil {
		return nil, err
	}
	// Its own directory, readable by that user (the benchmark's temporary directory is not).
	base, err := os.MkdirTemp("", "checkpointbench-"+name+"-")
	if err != nil {
		return nil, err
	}
	b.onClose(func() { _ = os.RemoveAll(base) })
	dir := filepath.Join(base, "data")
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, initdb, "-D", dir, "-U", "bench", "--auth=trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	pg := exec.Command(postgres, "-D", dir, "-p", port, "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=on", "-c", "synchronous_commit=on")
	if err := b.startProcess(pg, cred); err != nil {
		return nil, err
	}
	url := fmt.Sprintf("postgres://bench@%s/postgres?sslmode=disable", addr)
	var conn *pgx.Conn
	err = waitFor(ctx, func() error {
		var err error
		conn, err = pgx.Connect(ctx, url)
		return err
	})
	if err != nil {
		return nil, err
	}
	b.onClose(func() { conn.Close(context.Background()) })
	return conn, nil
}

// unprivileged returns the credential postgres runs with: none when the benchmark is not root,
// else the postgres user, else nobody.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and neither a postgres nor a nobody user to run PostgreSQL as (it refuses root)")
}

// startProcess starts cmd (as cred, if not nil) and stops it (SIGTERM, then SIGKILL) when the
// benchmark ends.
func (b *bench) startProcess(cmd *exec.Cmd, cred *syscall.Credential) error {
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.onClose(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return nil
}

// waitFor retries f until it succeeds, for up to 30 s.
func waitFor(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
