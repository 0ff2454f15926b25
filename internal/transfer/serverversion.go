package transfer

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The oldest nats-server releases checkpointd runs against (docs/protocol.md, "Server requirements").
//
// In a cluster, 2.11.0: every save commits by compare-and-swap on a KV key (Update/Create, i.e.
// Nats-Expected-Last-Subject-Sequence), and only from 2.11.0 on does a replicated stream serialise
// those. Before it, two writes expecting the same revision can both be accepted, and a new leader
// may accept writes before applying its log, so replicas diverge: nats-server issue #4320 (partly
// fixed in 2.9.21 by #4319), pull requests #6194 ("ensure 'expected per subject' consistency"),
// #6485 ("Completeness/consistency after leader changes") and #6518, first released in
// v2.11.0-RC.1 and v2.11.0 and in no 2.10.x (checked with git tag --contains on nats-server's
// repository). Against Debian's 2.9.10 in a 3-node cluster two concurrent saves expecting the same
// head were both acknowledged (checkpointd issue 10).
//
// A single server applies each stream's writes one at a time, so there only the features matter:
// direct get (AllowDirect, $JS.API.DIRECT.GET.<stream>.<subject>), which every read uses, arrived in
// 2.9.0, and 2.9.10 (Debian 12's package) is the oldest release checkpointd is tested against
// (TestOldNATS_SingleServerWorks in cmd/checkpointd).
var (
	minClusteredServer = serverVersion{major: 2, minor: 11, patch: 0}
	minSingleServer    = serverVersion{major: 2, minor: 9, patch: 10}
)

// whyClusteredMinimum is the one-sentence reason given with a refusal in a cluster.
const whyClusteredMinimum = "older replicated streams can accept two compare-and-swap writes " +
	"(Nats-Expected-Last-Subject-Sequence) expecting the same revision, so two saves could both be " +
	"acknowledged as one version and replicas diverge (nats-server issues #4320, #6194, #6485)"

const whySingleMinimum = "direct get, which every read uses, arrived in 2.9.0, and 2.9.10 is the " +
	"oldest release checkpointd is tested against"

// serverVersion is a nats-server release number: major.minor.patch, with an optional pre-release
// part (2.11.0-RC.1), which sorts before the release itself.
type serverVersion struct {
	major, minor, patch int
	pre                 string
}

// parseServerVersion reads a version as nats-server reports it in its INFO ("2.11.0"), also with
// a "v" prefix, a pre-release ("-RC.1") or build metadata ("+abc", ignored).
func parseServerVersion(s string) (serverVersion, error) {
	var v serverVersion
	core, _, _ := strings.Cut(strings.TrimPrefix(s, "v"), "+")
	core, v.pre, _ = strings.Cut(core, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("version %q is not major.minor.patch", s)
	}
	for i, dst := range []*int{&v.major, &v.minor, &v.patch} {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 || parts[i] != strconv.Itoa(n) {
			return v, fmt.Errorf("version %q is not major.minor.patch", s)
		}
		*dst = n
	}
	return v, nil
}

// atLeast reports whether v is min or newer; a pre-release of min (2.11.0-RC.1) is older than min.
// min is always a release.
func (v serverVersion) atLeast(min serverVersion) bool {
	if v.major != min.major {
		return v.major > min.major
	}
	if v.minor != min.minor {
		return v.minor > min.minor
	}
	if v.patch != min.patch {
		return v.patch > min.patch
	}
	return v.pre == ""
}

func (v serverVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch) }

// ServerVersionError is checkpointd's refusal of a NATS server too old (or unreadable) for it.
type ServerVersionError struct {
	Server  string // which server: "the connected server n1 in cluster \"c1\"", "the server answering for stream X"
	Found   string // the version as the server reported it; "" if a stream's metadata named none
	Minimum string
	Why     string
	Err     error // set when Found could not be read as a version
}

func (e *ServerVersionError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("nats-server (%s): %v, so checkpointd cannot tell whether it is %s or newer, "+
			"which it needs: %s", e.Server, e.Err, e.Minimum, e.Why)
	case e.Found == "":
		return fmt.Sprintf("nats-server (%s) does not report its version in the stream's metadata, as every release "+
			"from 2.11.0 on does, so it is older than %s, the oldest checkpointd runs against: %s; upgrade the server(s) to %s or newer",
			e.Server, e.Minimum, e.Why, e.Minimum)
	}
	return fmt.Sprintf("nats-server %s (%s) is older than %s, the oldest checkpointd runs against: %s; "+
		"upgrade the server(s) to %s or newer", e.Found, e.Server, e.Minimum, e.Why, e.Minimum)
}

