// Command checkpointctl is the operator's tool for checkpointd: save, list, inspect, restore and move
// conversation checkpoints. It talks to the daemon only through the public Go client (checkpoint/).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// Exit codes: part of the interface scripts rely on; documented in the help text.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitConflict    = 4
	exitInvalid     = 5
	exitUnavailable = 6
	exitCorrupt     = 7
)

const exitCodesHelp = `Exit codes:
  0  success
  1  any other error
  2  usage: unknown command, bad flag or argument
  3  not found: no such session or version
  4  conflict: --expect-version is not the session's head, another owner holds the session's
     lease, the lease epoch was fenced off, or the session moved to another deployment
  5  refused input: the conversation is invalid, too large, or of an unknown format
  6  unavailable: NATS unreachable, no checkpointd answering, busy, or timed out (retry later)
  7  corrupt: restored bytes do not match the hash recorded at save time, or a bundle is
     corrupt, truncated or of an unknown version
`

// App carries what every command shares: the streams and the connection settings.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Server         string
	Creds          string
	TLS            tlsFlags // --tls-ca, --tls-cert, --tls-key (tls.go)
	Nkey           string   // file holding an nkey seed (SU...)
	Timeout        time.Duration
	// StdoutIsTerminal adds a final newline to raw output meant for a person.
	StdoutIsTerminal bool
	// onFlagSet, when set, is given each command's flag set as it is made: how completion learns
	// every command's flags from the commands themselves.
	onFlagSet func(*flag.FlagSet)
}

// command is one subcommand; each lives in its own file.
type command struct {
	synopsis string
	run      func(ctx context.Context, a *App, args []string) error
}

var commands = map[string]command{
	"put":     {"save a conversation (a JSON array of messages) as the next version of a session", runPut},
	"restore": {"write a version of a session (default: the head), or a view of it, to stdout", runRestore},
	"list":    {"list sessions and their head versions", runList},
	"history": {"list every version of a session", runHistory},
	"show":    {"show one version's record and message counts", runShow},
	"diff":    {"compare two versions message by message", runDiff},
	"fork":    {"start a new session from a version of another", runFork},
	"prune":   {"remove old versions by a retention policy (the head is always kept)", runPrune},
	"lease":   {"acquire, renew, release or show a session's lease (who may write it)", runLease},
	"delete":  {"remove a session: every version and every stored message", runDelete},
	"migrate": {"move sessions to another deployment, verified, resumable; the source then refuses writes", runMigrate},
	"export":  {"write sessions to a portable bundle file", runExport},
	"import":  {"import a bundle file, verified whole before anything is written", runImport},
	"du":      {"storage per session and namespace: versions kept, head size, bytes stored", runDu},
	"watch":   {"follow new versions live, one line (or JSON object) per version", runWatch},
	"stats":   {"turns, tool calls, tokens, cost and context room, rebuilt from a version's messages", runStats},
	"version": {"print checkpointctl's version, commit, Go, protocol and storage format versions", runVersion},
	// "help" is answered in Run (it lists this map, which cannot refer to itself); listed here for usage.
	"help": {"show the usage of checkpointctl or of one command: help [command]", nil},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, StdoutIsTerminal: isTerminal(os.Stdout)}
	err := a.Run(ctx, os.Args[1:])
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "checkpointctl:", err)
	}
	os.Exit(exitCode(err))
}

// Run parses the global flags and runs one command.
func (a *App) Run(ctx context.Context, args []string) error {
	fs := a.globalFlags()
	if err := parseQuietly(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		a.usage(fs)
		return usageErr(errors.New("no command given"))
	}
	name := fs.Arg(0)
	if name == "help" {
		return a.help(fs, fs.Args()[1:])
	}
	cmd, ok := commands[name]
	if !ok {
		return usageErr(fmt.Errorf("unknown command %q (want one of: %s)", name, strings.Join(commandNames(), ", ")))
	}
	return cmd.run(ctx, a, fs.Args()[1:])
}

// globalFlags is the flag set of the flags before the command, bound to a's settings.
func (a *App) globalFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("checkpointctl", flag.ContinueOnError)
	fs.SetOutput(a.Stderr)
	fs.StringVar(&a.Server, "server", defaultServer(), "NATS URL of the checkpointd deployment, e.g. nats://user:password@host:4222 (env CHECKPOINTCTL_SERVER or NATS_URL, which keep a password off the command line)")
	fs.StringVar(&a.Creds, "creds", "", "NATS credentials file")
	fs.StringVar(&a.Nkey, "nkey", "", "file holding the nkey seed to log in with (a --tenants entry's \"nkey\" is its public key)")
	fs.DurationVar(&a.Timeout, "timeout", 30*time.Second, "how long to wait for checkpointd")
	a.TLS.register(fs)
	fs.Usage = func() { a.usageTo(a.Stdout, fs) } // asked for (--help): parseQuietly
	return fs
}

