package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// Crash clusters.
//
// Shutting an embedded server down is graceful: before it stops, the streams it leads hand their
// leadership to another node, so a new leader is there within milliseconds. A machine or process
// that dies hands nothing over: the others notice the silence only when their Raft election timer
// runs out (4 to 9 s in nats-server), and meanwhile every request sent to the dead leader is simply
// never answered. To test that, StartCrashCluster runs each node as a child process (this test
// binary, run again) and Kill sends it SIGKILL.

// nodeEnv carries a child's configuration; a test binary that finds it set is a node, not a test.
const nodeEnv = "CHECKPOINTD_TESTENV_NODE"

// RunNodeIfChild makes the test binary serve as a crash-cluster node when it was started as one:
// call it first in TestMain of every package that uses StartCrashCluster. It returns at once
// otherwise. A node runs until it is killed or its parent goes away (its stdin closes).
func RunNodeIfChild() {
	spec := os.Getenv(nodeEnv)
	if spec == "" {
		return
	}
	var cfg embedded.ServerConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "testenv node: bad", nodeEnv, err)
		os.Exit(2)
	}
	s, err := embedded.StartServer(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv node:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv node: control listener:", err)
		os.Exit(2)
	}
	go func() { _ = http.Serve(ln, controlHandler(s)) }()
	fmt.Printf("ready %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent test is gone: so is the node
	os.Exit(0)
}

// query asks a node something only the server itself knows at once (a stream info request goes
// unanswered while its leader is dead).
type query struct {
	StreamLeader   string `json:"streamLeader,omitempty"`   // does it lead this stream?
	ConsumerStream string `json:"consumerStream,omitempty"` // does it lead this stream's consumer?
	Consumer       string `json:"consumer,omitempty"`
	MetaLive       int    `json:"metaLive,omitempty"` // is JetStream up, with this many nodes current?
	Meta           bool   `json:"meta,omitempty"`     // does it lead the meta group?
}

// answer evaluates q on s.
func (q query) answer(s *server.Server) bool {
	switch {
	case q.StreamLeader != "":
		return s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, q.StreamLeader)
	case q.Consumer != "":
		return s.JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, q.ConsumerStream, q.Consumer)
	case q.MetaLive > 0:
		return metaReady(s, q.MetaLive)
	case q.Meta:
		return s.JetStreamIsLeader()
	}
	return false
}

// metaReady reports whether s knows the meta leader and, if it is the leader, whether live nodes
// (itself included) are current peers: R3 placement fails until they are.
func metaReady(s *server.Server, live int) bool {
	info, err := s.Jsz(nil)
	if err != nil || info.Meta == nil || info.Meta.Leader == "" {
		return false
	}
	if info.Meta.Leader != s.Name() {
		return true
	}
	current := 0
	for _, p := range info.Meta.Replicas {
		if p.Current && !p.Offline {
			current++
		}
	}
	return current >= live-1
}

// controlHandler answers queries about s over HTTP: POST a query, read "true" or "false".
func controlHandler(s *server.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q query
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, q.answer(s))
	})
}

// startProcess starts node as a child process and waits until it serves.
func (c *Cluster) startProcess(node *Node, routes []string) error {
	spec, err := json.Marshal(embedded.ServerConfig{DataDir: node.Dir, Listen: node.Listen, Name: node.Name,
		ClusterName: "cp-test", ClusterListen: node.ClusterListen, Routes: routes})
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if addr, ok := strings.CutPrefix(line, "ready "); ok {
			node.proc, node.stdin, node.control = cmd, stdin, addr
			return nil
		}
		err = fmt.Errorf("node %s did not start (did TestMain call testenv.RunNodeIfChild?): %q", node.Name, line)
	case <-time.After(20 * time.Second):
		err = fmt.Errorf("node %s did not start within 20s", node.Name)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return err
}

// killProcess ends node's process at once, as a crash would.
func killProcess(node *Node) {
	_ = node.proc.Process.Kill() // SIGKILL
	_ = node.proc.Wait()
	_ = node.stdin.Close()
	node.proc, node.stdin, node.control = nil, nil, ""
}

// askProcess asks a node's process q; a node that does not answer answers false.
func askProcess(node *Node, q query) bool {
	body, _ := json.Marshal(q)
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Post("http://"+node.control, "application/json", strings.NewReader(string(body)))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b) == "true"
}

// Freeze stops node's process (SIGSTOP) without killing it, as a machine that hangs would: its
// connections stay open and nothing it was asked is answered. thaw resumes it (SIGCONT); it also
// runs when the test ends. node must run as a process (StartCrashCluster).
func (c *Cluster) Freeze(name string) (thaw func()) {
	c.t.Helper()
	node := c.Node(name)
	require.NotNil(c.t, node.proc, "node %s: a node that runs as a process (StartCrashCluster)", name)
	proc := node.proc.Process
	require.NoError(c.t, proc.Signal(syscall.SIGSTOP))
	// kill(2) returns before the process has stopped: on a loaded machine it can go on answering
	// for a while. Frozen means stopped, as /proc says (state T).
	require.Eventually(c.t, func() bool { return stopped(proc.Pid) }, 10*time.Second, time.Millisecond,
		"node %s never stopped after SIGSTOP", name)
	var once sync.Once
	thaw = func() { once.Do(func() { _ = proc.Signal(syscall.SIGCONT) }) }
	c.t.Cleanup(thaw)
	return thaw
}

// stopped reports whether process pid is stopped by a signal: the state in /proc/<pid>/stat,
// after the command name in parentheses, is T.
func stopped(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'T'
}
