package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runMigrate(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "migrate", "--from URL --to URL [SESSION | --all | -A]",
		"Copies sessions to another deployment: every version the source keeps (or only the head), each\n"+
			"verified against its hash on arrival, with its number, writer, reason and time. Then the source\n"+
			"refuses writes to them and says where they went (or, with --forget-source, deletes them).\n"+
			"Interrupted, run it again: it copies only what is missing. SESSION moves all its agents unless\n"+
			"--agent is given; --all moves every session of the namespace, -A every session there is.")
	var k keyFlags
	var sel selection
	k.register(fs)
	sel.register(fs)
	from := fs.String("from", "", "NATS URL of the source deployment (default: --server)")
	to := fs.String("to", "", "NATS URL of the destination deployment (required)")
	toCreds := fs.String("to-creds", "", "NATS credentials file for the destination (default: --creds)")
	var toTLS tlsFlags
	toTLS.registerDestination(fs)
	toNkey := fs.String("to-nkey", "", "nkey seed file for the destination (default: --nkey)")
	headOnly := fs.Bool("head-only", false, "copy only each session's head version")
	forget := fs.Bool("forget-source", false, "delete the sessions at the source instead of marking them moved")
	force := fs.Bool("force", false, "move sessions even while a process holds their lease at the source")
	parallel := fs.Int("parallel", 4, "sessions moved at once")
	var prog progressFlag
	var out outputFlag
	prog.register(fs)
	out.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *to == "" {
		return usageErr(errors.New("migrate needs --to, the destination's NATS URL"))
	}
	if *from != "" {
		a.Server = *from
	}
	if err := sel.check("migrate", pos); err != nil {
		return err
	}
	src, err := a.connect()
	if err != nil {
		return err
	}
	defer src.Close()
	dstApp := *a
	dstApp.Server = *to
	if *toCreds != "" || *toNkey != "" { // the source's login does not carry over to another deployment's
		dstApp.Creds, dstApp.Nkey = *toCreds, *toNkey
	}
	dstApp.TLS = toTLS.or(a.TLS)
	dst, err := dstApp.connect()
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	defer dst.Close()
	keys, err := sel.keys(ctx, src, k, fs, pos)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		// --all, -A: sessions that already moved elsewhere are not this source's to move.
		keys, err = notMovedElsewhere(ctx, src, keys, checkpoint.PublicURL(*to), a, sel.allNamespaces, k.namespace)
		if err != nil {
			return err
		}
	}
	if !*force {
		// Refuse before moving anything, rather than leave some agents of a session moved.
		for _, key := range keys {
			l, err := src.LeaseStatus(ctx, key)
			if err != nil {
				return err
			}
			if l.Held(time.Now()) {
				return &checkpoint.Error{Code: "leased", Owner: l.Owner, Epoch: l.Epoch, Index: -1, Offset: -1,
					Message: fmt.Sprintf("session %s is leased by %s (epoch %d): pause it first, or pass --force; nothing was moved", printable(key.String()), printable(l.Owner), l.Epoch)}
			}
		}
	}
	bar := newProgress(a, prog, "migrate", len(keys))
	opts := checkpoint.MigrateOptions{HeadOnly: *headOnly, Forget: *forget, Force: *force, MovedTo: *to}
	total, moved, err := migrateAll(ctx, src, dst, keys, opts, *parallel, bar)
	bar.done()
	if err != nil {
		return fmt.Errorf("%w (%d of %d sessions moved; run again to resume)", err, moved, len(keys))
	}
	if out == "json" {
		return writeJSON(a.Stdout, migrateReport{To: checkpoint.PublicURL(*to), Sessions: orEmpty(keys),
			Versions: total.Versions, Bytes: total.Bytes, AlreadyThere: total.Skipped})
	}
	_, err = fmt.Fprintf(a.Stdout, "migrated %d session(s) to %s: %d version(s) copied (%s), %d already there\n",
		len(keys), checkpoint.PublicURL(*to), total.Versions, size(total.Bytes), total.Skipped)
	return err
}

// migrateReport is migrate's -o json: the sessions moved and what was copied.
type migrateReport struct {
	To           string           `json:"to"` // without credentials
	Sessions     []checkpoint.Key `json:"sessions"`
	Versions     int              `json:"versions"`     // versions copied
	Bytes        int64            `json:"bytes"`        // conversation bytes copied
	AlreadyThere int              `json:"alreadyThere"` // versions the destination already had
}

// migrateAll moves keys with up to parallel sessions in flight, stopping at the first failure
// (sessions already under way finish). It returns what was copied and how many sessions moved.
func migrateAll(ctx context.Context, src, dst *checkpoint.Client, keys []checkpoint.Key, o checkpoint.MigrateOptions,
	parallel int, bar *progress) (checkpoint.MigrateProgress, int, error) {
	var (
		mu       sync.Mutex
		total    checkpoint.MigrateProgress
		inFlight = map[checkpoint.Key]checkpoint.MigrateProgress{}
		moved    int
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan checkpoint.Key)
	show := func() { // with mu held
		v, b := total.Versions, total.Bytes
		for _, p := range inFlight {
			v, b = v+p.Versions, b+p.Bytes
		}
		bar.update(moved, v, b)
	}
	for w := 0; w < max(parallel, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range next {
				o := o
				o.Progress = func(p checkpoint.MigrateProgress) {
					mu.Lock()
					inFlight[key] = p
					show()
					mu.Unlock()
				}
				p, err := src.Migrate(ctx, dst, key, o)
				mu.Lock()
				delete(inFlight, key)
				total.Versions += p.Versions
				total.Skipped += p.Skipped
				total.Bytes += p.Bytes
				if err == nil {
					moved++
				} else if firstErr == nil {
					firstErr = fmt.Errorf("session %s: %w", printable(key.String()), err)
				}
				show()
				mu.Unlock()
			}
		}()
	}
	for _, key := range keys {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		next <- key
	}
	close(next)
	wg.Wait()
	return total, moved, firstErr
}

