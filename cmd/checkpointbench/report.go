package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// report is everything a run measured, printed as aligned tables or as JSON.
type report struct {
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  string    `json:"machine"`
	// Uptime is `uptime`'s load averages at the start and at the end: how busy the machine was.
	UptimeStart string   `json:"uptime_start"`
	UptimeEnd   string   `json:"uptime_end"`
	Scale       scale    `json:"scale"`
	Tables      []*table `json:"tables"`
	Summary     []result `json:"summary"`
}

// table is one table of the output. Rows with a target get the target and MET / NOT MET after
// their cells.
type table struct {
	Section string   `json:"section"`
	Title   string   `json:"title"`
	Columns []string `json:"columns"`
	Rows    []*row   `json:"rows"`
	Notes   []string `json:"notes,omitempty"`
}

type row struct {
	Cells  []string `json:"cells"`
	Target string   `json:"target,omitempty"`
	Got    string   `json:"got,omitempty"` // the figure the target is checked on
	Met    *bool    `json:"met,omitempty"`
	// Floor is the same figure for the parts alone, where the row's own comparison leaves them out:
	// what no build of checkpointd on them could beat (the rivals against raw JetStream, a restore
	// against a raw read that checks what it read).
	Floor string `json:"floor,omitempty"`
	// Values are the numbers behind the cells, for scripts (seconds, bytes, ratios).
	Values map[string]float64 `json:"values,omitempty"`
}

// result is one target of the summary.
type result struct {
	Section string `json:"section"`
	Row     string `json:"row"`
	Target  string `json:"target"`
	Got     string `json:"got"`
	Met     bool   `json:"met"`
	Skipped bool   `json:"skipped,omitempty"` // not measured (a rival not installed): neither met nor not
	Floor   string `json:"floor,omitempty"`   // row.Floor
}

func newReport(args []string, o options) *report {
	return &report{
		Command:     strings.Join(append([]string{"checkpointbench"}, args...), " "),
		Started:     time.Now().UTC(),
		Machine:     fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		UptimeStart: loadAverage(),
		Scale:       o.scale,
	}
}

// add starts a table in section.
func (r *report) add(section, title string, columns ...string) *table {
	t := &table{Section: section, Title: title, Columns: columns}
	r.Tables = append(r.Tables, t)
	return t
}

// row appends a row without a target.
func (t *table) row(cells ...string) *row {
	rw := &row{Cells: cells}
	t.Rows = append(t.Rows, rw)
	return rw
}

// check sets the row's target, the figure it is checked on, and whether it is met.
func (rw *row) check(target, got string, met bool) *row {
	rw.Target, rw.Got, rw.Met = target, got, &met
	return rw
}

// skip says the row's target could not be checked.
func (rw *row) skip(target string) *row {
	rw.Target, rw.Got = target, "skipped"
	return rw
}

// floor says what the row's figure is for the parts alone (row.Floor).
func (rw *row) floor(format string, args ...any) *row {
	rw.Floor = fmt.Sprintf(format, args...)
	return rw
}

// value records a number behind the row's cells.
func (rw *row) value(name string, v float64) *row {
	if rw.Values == nil {
		rw.Values = map[string]float64{}
	}
	rw.Values[name] = v
	return rw
}

func (t *table) note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

func (r *report) finish() {
	r.Finished = time.Now().UTC()
	r.UptimeEnd = loadAverage()
	r.Summary = nil
	for _, t := range r.Tables {
		for _, rw := range t.Rows {
			if rw.Target != "" {
				r.Summary = append(r.Summary, result{Section: t.Section, Row: rw.Cells[0], Target: rw.Target, Got: rw.Got,
					Met: rw.Met != nil && *rw.Met, Skipped: rw.Met == nil, Floor: rw.Floor})
			}
		}
	}
}

func (r *report) writeJSON(w io.Writer) error {
	r.finish()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *report) writeText(w io.Writer) error {
	r.finish()
	fmt.Fprintf(w, "$ %s\n", r.Command)
	fmt.Fprintf(w, "%s; started %s, took %s\n", r.Machine, r.Started.Format(time.RFC3339), r.Finished.Sub(r.Started).Round(time.Second))
	fmt.Fprintf(w, "load average at start: %s; at end: %s\n", r.UptimeStart, r.UptimeEnd)
	fmt.Fprintf(w, "scale: %s\n", r.Scale.describe())
	for _, t := range r.Tables {
		fmt.Fprintf(w, "\n## %s\n\n", t.Title)
		t.write(w)
	}
	met, skipped := 0, 0
	for _, s := range r.Summary {
		if s.Met {
			met++
		}
		if s.Skipped {
			skipped++
		}
	}
	fmt.Fprintf(w, "\n## Summary: %d of %d targets met", met, len(r.Summary)-skipped)
	if skipped > 0 {
		fmt.Fprintf(w, " (%d skipped)", skipped)
	}
	fmt.Fprint(w, "\n\n")
	for _, s := range r.Summary {
		v := verdict(s.Met)
		if s.Skipped {
			v = "SKIPPED"
		}
		floor := ""
		if s.Floor != "" {
			floor = "; " + s.Floor
		}
		fmt.Fprintf(w, "- %-7s  %-7s %s: %s (target %s%s)\n", v, s.Section, s.Row, s.Got, s.Target, floor)
	}
	return nil
}

func (t *table) write(w io.Writer) {
	hasTarget := false
	for _, rw := range t.Rows {
		hasTarget = hasTarget || rw.Target != ""
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	cols := t.Columns
	if hasTarget {
		cols = append(append([]string{}, cols...), "target", "")
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	dashes := make([]string, len(cols))
	for i, c := range cols {
		dashes[i] = strings.Repeat("-", max(utf8.RuneCountInString(c), 3))
	}
	fmt.Fprintln(tw, strings.Join(dashes, "\t"))
	for _, rw := range t.Rows {
		cells := rw.Cells
		if hasTarget {
			v := ""
			if rw.Met != nil {
				v = verdict(*rw.Met)
			} else if rw.Target != "" {
				v = "SKIPPED"
			}
			cells = append(append([]string{}, cells...), rw.Target, v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		fmt.Fprint(w, strings.TrimRight(line, " \n"), strings.Repeat("\n", strings.Count(line, "\n")))
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

func verdict(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

func (s scale) describe() string {
	turns := "all"
	if s.Turns > 0 {
		turns = fmt.Sprint(s.Turns)
	}
	return fmt.Sprintf("%s (%d samples per latency row; ingest %d agents, %d × %s per side; session paced %s, %s turns, settled %s; "+
		"%d vs %d sessions, %d vs %d versions; large checkpoint %s)",
		s.Name, s.Iterations, s.IngestAgents, s.IngestRounds, s.IngestPhase, s.Pace, turns, s.Settle,
		s.Sessions, s.SmallSessions, s.Versions, s.SmallVersions, mib(s.LargeBytes))
}

// loadAverage is the first three fields of /proc/loadavg, what `uptime` prints.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
