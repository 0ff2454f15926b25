package embedded

// Tenancy: who may log in to the embedded NATS server, and what each login reaches.
//
// A namespace is a tenant, and NATS accounts isolate it (docs/security.md):
//
//	CHECKPOINTD   the daemon alone. Holds every stream, bucket and consumer (JetStream enabled) and
//	              EXPORTS, per namespace, the subjects a client of that namespace needs.
//	T_<ns>        one account per namespace (<ns> encoded as in docs/protocol.md §2), holding that
//	              namespace's users. It IMPORTS its own namespace's subjects and nothing else, and has
//	              no JetStream of its own.
//	ADMIN         the operators: imports every namespace's subjects and cp.admin.>, never $JS.API.>.
//
// A request that crosses a service import gets a reply subject the server makes up (_R_...), which
// leads back to the requester only: the daemon never publishes where a client chose. Nothing a
// client publishes reaches CHECKPOINTD except through those imports.
//
// The configuration is written once, in nats-server's configuration syntax (NATSConfig): the
// embedded server loads that text, and `checkpointd --print-nats-config` prints the same text for
// the operators of external clusters, so what is tested is what they run.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Accounts and the daemon's own user.
const (
	DaemonAccount = "CHECKPOINTD" // holds the daemon's streams and buckets; only the daemon logs in
	AdminAccount  = "ADMIN"       // operators: every namespace
	DaemonUser    = "checkpointd" // the daemon's user name in DaemonAccount (reserved in tenants files)
	// DaemonPasswordVar is the environment variable the printed configuration takes the daemon's
	// password from, so that it is never written into a file by checkpointd.
	DaemonPasswordVar = "CHECKPOINTD_NATS_PASSWORD"
)

// TenantAccount is the NATS account of a namespace's users.
func TenantAccount(namespace string) string { return "T_" + wire.EncodeID(namespace) }

// Tenants is a parsed and validated tenants file (checkpointd --tenants FILE):
//
//	{"admins":  [{"user": "ops", "password": "…"}, {"nkey": "U…"}],
//	 "tenants": [{"namespace": "alice", "user": "alice", "password": "…"},
//	             {"namespace": "bob", "nkey": "U…"}]}
//
// Each entry logs in with a user and password, or with an nkey (the user's public key; the
// client keeps the seed). A namespace may have several entries.
type Tenants struct {
	Admins  []Login  `json:"admins"`
	Tenants []Tenant `json:"tenants"`
}

// Login is one set of credentials: User and Password, or Nkey. A password beginning with "$2"
// is taken as a bcrypt hash, as nats-server does (nats server passwd makes one).
type Login struct {
	User     string `json:"user,omitempty"`
	Password Secret `json:"password,omitempty"`
	Nkey     string `json:"nkey,omitempty"`
}

// Secret is a password. Printed, logged or encoded as JSON it shows as [redacted], so a mistake in
// a log line cannot leak it; string(s) is the password.
type Secret string

const redacted = "[redacted]"

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return `"` + redacted + `"` }
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (s Secret) LogValue() slog.Value       { return slog.StringValue(redacted) }

// String names the login without its password, so that printing or logging one leaks nothing.
func (l Login) String() string {
	if l.Nkey != "" {
		return "nkey " + l.Nkey
	}
	return "user " + l.User
}

// Tenant is a login confined to one namespace.
type Tenant struct {
	Namespace string `json:"namespace"`
	Login
}

// String is the tenant without its password.
func (t Tenant) String() string { return fmt.Sprintf("namespace %q, %s", t.Namespace, t.Login) }

// TenantsFileError says what is wrong with a tenants file, and where. It never quotes a password.
type TenantsFileError struct {
	File  string // the file's path
	Entry string // "tenants[2] (namespace \"bob\")", "admins[0]", or "" for the file as a whole
	Err   error
}

func (e *TenantsFileError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("tenants file %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("tenants file %s: %s: %v", e.File, e.Entry, e.Err)
}

func (e *TenantsFileError) Unwrap() error { return e.Err }

// LoadTenants reads and validates a tenants file.
func LoadTenants(path string) (*Tenants, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &TenantsFileError{File: path, Err: err}
	}
	return ParseTenants(data, path)
}

