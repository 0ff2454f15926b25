package layering

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/checkpointd/checkpointd"

// Import paths the rules below name; nats is every package of the NATS client and server.
const (
	nats       = "github.com/nats-io/"
	natsServer = "github.com/nats-io/nats-server/"
	wire       = module + "/internal/wire"
)

// The domain: the conversation model and the storage engine with its in-memory log and its
// suites, the mechanism for large bodies, its buffers' pool, and format 2's domain. None of them may reach NATS or
// the protocol package, so that a protocol change is never a storage change and the domain's
// rules are tested without a NATS server (the tests of these packages are held to it too).
var domain = []string{
	module + "/internal/bufpool",
	module + "/internal/codec",
	module + "/internal/engine",
	module + "/internal/engine/memlog",
	module + "/internal/engine/logtest",
	module + "/internal/engine/enginetest",
	module + "/internal/pieces",
	module + "/internal/snapshot",
}

// The public SDK and the CLI built on it speak only the protocol: the daemon's engine, storage
// and assembly, and the NATS server, stay out of every agent process that imports it.
var sdk = []string{
	module + "/checkpoint",
	module + "/checkpoint/conv",
	module + "/checkpoint/importer",
	module + "/cmd/checkpointctl",
}

var daemonOnly = []string{
	module + "/internal/engine",
	module + "/internal/logstore",
	module + "/internal/sealing",
	module + "/internal/snapshot",
	module + "/internal/transfer",
	module + "/internal/upgrade",
	natsServer,
}

// The parts of internal/transfer, each allowed only the parts beneath it (README.md,
// Architecture): edge and admission at the bottom, then housekeeping, then ingest and service,
// which know nothing of each other; embedded stands apart.
var transferParts = map[string][]string{
	"edge":         nil,
	"admission":    nil,
	"embedded":     nil,
	"housekeeping": {"edge", "admission"},
	"ingest":       {"edge", "admission", "housekeeping"},
	"service":      {"edge", "admission", "housekeeping"},
}

// deps returns what each listed package depends on, directly or not, as `go list -deps` has it;
// with test, what each package's test binary depends on (its tests and theirs included).
func deps(t *testing.T, test bool, pkgs ...string) map[string][]string {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}|{{join .Deps \",\"}}"}
	if test {
		args = append(args, "-test")
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	got := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		path, list, _ := strings.Cut(strings.TrimSpace(line), "|")
		if test {
			// the test binary ("<pkg>.test") depends on everything the package's tests import
			var ok bool
			if path, ok = strings.CutSuffix(path, ".test"); !ok {
				continue
			}
		}
		got[path] = strings.Split(list, ",")
	}
	for _, p := range pkgs {
		if _, ok := got[p]; !ok && !test {
			t.Fatalf("go list said nothing of %s", p)
		}
	}
	return got
}

// forbidden returns the dependencies of pkg that are one of bad or below one of them.
func forbidden(pkgDeps []string, bad []string) []string {
	var out []string
	for _, d := range pkgDeps {
		if slices.ContainsFunc(bad, func(b string) bool { return d == b || strings.HasPrefix(d, strings.TrimSuffix(b, "/")+"/") }) {
			out = append(out, d)
		}
	}
	return out
}

func TestDomain_KnowsNothingOfNATSOrTheProtocol(t *testing.T) {
	for _, test := range []bool{false, true} {
		for pkg, d := range deps(t, test, domain...) {
			if bad := forbidden(d, []string{nats, wire}); len(bad) > 0 {
				what := pkg
				if test {
					what = "the tests of " + pkg
				}
				t.Errorf("%s must not depend on NATS or internal/wire, but reaches %v", what, bad)
			}
		}
	}
}

func TestSDK_KnowsNothingOfTheDaemon(t *testing.T) {
	for pkg, d := range deps(t, false, sdk...) {
		if bad := forbidden(d, daemonOnly); len(bad) > 0 {
			t.Errorf("%s must depend only on the protocol, but reaches %v", pkg, bad)
		}
	}
}

func TestTransfer_PartsImportOnlyThePartsBeneathThem(t *testing.T) {
	var pkgs []string
	for part := range transferParts {
		pkgs = append(pkgs, module+"/internal/transfer/"+part)
	}
	for pkg, d := range deps(t, false, pkgs...) {
		part := strings.TrimPrefix(pkg, module+"/internal/transfer/")
		for _, dep := range forbidden(d, []string{module + "/internal/transfer"}) {
			other := strings.TrimPrefix(dep, module+"/internal/transfer/")
			if !slices.Contains(transferParts[part], other) {
				t.Errorf("internal/transfer/%s must not depend on internal/transfer/%s (README.md, Architecture)", part, other)
			}
		}
	}
}
