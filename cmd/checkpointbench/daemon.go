package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// daemon is one checkpointd process on its own data directory and ports; it can be stopped and
// started again on the same ones (the disk section restarts it).
type daemon struct {
	bin, dir           string
	natsAddr, httpAddr string
	extra              []string
	cmd                *exec.Cmd
	exited             chan struct{}
	log                *os.File // stderr of every incarnation, in dir + ".log"
}

func newDaemon(bin, dir string, extra ...string) (*daemon, error) {
	d := &daemon{bin: bin, dir: dir, extra: extra}
	var err error
	if d.natsAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if d.httpAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if d.log, err = os.Create(dir + ".log"); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *daemon) url() string { return "nats://" + d.natsAddr }
func (d *daemon) pid() int    { return d.cmd.Process.Pid }

// start runs the process and waits until its /healthz answers 200.
func (d *daemon) start(ctx context.Context) error {
	args := append([]string{"--data-dir", d.dir, "--nats-listen", d.natsAddr, "--http-listen", d.httpAddr,
		"--log-level", "warn"}, d.extra...)
	d.cmd = exec.Command(d.bin, args...)
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		return err
	}
	d.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(d.cmd, d.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-d.exited:
			return fmt.Errorf("checkpointd exited while starting (%v); its log: %s", d.cmd.ProcessState, d.log.Name())
		default:
		}
		if healthy(d.httpAddr) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.kill()
	return fmt.Errorf("checkpointd never answered /healthz; its log: %s", d.log.Name())
}

// stop shuts the daemon down gracefully (SIGTERM) and waits for it.
func (d *daemon) stop() error {
	if d.cmd == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		d.kill()
		return fmt.Errorf("checkpointd did not stop within 60 s of SIGTERM; killed")
	}
	state := d.cmd.ProcessState
	d.cmd = nil
	if !state.Success() {
		return fmt.Errorf("checkpointd stopped with %v; its log: %s", state, d.log.Name())
	}
	return nil
}

// kill ends the process at once, if it runs.
func (d *daemon) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
}

func healthy(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