// ParseTenants decodes and validates a tenants file's bytes; name is used in errors. Unknown
// fields are refused, so a misspelt "pasword" is an error rather than a user without one.
func ParseTenants(data []byte, name string) (*Tenants, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Tenants
	if err := dec.Decode(&t); err != nil {
		return nil, &TenantsFileError{File: name, Err: fmt.Errorf("not a tenants file (JSON {\"admins\": [...], \"tenants\": [...]}): %w", jsonProblem(err))}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &TenantsFileError{File: name, Err: errors.New("unexpected data after the JSON object")}
	}
	if err := t.validate(); err != nil {
		err.File = name
		return nil, err
	}
	return &t, nil
}

// jsonProblem keeps a JSON decoding error's position and kind but not the bytes it quotes: a syntax
// error inside a password would otherwise put part of it in a log.
func jsonProblem(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("JSON syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q: expected %s, got %s (byte %d)", te.Field, te.Type, te.Value, te.Offset)
	}
	return err // unknown field "x", unexpected EOF: no value quoted
}

// validate checks every entry, naming the first bad one.
func (t *Tenants) validate() *TenantsFileError {
	if len(t.Admins)+len(t.Tenants) == 0 {
		return &TenantsFileError{Err: errors.New("no admins and no tenants: nobody could connect")}
	}
	seen := map[string]string{DaemonUser: "checkpointd itself"} // user name or nkey → the entry that has it
	check := func(entry string, l Login) error {
		if err := l.validate(); err != nil {
			return err
		}
		id, what := l.User, "user "+l.User
		if l.Nkey != "" {
			id, what = l.Nkey, "nkey"
		}
		if other, dup := seen[id]; dup {
			return fmt.Errorf("%s is also used by %s (a login belongs to one namespace)", what, other)
		}
		seen[id] = entry
		return nil
	}
	for i, a := range t.Admins {
		entry := fmt.Sprintf("admins[%d]", i)
		if err := check(entry, a); err != nil {
			return &TenantsFileError{Entry: entry, Err: err}
		}
	}
	for i, tn := range t.Tenants {
		entry := fmt.Sprintf("tenants[%d] (namespace %q)", i, tn.Namespace)
		if err := wire.ValidateID(tn.Namespace); err != nil {
			return &TenantsFileError{Entry: fmt.Sprintf("tenants[%d]", i), Err: fmt.Errorf("namespace: %w", err)}
		}
		if err := check(entry, tn.Login); err != nil {
			return &TenantsFileError{Entry: entry, Err: err}
		}
	}
	return nil
}