func (a *App) usage(fs *flag.FlagSet) { a.usageTo(a.Stderr, fs) }

func (a *App) usageTo(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `checkpointctl: save, list, inspect, restore and move agent conversation checkpoints.

Usage: checkpointctl [global flags] <command> [arguments] [flags]

Commands:
`)
	for _, name := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].synopsis)
	}
	fmt.Fprint(w, "\nGlobal flags:\n")
	printDefaults(w, fs)
	fmt.Fprint(w, `
Run 'checkpointctl <command> --help' for a command's arguments and flags.
Flags may follow the arguments: checkpointctl restore demo --version 3

Example (the daemon running: go run ./cmd/checkpointd):
  checkpointctl put demo testdata/corpus/pi_before_compaction.json
  checkpointctl list
  checkpointctl history demo -o json
  checkpointctl restore demo --version 1 > conversation.json

`+exitCodesHelp)
}

// help prints the global usage, or a command's own (what "<command> --help" prints).
func (a *App) help(fs *flag.FlagSet, args []string) error {
	switch {
	case len(args) == 0:
		fs.SetOutput(a.Stdout)
		a.usageTo(a.Stdout, fs)
		return nil
	case len(args) > 1:
		return usageErr(fmt.Errorf("help takes at most one command, got %d arguments", len(args)))
	}
	cmd, ok := commands[args[0]]
	if !ok || cmd.run == nil {
		return usageErr(fmt.Errorf("unknown command %q (want one of: %s)", args[0], strings.Join(commandNames(), ", ")))
	}
	// A command prints its usage on --help, to stdout (newFlagSet).
	return cmd.run(context.Background(), a, []string{"--help"})
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// connect opens a client with the global settings (and a command's own extra nats options).
func (a *App) connect(extra ...nats.Option) (*checkpoint.Client, error) {
	var opts []nats.Option
	opts = append(opts, nats.Timeout(min(a.Timeout, dialTimeout)))
	opts = append(opts, extra...)
	if a.Creds != "" {
		opts = append(opts, nats.UserCredentials(a.Creds))
	}
	tlsOpts, err := a.TLS.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, tlsOpts...)
	if a.Nkey != "" {
		o, err := nats.NkeyOptionFromSeed(a.Nkey)
		if err != nil {
			return nil, usageErr(fmt.Errorf("--nkey %s: %w", a.Nkey, err))
		}
		opts = append(opts, o)
	}
	c, err := checkpoint.Connect(a.Server, opts, checkpoint.WithTimeout(a.Timeout))
	if err != nil {
		return nil, unreachableHint(a.Server, err)
	}
	return c, nil
}

func defaultServer() string {
	for _, env := range []string{"CHECKPOINTCTL_SERVER", "NATS_URL"} {
		if v := os.Getenv(env); v != "" {
			return v
		}
	}
	return "nats://127.0.0.1:4222"
}

// usageError marks mistakes in the command line (exit code 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usageErr(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err}
}

// inputError marks input refused before anything was sent (exit code 5).
type inputError struct{ error }

func (e inputError) Unwrap() error { return e.error }

func exitCode(err error) int {
	var ue usageError
	var ie inputError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ie):
		return exitInvalid
	case errors.Is(err, checkpoint.ErrNotFound):
		return exitNotFound
	case errors.Is(err, checkpoint.ErrConflict), errors.Is(err, checkpoint.ErrLeased),
		errors.Is(err, checkpoint.ErrFenced), errors.Is(err, checkpoint.ErrMoved):
		return exitConflict
	case errors.Is(err, checkpoint.ErrInvalid), errors.Is(err, checkpoint.ErrTooLarge),
		errors.Is(err, checkpoint.ErrUnknownFormat), errors.Is(err, checkpoint.ErrBadRequest):
		return exitInvalid
	case errors.Is(err, checkpoint.ErrUnavailable), errors.Is(err, checkpoint.ErrBusy):
		return exitUnavailable
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrBadBundle):
		return exitCorrupt
	}
	return exitError
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