// checkServerVersion refuses a server whose version is below the minimum for a clustered or a
// single server.
func checkServerVersion(server, version string, clustered bool) error {
	min, why := minSingleServer, whySingleMinimum
	if clustered {
		min, why = minClusteredServer, whyClusteredMinimum
	}
	v, err := parseServerVersion(version)
	if err != nil || !v.atLeast(min) {
		return &ServerVersionError{Server: server, Found: version, Minimum: min.String(), Why: why, Err: err}
	}
	return nil
}

// checkConnectedServer checks the server nc is connected to, from the INFO it sent on connecting.
// A server with a cluster name runs JetStream clustered, whatever the replica counts. While nc is
// disconnected there is nothing to check: the serverGuard checks again on reconnecting.
func checkConnectedServer(nc *nats.Conn) error {
	version, cluster := nc.ConnectedServerVersion(), nc.ConnectedClusterName()
	if version == "" && !nc.IsConnected() {
		return nil
	}
	server := "the connected server " + nc.ConnectedServerName()
	if cluster != "" {
		server += fmt.Sprintf(" in cluster %q", cluster)
	}
	return checkServerVersion(server, version, cluster != "")
}

// checkReplicatedStreams checks, for each replicated stream, the version of the server that
// answered for it (the stream's leader, or the meta leader that created it): in a cluster of
// mixed versions the connected server may be new and a stream's leader old. From 2.11.0 on a
// server names its version in a stream's metadata (_nats.ver); older ones do not.
func checkReplicatedStreams(infos ...*jetstream.StreamInfo) error {
	for _, info := range infos {
		if info == nil || info.Config.Replicas <= 1 {
			continue
		}
		server := "the server answering for stream " + info.Config.Name
		version := info.Config.Metadata["_nats.ver"]
		if version == "" {
			return &ServerVersionError{Server: server, Minimum: minClusteredServer.String(), Why: whyClusteredMinimum}
		}
		if err := checkServerVersion(server, version, true); err != nil {
			return err
		}
	}
	return nil
}

// checkOpenedStreams runs checkReplicatedStreams over every stream the daemon writes that
// exists (CP_RESULTS only once a result was stored: edge.EnsureStreams; one made later is made
// with the daemon's replicas).
func checkOpenedStreams(st *edge.Streams, log jetstream.Stream) error {
	var infos []*jetstream.StreamInfo
	for _, s := range []jetstream.Stream{st.Ingest, st.Chunks, st.OpenedResults(), log} {
		if s != nil {
			infos = append(infos, s.CachedInfo())
		}
	}
	return checkReplicatedStreams(infos...)
}

// serverGuard checks the connected server once more when it starts (the daemon may have been
// reconnected while it opened), and again after every reconnect: NATS may reconnect the daemon to
// another server of the cluster, which may be older. On a refusal it calls refuse, once.
type serverGuard struct {
	nc      *nats.Conn
	events  chan nats.Status
	refused chan error
}

func watchServer(nc *nats.Conn, log *slog.Logger, refuse func()) *serverGuard {
	g := &serverGuard{nc: nc, events: nc.StatusChanged(nats.CONNECTED), refused: make(chan error, 1)}
	go func() {
		check := func() bool {
			err := checkConnectedServer(nc)
			if err != nil {
				log.Error("connected to a NATS server checkpointd must not run against: not ready, saves wait", "err", err)
				refuse()
				g.refused <- err
			}
			return err == nil
		}
		if !check() {
			return
		}
		for range g.events {
			if !check() {
				return
			}
		}
	}()
	return g
}

func (g *serverGuard) stop() { g.nc.RemoveStatusListener(g.events) }

// ServerRefused delivers the reason when the daemon has been reconnected to a NATS server too old
// for it (see checkServerVersion). The daemon then reports itself not ready; its owner should
// close it at once, so that no further save is committed there, and exit: saves not yet settled
// stay queued for a daemon on a safe server.
func (d *Daemon) ServerRefused() <-chan error { return d.guard.refused }
