package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
	if err := d.pickPorts(); err != nil {
		return nil, err
	}
	var err error
	if d.log, err = os.Create(dir + ".log"); err != nil {
		return nil, err
	}
	return d, nil
}

// pickPorts gives the daemon two loopback ports that were free a moment ago, and not the same
// one: both listeners are held until both ports are known.
func (d *daemon) pickPorts() error {
	addrs, err := freeAddrs(2)
	if err != nil {
		return err
	}
	d.natsAddr, d.httpAddr = addrs[0], addrs[1]
	return nil
}

func (d *daemon) url() string { return "nats://" + d.natsAddr }
func (d *daemon) pid() int    { return d.cmd.Process.Pid }

// startAttempts bounds how often start tries new ports after a port clash.
const startAttempts = 5

// start runs the process and waits until its /healthz answers 200. A port free when it was
// picked can be taken before the daemon listens on it (any process binding port 0, or connecting
// out, on a busy machine): the daemon then exits at start saying "address already in use", and
// start tries again on new ports. Clients connect through d.url(), which follows.
func (d *daemon) start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		logStart, err := d.log.Seek(0, io.SeekEnd)
		if err != nil {
			return err
		}
		err = d.startOnce(ctx)
		if err == nil || attempt == startAttempts || !d.portClash(logStart) {
			return err
		}
		if err := d.pickPorts(); err != nil {
			return err
		}
	}
}

// portClash reports whether what the daemon logged from offset on says a port was taken.
func (d *daemon) portClash(offset int64) bool {
	logged, err := os.ReadFile(d.log.Name())
	if err != nil || int64(len(logged)) < offset {
		return false
	}
	return bytes.Contains(logged[offset:], []byte("address already in use"))
}

// startOnce runs the process on the ports picked and waits until it serves.
func (d *daemon) startOnce(ctx context.Context) error {
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

// freeAddrs returns n loopback addresses with distinct ports, each free a moment ago.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are picked, so that no two are the same
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	addrs, err := freeAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}
