// kiln-go-trace summarises a Go execution trace (GET /debug/pprof/trace) for kiln: how long
// goroutines spent in GC mark assist in each wall-clock second, and in which functions, read
// with golang.org/x/exp/trace (the trace format is specified only by Go's own reader; no Rust
// parser exists).
//
//	kiln-go-trace < trace.out > summary.json
//
// The trace's clock is put on the wall clock by the clock snapshot Go (1.25 and later) writes
// in each sync event; an older trace is refused, not guessed at.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// Second is one wall-clock second of the trace.
type Second struct {
	UnixS      int64   `json:"unix_s"`
	AssistMs   float64 `json:"assist_ms"`
	Goroutines int     `json:"goroutines"`
}

// Where is a function that goroutines were in when the GC made them assist.
type Where struct {
	Function   string  `json:"function"`
	AssistMs   float64 `json:"assist_ms"`
	Goroutines int     `json:"goroutines"`
}

// Summary is what kiln reads.
type Summary struct {
	FromUnixMs float64  `json:"from_unix_ms"`
	ToUnixMs   float64  `json:"to_unix_ms"`
	AssistMs   float64  `json:"assist_ms"`
	Seconds    []Second `json:"seconds"`
	Where      []Where  `json:"where"`
	GCCycles   int      `json:"gc_cycles"`
}

type open struct {
	begin trace.Time
	where string
}

// caller is the first frame outside the runtime: what the goroutine was doing when it was
// made to assist (an allocation in it).
func caller(st trace.Stack) string {
	first := ""
	for f := range st.Frames() {
		if first == "" {
			first = f.Func
		}
		if !strings.HasPrefix(f.Func, "runtime.") {
			return f.Func
		}
	}
	if first == "" {
		return "(no stack)"
	}
	return first
}

func summarise(in io.Reader) (*Summary, error) {
	r, err := trace.NewReader(in)
	if err != nil {
		return nil, err
	}
	var (
		snapTrace trace.Time
		snapWall  int64
		haveSnap  bool
		first     trace.Time = -1
		last      trace.Time
		assists   = map[trace.GoID]open{}
		seconds   = map[int64]*Second{}
		secondGs  = map[int64]map[trace.GoID]bool{}
		where     = map[string]*Where{}
		whereGs   = map[string]map[trace.GoID]bool{}
		cycles    int
	)
	wall := func(t trace.Time) int64 { return snapWall + int64(t-snapTrace) }
	add := func(g trace.GoID, o open, end trace.Time) {
		total := float64(end-o.begin) / 1e6
		w := where[o.where]
		if w == nil {
			w = &Where{Function: o.where}
			where[o.where] = w
			whereGs[o.where] = map[trace.GoID]bool{}
		}
		w.AssistMs += total
		whereGs[o.where][g] = true
		// the range shared out over the wall-clock seconds it spans
		from, to := wall(o.begin), wall(end)
		for from < to {
			s := from / 1e9
			next := (s + 1) * 1e9
			if next > to {
				next = to
			}
			sec := seconds[s]
			if sec == nil {
				sec = &Second{UnixS: s}
				seconds[s] = sec
				secondGs[s] = map[trace.GoID]bool{}
			}
			sec.AssistMs += float64(next-from) / 1e6
			secondGs[s][g] = true
			from = next
		}
	}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if first < 0 {
			first = ev.Time()
		}
		last = ev.Time()
		switch ev.Kind() {
		case trace.EventSync:
			if s := ev.Sync(); s.ClockSnapshot != nil && !haveSnap {
				snapTrace, snapWall, haveSnap = s.ClockSnapshot.Trace, s.ClockSnapshot.Wall.UnixNano(), true
			}
		case trace.EventRangeBegin, trace.EventRangeActive:
			rg := ev.Range()
			if rg.Name == "GC mark assist" {
				g := rg.Scope.Goroutine()
				assists[g] = open{begin: ev.Time(), where: caller(ev.Stack())}
			}
			if rg.Name == "GC concurrent mark phase" && ev.Kind() == trace.EventRangeBegin {
				cycles++
			}
		case trace.EventRangeEnd:
			rg := ev.Range()
			if rg.Name == "GC mark assist" {
				g := rg.Scope.Goroutine()
				if o, ok := assists[g]; ok && haveSnap {
					add(g, o, ev.Time())
				}
				delete(assists, g)
			}
		}
	}
	if !haveSnap {
		return nil, fmt.Errorf("the trace has no clock snapshot (Go 1.25 or later writes one): its times cannot be put on the wall clock")
	}
	// assists still running when the trace ended count up to its end
	for g, o := range assists {
		add(g, o, last)
	}
	sum := &Summary{FromUnixMs: float64(wall(first)) / 1e6, ToUnixMs: float64(wall(last)) / 1e6, GCCycles: cycles}
	for s, sec := range seconds {
		sec.Goroutines = len(secondGs[s])
		sum.Seconds = append(sum.Seconds, *sec)
		sum.AssistMs += sec.AssistMs
	}
	sort.Slice(sum.Seconds, func(i, j int) bool { return sum.Seconds[i].UnixS < sum.Seconds[j].UnixS })
	for f, w := range where {
		w.Goroutines = len(whereGs[f])
		sum.Where = append(sum.Where, *w)
	}
	sort.Slice(sum.Where, func(i, j int) bool { return sum.Where[i].AssistMs > sum.Where[j].AssistMs })
	if len(sum.Where) > 10 {
		sum.Where = sum.Where[:10]
	}
	return sum, nil
}

func main() {
	sum, err := summarise(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kiln-go-trace:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(sum); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-go-trace:", err)
		os.Exit(1)
	}
}