// notMovedElsewhere drops the keys of sessions sealed as moved to somewhere other than to.
// Only -A asks the operator's listing of every namespace; --all lists its own namespace.
func notMovedElsewhere(ctx context.Context, c *checkpoint.Client, keys []checkpoint.Key, to string, a *App, allNamespaces bool, namespace string) ([]checkpoint.Key, error) {
	var heads []checkpoint.Session
	var err error
	if allNamespaces {
		heads, err = c.ListAll(ctx)
	} else {
		heads, err = c.List(ctx, namespace)
	}
	if err != nil {
		return nil, err
	}
	elsewhere := map[checkpoint.Key]string{}
	for _, h := range heads {
		if h.Moved != nil && h.Moved.To != to {
			elsewhere[h.Key] = h.Moved.To
		}
	}
	var out []checkpoint.Key
	for _, k := range keys {
		if dest, ok := elsewhere[k.WithDefaults()]; ok {
			fmt.Fprintf(a.Stderr, "skipping %s: already moved to %s\n", printable(k.String()), printable(dest))
			continue
		}
		out = append(out, k)
	}
	return out, nil
}

// selection is which sessions a command works on: SESSION (its agents, or one with --agent), every
// session of the namespace (--all), or of every namespace (-A).
type selection struct {
	all, allNamespaces bool
}

func (s *selection) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.all, "all", false, "every session of the namespace")
	fs.BoolVar(&s.allNamespaces, "A", false, "every session of every namespace")
	fs.BoolVar(&s.allNamespaces, "all-namespaces", false, "every session of every namespace")
}

func (s *selection) check(name string, pos []string) error {
	if s.all || s.allNamespaces {
		return wantArgs(name, pos, 0, "no SESSION with --all or -A")
	}
	return wantArgs(name, pos, 1, "SESSION (or --all, or -A)")
}

func (s *selection) keys(ctx context.Context, c *checkpoint.Client, k keyFlags, fs *flag.FlagSet, pos []string) ([]checkpoint.Key, error) {
	if len(pos) == 1 && flagSet(fs, "agent") {
		return []checkpoint.Key{k.key(pos[0])}, nil
	}
	var heads []checkpoint.Session
	var err error
	if s.allNamespaces {
		heads, err = c.ListAll(ctx)
	} else {
		heads, err = c.List(ctx, k.namespace)
	}
	if err != nil {
		return nil, err
	}
	var keys []checkpoint.Key
	for _, h := range heads {
		if len(pos) == 0 || h.Key.Session == pos[0] {
			keys = append(keys, h.Key)
		}
	}
	if len(keys) == 0 && len(pos) == 1 {
		return nil, &checkpoint.Error{Code: "not_found", Index: -1, Offset: -1,
			Message: fmt.Sprintf("session %s: no agent of it has a version in namespace %s", printable(pos[0]), printable(k.namespace))}
	}
	return keys, nil
}

// progressFlag is --progress: auto (a bar when stderr is a terminal), always or never.
type progressFlag string

func (p *progressFlag) register(fs *flag.FlagSet) {
	*p = "auto"
	fs.Var(p, "progress", "progress bar on stderr: auto (when stderr is a terminal), always or never")
}

func (p *progressFlag) String() string { return string(*p) }

func (p *progressFlag) Set(s string) error {
	if s != "auto" && s != "always" && s != "never" {
		return fmt.Errorf("%q is not auto, always or never", s)
	}
	*p = progressFlag(s)
	return nil
}

// progress draws one line on stderr, redrawn in place at most ten times a second.
type progress struct {
	w     io.Writer
	label string
	total int
	start time.Time
	last  time.Time
	line  string
}

func newProgress(a *App, p progressFlag, label string, total int) *progress {
	show := p == "always"
	if p == "auto" {
		f, ok := a.Stderr.(*os.File)
		show = ok && isTerminal(f)
	}
	if !show {
		return &progress{}
	}
	return &progress{w: a.Stderr, label: label, total: total, start: time.Now()}
}

// unknownTotal is the total of a progress whose count of sessions is not known beforehand (import:
// the bundle says it only at its end): it shows counts and a rate, never a bar that would be full
// (0/0) from the first frame.
const unknownTotal = -1

func (p *progress) update(done, versions int, bytes int64) {
	final := p.total >= 0 && done >= p.total
	if p.w == nil || time.Since(p.last) < 100*time.Millisecond && !final {
		return
	}
	p.last = time.Now()
	rate := float64(bytes) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.total == unknownTotal {
		p.line = fmt.Sprintf("%s %d sessions  %d versions  %s  %s/s", p.label, done, versions, size(bytes), size(int64(rate)))
	} else {
		const width = 24
		fill := width
		if p.total > 0 {
			fill = done * width / p.total
		}
		p.line = fmt.Sprintf("%s [%s%s] %d/%d sessions  %d versions  %s  %s/s", p.label,
			strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done, p.total, versions, size(bytes), size(int64(rate)))
	}
	fmt.Fprint(p.w, "\r"+p.line)
}

// finish draws the last counts, whatever the time since the previous frame, and ends the line.
func (p *progress) finish(done, versions int, bytes int64) {
	p.last = time.Time{}
	p.update(done, versions, bytes)
	p.done()
}

func (p *progress) done() {
	if p.w != nil && p.line != "" {
		fmt.Fprintln(p.w)
	}
}
