#!/usr/bin/env bash
# What a thread dump with -l (the holders of java.util.concurrent locks) costs a JVM against a
# plain one: the JVM's own safepoint time (sun.rt.safepointTime, ns) over each `Thread.print`,
# for a heap of about 100 and 400 MiB of 16-byte arrays kept alive (issue 34; kiln takes -l at
# most every 5 s and not above 256 MiB in use, crates/runtime/src/watch.rs).
# Usage: bash bench/thread_dump_holders.sh   (needs a JDK: javac, java, jcmd)
set -euo pipefail
dir="$(mktemp -d)"
trap 'pkill -f "HeapKept " 2>/dev/null || true; rm -rf "$dir"' EXIT
cat > "$dir/HeapKept.java" <<'JAVA'
import java.util.ArrayList;
import java.util.List;
public class HeapKept {
    public static void main(String[] a) throws Exception {
        long n = Long.parseLong(a[0]) * (1 << 20) / 48;
        List<long[]> keep = new ArrayList<>();
        for (long i = 0; i < n; i++) keep.add(new long[2]);
        System.gc();
        System.out.println("ready " + keep.size());
        Thread.sleep(600_000);
    }
}
JAVA
javac -d "$dir" "$dir/HeapKept.java"
safepoint_ns() { jcmd "$1" PerfCounter.print | sed -n 's/^sun.rt.safepointTime=//p'; }
for mb in 100 400; do
  java -Xmx4g -cp "$dir" HeapKept "$mb" > "$dir/out-$mb" 2>&1 &
  pid=$!
  until grep -q ready "$dir/out-$mb" 2>/dev/null; do sleep 0.5; done
  used=$(jcmd "$pid" GC.heap_info | sed -n 's/.*used \([0-9]*\)K.*/\1/p' | head -1)
  for flag in "" "-l" "" "-l"; do
    before=$(safepoint_ns "$pid")
    jcmd "$pid" Thread.print $flag > /dev/null
    after=$(safepoint_ns "$pid")
    echo "heap used $((used / 1024)) MiB  Thread.print ${flag:-(plain)}: $(( (after - before) / 1000000 )) ms at safepoints"
  done
  kill "$pid"
done