func (l Login) validate() error {
	switch {
	case l.Nkey != "" && (l.User != "" || l.Password != ""):
		return errors.New("give either user and password, or nkey, not both")
	case l.Nkey != "":
		if !nkeys.IsValidPublicUserKey(l.Nkey) {
			// Not quoted: it might be the seed, pasted by mistake.
			return errors.New("nkey: not a user's public nkey (56 characters starting with U; the seed, starting with SU, stays with the client)")
		}
	case l.User == "" && l.Password == "":
		return errors.New("needs user and password, or nkey")
	case l.User == "":
		return errors.New("user: missing")
	case l.Password == "":
		return fmt.Errorf("user %s: password missing", l.User)
	case l.User == DaemonUser:
		return fmt.Errorf("user %s: reserved for the daemon itself", DaemonUser)
	case strings.ContainsFunc(l.User, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return errors.New("user: contains control characters")
	}
	return nil
}

// Namespaces returns the namespaces of the tenants, each once, in the order they first appear.
func (t *Tenants) Namespaces() []string {
	var out []string
	seen := map[string]bool{}
	for _, tn := range t.Tenants {
		if !seen[tn.Namespace] {
			seen[tn.Namespace] = true
			out = append(out, tn.Namespace)
		}
	}
	return out
}

// grant is one subject the daemon's account exports and another account imports.
type grant struct {
	service bool // a service (requests, answered through the import) or a stream (messages in)
	subject string
}

// namespaceGrants are the subjects a client of one namespace (ns, encoded) needs, and nothing more:
// its requests, its saves (as requests to the daemon, and on the ingest stream, the fallback) and chunks (JetStream publishes answered by the stream's PubAck through
// the import), the results of its saves (stored ones, of saves off the ingest stream, and live ones,
// of saves sent as requests), and direct gets of its stored results (the fallback of
// docs/protocol.md §4.3).
func namespaceGrants(ns string) []grant {
	return []grant{
		{true, wire.NamespaceSubjects(wire.APISubjectPrefix, ns)},
		{true, wire.NamespaceSubjects(wire.SaveSubjectPrefix, ns)},
		{true, wire.NamespaceSubjects(wire.IngestSubjectPrefix, ns)},
		{true, wire.NamespaceSubjects(wire.ChunkSubjectPrefix, ns)},
		{true, wire.ResultDirectGetPrefix + wire.NamespaceSubjects(wire.ResultSubjectPrefix, ns)},
		{false, wire.NamespaceSubjects(wire.ResultSubjectPrefix, ns)},
		{false, wire.NamespaceSubjects(wire.SavedSubjectPrefix, ns)},
	}
}

// adminGrants reach every namespace and cp.admin.>. Still no $JS.API beyond direct gets of results:
// an operator's tools go through the daemon like everyone's.
var adminGrants = []grant{
	{true, wire.EverySubject(wire.AdminSubjectPrefix)},
	{true, wire.EverySubject(wire.APISubjectPrefix)},
	{true, wire.EverySubject(wire.SaveSubjectPrefix)},
	{true, wire.EverySubject(wire.IngestSubjectPrefix)},
	{true, wire.EverySubject(wire.ChunkSubjectPrefix)},
	{true, wire.EverySubject(wire.ResultDirectGetPrefix)},
	{false, wire.EverySubject(wire.ResultSubjectPrefix)},
	{false, wire.EverySubject(wire.SavedSubjectPrefix)},
}

// NATSConfig returns the accounts block that isolates the tenants, in nats-server configuration
// syntax. daemonPassword is the daemon's password in DaemonAccount; empty, the configuration reads
// it from the environment variable DaemonPasswordVar when the server loads it (what
// --print-nats-config prints).
func (t *Tenants) NATSConfig(daemonPassword string) string {
	var b strings.Builder
	pw := "$" + DaemonPasswordVar
	if daemonPassword != "" {
		pw = confString(daemonPassword)
	}
	b.WriteString("accounts {\n")
	// The daemon's account: JetStream, and the exports, each to the one account that imports it.
	fmt.Fprintf(&b, "  %s {\n    jetstream: enabled\n    users: [\n      {user: %s, password: %s}\n    ]\n    exports: [\n",
		DaemonAccount, confString(DaemonUser), pw)
	writeExports(&b, adminGrants, AdminAccount)
	for _, ns := range t.Namespaces() {
		writeExports(&b, namespaceGrants(wire.EncodeID(ns)), TenantAccount(ns))
	}
	b.WriteString("    ]\n  }\n")
	// The operators.
	writeImporter(&b, AdminAccount, t.Admins, adminGrants)
	// One account per namespace.
	for _, ns := range t.Namespaces() {
		var logins []Login
		for _, tn := range t.Tenants {
			if tn.Namespace == ns {
				logins = append(logins, tn.Login)
			}
		}
		fmt.Fprintf(&b, "  # namespace %s\n", confComment(ns))
		writeImporter(&b, TenantAccount(ns), logins, namespaceGrants(wire.EncodeID(ns)))
	}
	b.WriteString("}\n")
	return b.String()
}

func writeExports(b *strings.Builder, grants []grant, to string) {
	for _, g := range grants {
		kind := "stream"
		if g.service {
			kind = "service"
		}
		fmt.Fprintf(b, "      {%s: %s, accounts: [%s]}\n", kind, confString(g.subject), confString(to))
	}
}

// writeImporter writes an account with its users and its imports from DaemonAccount.
func writeImporter(b *strings.Builder, account string, logins []Login, grants []grant) {
	fmt.Fprintf(b, "  %s {\n    users: [\n", confString(account))
	for _, l := range logins {
		if l.Nkey != "" {
			fmt.Fprintf(b, "      {nkey: %s}\n", confString(l.Nkey))
		} else {
			fmt.Fprintf(b, "      {user: %s, password: %s}\n", confString(l.User), confString(string(l.Password)))
		}
	}
	b.WriteString("    ]\n    imports: [\n")
	for _, g := range grants {
		kind := "stream"
		if g.service {
			kind = "service"
		}
		fmt.Fprintf(b, "      {%s: {account: %s, subject: %s}}\n", kind, DaemonAccount, confString(g.subject))
	}
	b.WriteString("    ]\n  }\n")
}

// confString quotes s for nats-server's configuration syntax: inside double quotes only \" and \\
// are special, and \xXX stands for any byte, so every byte outside printable ASCII is written that
// way. The result reads back as exactly s, whatever s holds (a password with quotes, braces, $ or
// newlines included).
func confString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// confComment makes s safe inside a # comment (one line).
func confComment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// applyTenants sets the accounts and users of opts from t, by loading t's NATSConfig the way
// nats-server loads a configuration file. The daemon logs in to DaemonAccount as DaemonUser with
// daemonPassword. Anonymous connections are refused: users are configured and no_auth_user is not.
func applyTenants(opts *server.Options, t *Tenants, daemonPassword string) error {
	if daemonPassword == "" {
		return errors.New("tenants: the daemon's password is empty")
	}
	var parsed server.Options
	if err := parsed.ProcessConfigString(t.NATSConfig(daemonPassword)); err != nil {
		// A bug in NATSConfig, not in the file (validate ran). The text may hold passwords.
		return fmt.Errorf("tenants: the generated accounts configuration does not load: %s", t.redact(err.Error(), daemonPassword))
	}
	opts.Accounts, opts.Users, opts.Nkeys = parsed.Accounts, parsed.Users, parsed.Nkeys
	opts.NoAuthUser = ""
	return nil
}

// redact removes every password of t (and extra) from s.
func (t *Tenants) redact(s string, extra ...string) string {
	pws := extra
	for _, a := range t.Admins {
		pws = append(pws, string(a.Password))
	}
	for _, tn := range t.Tenants {
		pws = append(pws, string(tn.Password))
	}
	for _, p := range pws {
		if p != "" {
			s = strings.ReplaceAll(s, p, "[redacted]")
		}
	}
	return s
}

// NewDaemonPassword returns a random password for the daemon's own login to the embedded server.
// It lives in memory only: it is never logged or written to disk. It is "cp" and 64 hex digits:
// nats-server parses the value of a configuration variable ($CHECKPOINTD_NATS_PASSWORD) as a
// configuration value, so one that starts with a digit or a '-' would be read as a number and
// refused (one run in about six of TestTenancy_PrintedConfigIsolatesAnExternalServer failed so).
func NewDaemonPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "cp" + hex.EncodeToString(b), nil
}

