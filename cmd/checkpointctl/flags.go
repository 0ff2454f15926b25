package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// parseInterspersed parses flags wherever they stand among the arguments ("restore demo --version 3"),
// which the flag package alone does not: it stops at the first argument. "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parseQuietly(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseQuietly parses like fs.Parse, but a mistake prints no usage: the error (printed once, by
// main) ends with a hint to the command's help, instead of 30 to 60 lines of flags burying it.
// --help still prints the full usage.
func parseQuietly(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	help := "checkpointctl --help"
	if fs.Name() != "checkpointctl" {
		help = "checkpointctl " + fs.Name() + " --help"
	}
	return usageErr(fmt.Errorf("%w (usage: %s)", err, help))
}

// keyFlags are the flags naming a session's namespace and agent.
type keyFlags struct {
	namespace, agent string
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.namespace, "namespace", "default", "namespace (user or tenant) of the session")
	fs.StringVar(&k.namespace, "n", "default", "short for --namespace")
	fs.StringVar(&k.agent, "agent", "main", "agent of the session")
}

func (k *keyFlags) key(session string) checkpoint.Key {
	return checkpoint.Key{Namespace: k.namespace, Session: session, Agent: k.agent}
}

// outputFlag is -o: table (for people) or json (for scripts).
type outputFlag string

func (o *outputFlag) register(fs *flag.FlagSet) {
	*o = "table"
	fs.Var(o, "o", "output format: table or json")
}

func (o *outputFlag) String() string { return string(*o) }

func (o *outputFlag) Set(s string) error {
	if s != "table" && s != "json" {
		return fmt.Errorf("%q is not table or json", s)
	}
	*o = outputFlag(s)
	return nil
}

// versionFlag is an optional version number; unset means "not given".
type versionFlag struct {
	n   uint64
	set bool
}

func (v *versionFlag) String() string {
	if !v.set {
		return ""
	}
	return strconv.FormatUint(v.n, 10)
}

func (v *versionFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a version number", s)
	}
	v.n, v.set = n, true
	return nil
}

// newFlagSet returns a command's flag set with its usage line.
func newFlagSet(a *App, name, args, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.Stderr)
	// Usage runs only when asked for (--help, or help COMMAND: parseQuietly prints no usage for a
	// mistake), and so writes to stdout, where it can be paged: checkpointctl restore --help | less.
	fs.Usage = func() {
		fmt.Fprintf(a.Stdout, "Usage: checkpointctl %s %s\n\n%s\n\nFlags:\n", name, args, about)
		printDefaults(a.Stdout, fs)
		fmt.Fprint(a.Stdout, "\n"+exitCodesHelp)
	}
	if a.onFlagSet != nil {
		a.onFlagSet(fs)
	}
	return fs
}

// printDefaults prints fs's flags to w, leaving fs's output as it was.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	saved := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(saved)
}

// flagSet tells whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func wantArgs(name string, got []string, n int, what string) error {
	if len(got) != n {
		return usageErr(fmt.Errorf("%s takes %s, got %d argument(s)", name, what, len(got)))
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// orEmpty makes a nil list print as [] in JSON output, not null.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

// printable quotes an id that would garble a table (white space, control characters).
func printable(s string) string {
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// size formats a byte count for people.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func shortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
