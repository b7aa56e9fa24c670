// A Go service whose cache is rebuilt every 10 s of the wall clock (at :00, :10, :20 ...),
// as case study 2's per-minute cache expiry: the rebuild allocates a new cache of about
// 60 MB while the old one is still live, so the garbage collector runs, and requests that
// allocate meanwhile are made to assist its mark, in the seconds after each rebuild.
//
// Usage: go_cache PORT TRUTH_FILE. On SIGTERM it writes TRUTH_FILE as JSON: the GC cycles
// the runtime counted (NumGC) with each one's pause end (from MemStats.PauseEnd, the last
// 256), and when each rebuild began and ended: the ground truth for kiln's gctrace reading.
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
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
)

func build() {
	start := time.Now()
	fresh := make(map[int][]byte, 240_000)
	for i := 0; i < 240_000; i++ {
		fresh[i] = make([]byte, 256)
	}
	cache.Store(&fresh)
	mu.Lock()
	rebuilds = append(rebuilds, rebuild{start.UnixMilli(), time.Now().UnixMilli()})
	mu.Unlock()
}

func main() {
	debug.SetGCPercent(50)
	port, truth := os.Args[1], os.Args[2]
	build()
	go func() {
		for {
			now := time.Now()
			next := now.Truncate(10 * time.Second).Add(10 * time.Second)
			time.Sleep(next.Sub(now))
			build()
		}
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// a request allocates a little, as a JSON decode would
		buf := make([]byte, 8192)
		m := *cache.Load()
		fmt.Fprintf(w, "%d %d\n", len(m), len(buf))
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