// ReloadServer applies cfg (a changed tenants file) to a running embedded server without a
// restart: clients whose login is gone are disconnected, new logins work at once, and every stream
// stays where it is. On error nothing changed.
//
// The options are applied twice. nats-server (2.15) subscribes the service imports of an account
// that a reload adds only when a later reload finds the account already there: after one reload a
// new tenant could log in, but every request of its would find no responders. The second pass
// changes nothing else.
func ReloadServer(s *server.Server, cfg ServerConfig) error {
	for range 2 {
		opts, err := serverOptions(cfg)
		if err != nil {
			return err
		}
		if err := s.ReloadOptions(opts); err != nil {
			return err
		}
	}
	return nil
}

// StoreAccountMismatchError means the data directory holds checkpoints kept in the other account:
// stored while running without --tenants (in the global account) and now started with it (the
// daemon's account), or the reverse. JetStream keeps each account's streams apart, so the daemon
// would start empty; it refuses instead.
type StoreAccountMismatchError struct {
	DataDir   string
	Found     string // the account holding the checkpoints
	Want      string // the account this configuration keeps them in
	WithFlags string // "with --tenants" or "without --tenants"
}

func (e *StoreAccountMismatchError) Error() string {
	return fmt.Sprintf("data dir %s holds checkpoints stored %s (NATS account %s), but this configuration keeps them in account %s: "+
		"move them with `checkpointctl export -A` and `import` (or, stopped and unencrypted, rename %s to %s), or use another --data-dir",
		e.DataDir, e.WithFlags, e.Found, e.Want,
		filepath.Join(e.DataDir, "jetstream", e.Found), filepath.Join(e.DataDir, "jetstream", e.Want))
}

// checkStoreAccount refuses to start on a data directory whose checkpoints live in the other
// account (StoreAccountMismatchError). A fresh directory, or one already in the right account, passes.
func checkStoreAccount(dataDir string, tenants bool) error {
	global, own := server.DEFAULT_GLOBAL_ACCOUNT, DaemonAccount
	want, other, how := global, own, "with --tenants"
	if tenants {
		want, other, how = own, global, "without --tenants"
	}
	has := func(account string) bool {
		_, err := os.Stat(filepath.Join(dataDir, "jetstream", account, "streams", wire.StreamIngest))
		return err == nil
	}
	if has(other) && !has(want) {
		return &StoreAccountMismatchError{DataDir: dataDir, Found: other, Want: want, WithFlags: how}
	}
	return nil
}
