// A Go service whose cache is rebuilt every 10 s of the wall clock (at :00, :10, :20 ...),
// as case study 2's per-minute cache expiry: the rebuild allocates a new cache of about
// 60 MB while the old one is still live, so the garbage collector runs, and requests that
// allocate meanwhile are made to assist its mark, in the seconds after each rebuild.
//
// Usage: go_cache PORT TRUTH_FILE [MODE [PERIOD_S]]. MODE says how the cache is rebuilt:
//   - background (the default): a goroutine builds a new cache and swaps it in;
//   - inline: the first request after the cache expired rebuilds it under the cache's write
//     lock, and the requests behind it wait (case study 2's expiry: slow seconds with GC);
//   - in-place: the fix: the cache is built once and its entries refreshed in place, so
//     nothing is allocated in a burst and the collector has nothing to do.
// PERIOD_S (10) is the rebuild period, on the wall clock's multiples of it. It imports expvar
// (GET /debug/vars) and net/http/pprof, as services do to publish their counters.
//
// GET /locked makes a 30 ms call while holding a mutex every request takes (the demo shop's
// audit call under the lock); GET /unlocked makes the same call without holding it.
//
// On SIGTERM it writes TRUTH_FILE as JSON: the GC cycles the runtime counted (NumGC) with
// each one's pause end (from MemStats.PauseEnd, the last 256), and when each rebuild began
// and ended: the ground truth for kiln's gctrace reading.
package main

import (
	"encoding/json"
	_ "expvar" // GET /debug/vars: memstats, for kiln's reading of a target it did not start
	"fmt"
	"net/http"
	_ "net/http/pprof" // GET /debug/pprof/goroutine?debug=2: kiln's goroutine dumps
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type rebuild struct {
	StartUnixMs int64 `json:"start_unix_ms"`
	EndUnixMs   int64 `json:"end_unix_ms"`
}

var (
	cache    atomic.Pointer[map[int][]byte]
	mu       sync.Mutex
	rebuilds []rebuild
	// inline mode: requests read under it, the rebuild holds it
	cacheLock sync.RWMutex
	expires   atomic.Int64
)

func note(start time.Time) {
	mu.Lock()
	rebuilds = append(rebuilds, rebuild{start.UnixMilli(), time.Now().UnixMilli()})
	mu.Unlock()
}

func build() {
	start := time.Now()
	fresh := make(map[int][]byte, 240_000)
	for i := 0; i < 240_000; i++ {
		fresh[i] = make([]byte, 256)
	}
	cache.Store(&fresh)
	note(start)
}

// refresh rewrites every entry where it lies: the same work, nothing allocated.
func refresh() {
	start := time.Now()
	for _, v := range *cache.Load() {
		for j := range v {
			v[j]++
		}
	}
	note(start)
}

// next is the period's next multiple on the wall clock after now.
func next(period time.Duration) time.Time {
	return time.Now().Truncate(period).Add(period)
}

func main() {
	debug.SetGCPercent(50)
	port, truth := os.Args[1], os.Args[2]
	mode, period := "background", 10*time.Second
	if len(os.Args) > 3 {
		mode = os.Args[3]
	}
	if len(os.Args) > 4 {
		secs, err := time.ParseDuration(os.Args[4] + "s")
		if err != nil {
			panic(err)
		}
		period = secs
	}
	build()
	expires.Store(next(period).UnixNano())
	if mode != "inline" {
		go func() {
			for {
				time.Sleep(time.Until(next(period)))
				if mode == "in-place" {
					refresh()
				} else {
					build()
				}
			}
		}()
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if mode == "inline" && time.Now().UnixNano() >= expires.Load() {
			cacheLock.Lock()
			if time.Now().UnixNano() >= expires.Load() {
				build()
				expires.Store(next(period).UnixNano())
			}
			cacheLock.Unlock()
		}
		cacheLock.RLock()
		defer cacheLock.RUnlock()
		// a request allocates a little, as a JSON decode would
		buf := make([]byte, 8192)
		m := *cache.Load()
		fmt.Fprintf(w, "%d %d\n", len(m), len(buf))
	})
	var audit sync.Mutex
	http.HandleFunc("/locked", func(w http.ResponseWriter, r *http.Request) {
		audit.Lock()
		defer audit.Unlock()
		time.Sleep(30 * time.Millisecond)
		fmt.Fprintln(w, "audited")
	})
	http.HandleFunc("/unlocked", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		audit.Lock()
		audit.Unlock()
		fmt.Fprintln(w, "audited")
	})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		ends := []uint64{}
		first := uint32(1)
		if ms.NumGC > 256 {
			first = ms.NumGC - 255
		}
		for k := first; k <= ms.NumGC; k++ {
			ends = append(ends, ms.PauseEnd[(k+255)%256])
		}
		mu.Lock()
		out, _ := json.Marshal(map[string]any{
			"num_gc": ms.NumGC, "first_cycle": first, "pause_end_unix_ns": ends,
			"rebuilds": rebuilds,
		})
		mu.Unlock()
		os.WriteFile(truth, out, 0o644)
		os.Exit(0)
	}()
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
