//! A JFR recording for `--runtime deep`, started and dumped over the attach socket, read at
//! the end with a JDK's `jfr` tool (`jfr print --json`): the count of throwables
//! the JVM created (`jdk.ExceptionStatistics`, a cumulative count once a second) and every
//! wait for a lock of `LOCK_THRESHOLD` or more (`jdk.JavaMonitorEnter` for `synchronized`,
//! `jdk.ThreadPark` for java.util.concurrent's locks), with its stack, summed per place.
//! JFR's binary format is not parsed here: the JDK's reader is the reference for it.
//!
//! The tool is kiln's own (JAVA_HOME, then PATH, owned by root or kiln's user), never one
//! beside the target's `java`: the target's owner chooses that path, and kiln runs as root.
//! The recording is copied out of the target's /tmp as its owner before the tool reads it.

use crate::error::io;
use crate::RuntimeError;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::as_target::copy_regular;
use crate::attach::Attach;

/// One reading of the JVM's count of throwables created since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThrowableCount {
    pub unix_ms: u64,
    pub throwables: u64,
}

/// Lock waits this long or longer are recorded (the JDK's default settings: 20 ms; its
/// profile settings: 10 ms). Shorter waits cost little each, and recording every one would
/// cost the target more than they do.
pub const LOCK_THRESHOLD_MS: u32 = 10;

/// Frames kept per lock-wait place.
const KEPT_FRAMES: usize = 10;
/// Places kept, the longest waited first.
const KEPT_SITES: usize = 50;

/// A recording kiln started.
pub struct Recording {
    name: String,
    /// Why lock waits are recorded at the JDK's own threshold rather than `LOCK_THRESHOLD_MS`.
    pub threshold_note: Option<String>,
}

/// What a recording held.
#[derive(Debug, Default)]
pub struct JfrRead {
    pub throwables: Vec<ThrowableCount>,
    pub lock_waits: Vec<LockWaitSite>,
}

/// One lock at one place: what was waited for, where, and by whom.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockWaitPlace {
    /// `monitor` (a `synchronized` block or method) or `park` (a java.util.concurrent lock,
    /// a queue's put, a condition).
    pub kind: String,
    /// The class of the monitor's object, or of what the thread parked on.
    pub lock_class: String,
    /// The first frame past the lock's own machinery: where the code asked for the lock.
    pub at: String,
    /// The waiting thread's stack, innermost first (`Class.method(line N)`).
    pub frames: Vec<String>,
    /// Threads that waited here, and a few of their names.
    pub threads: u32,
    pub thread_names: Vec<String>,
}

impl LockWaitPlace {
    /// What was waited for, in the summary's and the findings' words.
    pub fn noun(&self) -> &'static str {
        if self.kind == "monitor" {
            "monitor"
        } else {
            "lock (parked)"
        }
    }
}

/// Where threads waited for one lock, and how long, second by second.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockWaitSite {
    #[serde(flatten)]
    pub place: LockWaitPlace,
    /// Per wall-clock second in which waits began.
    pub seconds: Vec<LockWaitSecond>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockWaitSecond {
    pub unix_s: u64,
    pub waits: u32,
    pub wait_ms: f64,
    pub longest_ms: f64,
}

impl Recording {
    /// Starts a recording with the JDK's default settings (about 1% overhead by design) and
    /// lock waits from `LOCK_THRESHOLD_MS`. The first JFR start in a JVM takes a second or
    /// two.
    pub fn start(attach: &Attach) -> Result<Self, RuntimeError> {
        let name = format!("kiln-{}", std::process::id());
        let base = format!("JFR.start name={name} settings=default");
        // event settings on JFR.start came with JDK 17; an older JVM refuses them
        let threshold = format!("{LOCK_THRESHOLD_MS}ms");
        let lower = format!(
            "{base} jdk.JavaMonitorEnter#threshold={threshold} jdk.ThreadPark#threshold={threshold}"
        );
        match attach.jcmd(&lower) {
            Ok(_) => Ok(Self {
                name,
                threshold_note: None,
            }),
            Err(why) => {
                attach.jcmd(&base)?;
                Ok(Self {
                    name,
                    threshold_note: Some(format!(
                        "lock waits from the JDK's default 20 ms (it refused {LOCK_THRESHOLD_MS} ms: {why})"
                    )),
                })
            }
        }
    }

    /// Dumps and stops the recording, and reads the throwable counts and lock waits from it
    /// with kiln's `jfr` tool. The dump is written by the JVM into its own /tmp, copied out as
    /// its owner and removed.
    pub fn finish(
        self,
        attach: &Attach,
        pid: i32,
        proc_root: &Path,
    ) -> Result<JfrRead, RuntimeError> {
        let file = format!("/tmp/{}-{pid}.jfr", self.name);
        let dumped = attach.jcmd(&format!("JFR.dump name={} filename={file}", self.name));
        let _ = attach.jcmd(&format!("JFR.stop name={}", self.name));
        dumped?;
        let theirs = proc_root
            .join(pid.to_string())
            .join("root")
            .join(file.trim_start_matches('/'));
        let owner = attach.owner();
        let ours = tempfile::Builder::new()
            .prefix("kiln-jfr-")
            .tempdir()
            .map_err(io("cannot make a folder for the recording"))?;
        let copy = ours.path().join("recording.jfr");
        let copied = copy_regular(&owner, &theirs, &copy, MAX_RECORDING_BYTES);
        let _ = owner.run(|| std::fs::remove_file(&theirs));
        copied?;
        let jfr = jfr_tool(&std::env::var_os("JAVA_HOME"), &std::env::var_os("PATH"))?;
        // the stack deep enough to get past a java.util.concurrent lock's own frames
        let mut child = Command::new(&jfr)
            .args(["print", "--json", "--stack-depth", "16", "--events"])
            .arg("jdk.ExceptionStatistics,jdk.JavaMonitorEnter,jdk.ThreadPark")
            .arg(&copy)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(format!("cannot run {}", jfr.display())))?;
        // stderr drained aside, so a chatty tool cannot stall on a full pipe meanwhile
        let stderr = child.stderr.take().map(|mut err| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = err.read_to_string(&mut text);
                text
            })
        });
        // read as it is printed: a busy lock's events with their stacks are many
        // megabytes of JSON, kept here only as the sites' sums
        let printed = child
            .stdout
            .take()
            .map(|out| read_printed(BufReader::new(out)));
        let status = child.wait().map_err(io(format!("{}", jfr.display())))?;
        let stderr = stderr
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        if !status.success() {
            return Err(format!("{} print failed: {}", jfr.display(), stderr.trim()).into());
        }
        printed.unwrap_or_else(|| Err("jfr print gave no output".into()))
    }
}

/// The largest recording kiln reads: a run's events with 16-frame stacks are megabytes.
const MAX_RECORDING_BYTES: u64 = 1 << 30;

/// kiln's own `jfr` tool: `$JAVA_HOME/bin/jfr`, else the first on PATH, taken only when the
/// file it resolves to is owned by root or by kiln's user and no one else may write it (kiln
/// runs it, usually as root). Never a path derived from the target.
fn jfr_tool(
    java_home: &Option<std::ffi::OsString>,
    path: &Option<std::ffi::OsString>,
) -> Result<PathBuf, RuntimeError> {
    let candidates = java_home
        .iter()
        .map(|home| Path::new(home).join("bin/jfr"))
        .chain(
            path.iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join("jfr")),
        );
    let mut refused = Vec::new();
    for jfr in candidates {
        match trusted_executable(&jfr) {
            Ok(true) => return Ok(jfr),
            Ok(false) => {}
            Err(why) => refused.push(why.to_string()),
        }
    }
    let mut why =
        "no jfr tool in $JAVA_HOME/bin or on PATH (a JRE without jdk.jfr's tool)".to_string();
    for refusal in refused {
        why.push_str("; ");
        why.push_str(&refusal);
    }
    Err(why.into())
}

/// Whether `path` is there and safe to run: the file it resolves to, and the folders it is in,
/// owned by root or kiln's user and not writable by group or others. `Ok(false)`: not there.
fn trusted_executable(path: &Path) -> Result<bool, RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(real) = std::fs::canonicalize(path) else {
        return Ok(false);
    };
    // SAFETY: geteuid has no arguments and no memory effects.
    let me = unsafe { libc::geteuid() };
    let meta = std::fs::metadata(&real).map_err(io(format!("{}", real.display())))?;
    if !meta.is_file() {
        return Ok(false);
    }
    for (place, meta) in std::iter::once((real.as_path(), meta)).chain(
        real.ancestors()
            .skip(1)
            .filter_map(|dir| Some((dir, std::fs::metadata(dir).ok()?))),
    ) {
        let sticky = meta.mode() & 0o1000 != 0 && place != real;
        if (meta.uid() != 0 && meta.uid() != me) || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "{} not run: {} is owned by uid {} with mode {:o} (kiln runs only what root or \
                 its own user owns and no one else may change)",
                path.display(),
                place.display(),
                meta.uid(),
                meta.mode() & 0o7777
            )
            .into());
        }
    }
    Ok(true)
}

/// `{"recording": {"events": [...]}}` walked with each event handed to `f` as it is read, so
/// a recording's many megabytes of events are never held at once. (serde's derive would collect
/// the whole array first.)
fn each_printed_event<R: Read>(from: R, f: impl FnMut(PrintedEvent)) -> serde_json::Result<()> {
    let mut json = serde_json::Deserializer::from_reader(from);
    let events = EachEvent(f);
    Within("recording", Within("events", events)).deserialize(&mut json)?;
    json.end()
}

/// An object whose field `.0` is read with the seed `.1`; its other fields are skipped.
struct Within<S>(&'static str, S);

impl<'de, S: DeserializeSeed<'de, Value = ()>> DeserializeSeed<'de> for Within<S> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, S: DeserializeSeed<'de, Value = ()>> Visitor<'de> for Within<S> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "an object with {:?}", self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Within(name, seed) = self;
        let mut seed = Some(seed);
        while let Some(key) = map.next_key::<std::borrow::Cow<str>>()? {
            match seed.take_if(|_| key == name) {
                Some(seed) => map.next_value_seed(seed)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        match seed {
            Some(_) => Err(serde::de::Error::missing_field(name)),
            None => Ok(()),
        }
    }
}

/// An array whose elements are read as events and handed on one by one.
struct EachEvent<F>(F);

impl<'de, F: FnMut(PrintedEvent)> DeserializeSeed<'de> for EachEvent<F> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(PrintedEvent)> Visitor<'de> for EachEvent<F> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while let Some(event) = seq.next_element()? {
            (self.0)(event);
        }
        Ok(())
    }
}

/// What kiln reads of an event of `jfr print --json`; the rest is skipped unread.
#[derive(Deserialize)]
struct PrintedEvent {
    #[serde(rename = "type")]
    kind: String,
    values: EventValues,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct EventValues {
    start_time: Option<String>,
    duration: Option<String>,
    throwables: Option<u64>,
    event_thread: Option<JfrThread>,
    stack_trace: Option<JfrStack>,
    monitor_class: Option<JfrClass>,
    parked_class: Option<JfrClass>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct JfrThread {
    java_name: Option<String>,
    os_name: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct JfrStack {
    frames: Vec<JfrFrame>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JfrFrame {
    method: JfrMethod,
    #[serde(default)]
    line_number: Option<i64>,
}

#[derive(Deserialize)]
struct JfrMethod {
    #[serde(rename = "type")]
    class: JfrClass,
    name: String,
}

#[derive(Deserialize)]
struct JfrClass {
    name: String,
}

impl JfrClass {
    /// `java.lang.Object`, whether the printer wrote dots or the JVM's slashes.
    fn dotted(&self) -> String {
        self.name.replace('/', ".")
    }
}

fn unix_ms_of(rfc3339: &str) -> Option<f64> {
    let at = humantime::parse_rfc3339(rfc3339).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64() * 1e3)
}

/// An ISO-8601 duration as JFR prints them (`PT0.012345S`, `PT1M2.5S`, `PT2H`), in ms.
pub fn iso_duration_ms(text: &str) -> Option<f64> {
    let rest = text.strip_prefix("PT")?;
    let (mut ms, mut number, mut units) = (0.0, String::new(), 0);
    for c in rest.chars() {
        let unit_ms = match c {
            'H' => 3_600_000.0,
            'M' => 60_000.0,
            'S' => 1_000.0,
            _ => {
                number.push(c);
                continue;
            }
        };
        ms += number.parse::<f64>().ok()? * unit_ms;
        number.clear();
        units += 1;
    }
    (units > 0 && number.is_empty() && ms.is_finite()).then_some(ms)
}

/// Frames of the lock's own machinery, skipped to find where the code asked for the lock.
fn is_lock_machinery(frame: &str) -> bool {
    [
        "jdk.internal.misc.Unsafe.",
        "sun.misc.Unsafe.",
        "java.util.concurrent.locks.",
        "java.util.concurrent.ForkJoinPool.managedBlock",
        "java.util.concurrent.ForkJoinPool.unmanagedBlock",
        "java.lang.Object.wait",
        "java.lang.Thread.",
        "java.lang.VirtualThread.",
    ]
    .iter()
    .any(|p| frame.starts_with(p))
}

/// A park that is a thread waiting for work, not for a lock (as the wall profile's summary
/// leaves them out: [`kiln_profile::is_waiting_for_work`]).
fn is_idle_wait(frames: &[String]) -> bool {
    kiln_profile::is_waiting_for_work(frames.iter().map(|f| f.split('(').next().unwrap_or(f)))
}

/// `jfr print --json` read as it comes: the throwable counts in time order and the lock
/// waits summed per place (kind, lock class, where asked), the longest waited first.
pub fn read_printed(from: impl Read) -> Result<JfrRead, RuntimeError> {
    let mut sums = PrintedSums::default();
    each_printed_event(from, |event| sums.add(event))
        .map_err(|e| format!("jfr print --json gave what kiln cannot read: {e}"))?;
    Ok(sums.finish())
}

/// What the events read so far add up to.
#[derive(Default)]
struct PrintedSums {
    throwables: Vec<ThrowableCount>,
    /// per (kind, lock class, method asked from): the place, its threads' names, its seconds
    sites: BTreeMap<(String, String, String), PlaceSums>,
}

struct PlaceSums {
    place: LockWaitPlace,
    names: BTreeSet<String>,
    seconds: BTreeMap<u64, LockWaitSecond>,
}

impl PrintedSums {
    fn add(&mut self, event: PrintedEvent) {
        let v = event.values;
        let Some(start_ms) = v.start_time.as_deref().and_then(unix_ms_of) else {
            return;
        };
        let (kind, class) = match event.kind.as_str() {
            "jdk.ExceptionStatistics" => {
                if let Some(n) = v.throwables {
                    self.throwables.push(ThrowableCount {
                        unix_ms: start_ms as u64,
                        throwables: n,
                    });
                }
                return;
            }
            "jdk.JavaMonitorEnter" => ("monitor", v.monitor_class),
            "jdk.ThreadPark" => ("park", v.parked_class),
            _ => return,
        };
        let Some(ms) = v.duration.as_deref().and_then(iso_duration_ms) else {
            return;
        };
        let frames: Vec<String> = v
            .stack_trace
            .map(|st| st.frames)
            .unwrap_or_default()
            .iter()
            .map(|f| {
                let line = f.line_number.filter(|n| *n > 0);
                format!(
                    "{}.{}{}",
                    f.method.class.dotted(),
                    f.method.name,
                    line.map_or(String::new(), |n| format!("(line {n})"))
                )
            })
            .collect();
        if kind == "park" && is_idle_wait(&frames) {
            return;
        }
        let at = frames
            .iter()
            .find(|f| !is_lock_machinery(f))
            .or(frames.first())
            .cloned()
            .unwrap_or_else(|| "(no stack)".into());
        let lock_class = class.map_or_else(|| "(unknown)".into(), |c| c.dotted());
        // one place per method: its compiled and interpreted frames may give other lines
        let method = at.split('(').next().unwrap_or(&at).to_string();
        let key = (kind.to_string(), lock_class.clone(), method);
        let sums = self.sites.entry(key).or_insert_with(|| PlaceSums {
            place: LockWaitPlace {
                kind: kind.into(),
                lock_class,
                at,
                frames: frames.iter().take(KEPT_FRAMES).cloned().collect(),
                ..Default::default()
            },
            names: BTreeSet::new(),
            seconds: BTreeMap::new(),
        });
        let thread = v.event_thread.and_then(|t| t.java_name.or(t.os_name));
        if let Some(name) = thread {
            if sums.names.len() < 1000 {
                sums.names.insert(name);
            }
        }
        let unix_s = (start_ms / 1e3) as u64;
        let second = sums
            .seconds
            .entry(unix_s)
            .or_insert_with(|| LockWaitSecond {
                unix_s,
                ..Default::default()
            });
        second.waits += 1;
        second.wait_ms += ms;
        second.longest_ms = second.longest_ms.max(ms);
    }

    fn finish(mut self) -> JfrRead {
        self.throwables.sort_by_key(|c| c.unix_ms);
        let mut lock_waits: Vec<LockWaitSite> = self
            .sites
            .into_values()
            .map(
                |PlaceSums {
                     mut place,
                     names,
                     seconds,
                 }| {
                    place.threads = names.len() as u32;
                    place.thread_names = names.into_iter().take(5).collect();
                    LockWaitSite {
                        place,
                        seconds: seconds.into_values().collect(),
                    }
                },
            )
            .collect();
        let total = |s: &LockWaitSite| s.seconds.iter().map(|x| x.wait_ms).sum::<f64>();
        lock_waits.sort_by(|a, b| total(b).total_cmp(&total(a)));
        lock_waits.truncate(KEPT_SITES);
        JfrRead {
            throwables: self.throwables,
            lock_waits,
        }
    }
}

/// The `jdk.ExceptionStatistics` events of `jfr print --json`, oldest first.
pub fn throwable_counts(json: &[u8]) -> Result<Vec<ThrowableCount>, RuntimeError> {
    read_printed(json).map(|read| read.throwables)
}

/// Throwables created per second between the first and the last reading inside
/// `[from_ms, to_ms]`, and how many: None with fewer than two readings there.
pub fn rate_within(counts: &[ThrowableCount], from_ms: u64, to_ms: u64) -> Option<(f64, u64)> {
    let inside: Vec<&ThrowableCount> = counts
        .iter()
        .filter(|c| c.unix_ms >= from_ms && c.unix_ms <= to_ms)
        .collect();
    let (first, last) = (inside.first()?, inside.last()?);
    let span_s = (last.unix_ms - first.unix_ms) as f64 / 1000.0;
    let thrown = last.throwables.saturating_sub(first.throwables);
    (span_s > 0.0).then(|| (thrown as f64 / span_s, thrown))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `jfr` in a folder of its own, with its mode; the folder is `root` of the returned.
    fn tool(mode: u32) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(home.path().join("bin")).unwrap();
        let jfr = home.path().join("bin/jfr");
        std::fs::write(&jfr, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&jfr, std::fs::Permissions::from_mode(mode)).unwrap();
        home
    }

    #[test]
    fn the_jfr_tool_is_kilns_own_and_nobody_elses() {
        let good = tool(0o755);
        let bin = good.path().join("bin");
        let path = Some(bin.clone().into_os_string());
        // JAVA_HOME first, PATH next
        assert_eq!(
            jfr_tool(&Some(good.path().into()), &None).ok(),
            Some(bin.join("jfr"))
        );
        assert_eq!(jfr_tool(&None, &path).ok(), Some(bin.join("jfr")));
        // one that others may change is passed over, with the reason
        let writable = tool(0o777);
        let found = jfr_tool(&Some(writable.path().into()), &path);
        assert_eq!(found.ok(), Some(bin.join("jfr")));
        let refused = (jfr_tool(&Some(writable.path().into()), &None).unwrap_err()).to_string();
        assert!(refused.contains("mode 777"), "{refused}");
        // one owned by another user (as the target's owner would plant it)
        // SAFETY: geteuid has no arguments and no memory effects.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = tool(0o755);
            std::os::unix::fs::chown(theirs.path().join("bin/jfr"), Some(65534), None).unwrap();
            let refused = (jfr_tool(&Some(theirs.path().into()), &None).unwrap_err()).to_string();
            assert!(refused.contains("owned by uid 65534"), "{refused}");
        }
        assert!((jfr_tool(&None, &None).unwrap_err().to_string()).contains("no jfr tool"));
    }

    const PRINTED: &str = r#"{"recording": {"events": [
        {"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-24T08:04:15.119509299Z", "throwables": 54089}},
        {"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-24T08:04:14.118163914Z", "duration": "PT0S", "throwables": 10970}},
        {"type": "jdk.GarbageCollection", "values": {"startTime": "2026-11-24T08:04:14.5Z"}},
        {"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-24T08:04:16.119Z", "throwables": 108089}}
    ]}}"#;

    #[test]
    fn counts_are_read_in_time_order_and_rated_over_a_window() {
        let counts = throwable_counts(PRINTED.as_bytes()).unwrap();
        assert_eq!(counts.len(), 3);
        assert_eq!(counts[0].throwables, 10970);
        assert_eq!(counts[0].unix_ms, 1_795_507_454_118);
        let (rate, thrown) = rate_within(&counts, 1_795_507_455_000, 1_795_507_457_000).unwrap();
        assert_eq!(thrown, 54_000);
        assert!((rate - 54_000.0 / 1.000).abs() < 100.0, "{rate}");
        assert_eq!(
            rate_within(&counts, 0, 1_795_507_454_500),
            None,
            "one reading"
        );
    }

    /// JDK 17's `jfr print --json --stack-depth 16` of tests/apps/java_locks/LockShop: three
    /// monitor waits in `reserve` (the first event whole, the others without class loaders),
    /// two waits for its ReentrantLock, an idle pool thread's park, a throwable count.
    const LOCK_WAITS: &str = include_str!("../tests/fixtures/jfr-lock-waits.json");

    #[test]
    fn lock_waits_are_summed_per_place_and_second_and_idle_parks_left_out() {
        let read = read_printed(LOCK_WAITS.as_bytes()).unwrap();
        assert_eq!(read.throwables.len(), 1);
        assert_eq!(read.lock_waits.len(), 2, "{:#?}", read.lock_waits);
        let monitor = read
            .lock_waits
            .iter()
            .find(|w| w.place.kind == "monitor")
            .unwrap();
        assert_eq!(monitor.place.lock_class, "LockShop$Inventory");
        assert_eq!(monitor.place.at, "LockShop.reserve(line 44)");
        assert_eq!(monitor.place.threads, 3);
        assert_eq!(
            monitor.place.thread_names,
            ["request-20", "request-21", "request-24"]
        );
        // two waits began in second ...34, one in ...35
        let per_second: Vec<(u64, u32)> = monitor
            .seconds
            .iter()
            .map(|s| (s.unix_s % 100, s.waits))
            .collect();
        assert_eq!(per_second, [(54, 2), (55, 1)], "{:?}", monitor.seconds);
        let first = &monitor.seconds[0];
        assert!((first.wait_ms - (18.550816 + 69.453294)).abs() < 1e-6);
        assert!((first.longest_ms - 69.453294).abs() < 1e-6);
        // the ReentrantLock's waits, past java.util.concurrent.locks' frames
        let park = read
            .lock_waits
            .iter()
            .find(|w| w.place.kind == "park")
            .unwrap();
        assert_eq!(
            park.place.lock_class,
            "java.util.concurrent.locks.ReentrantLock$NonfairSync"
        );
        assert!(park.place.at.starts_with("LockShop.reserve"), "{park:?}");
        assert_eq!(park.seconds.iter().map(|s| s.waits).sum::<u32>(), 2);
        assert!(park.place.frames[0].starts_with("jdk.internal.misc.Unsafe.park"));
    }

    #[test]
    fn the_events_are_found_among_other_fields_and_their_absence_is_an_error() {
        let wrapped = format!(
            r#"{{"version": 2, "recording": {{"chunks": [1, {{"a": []}}], "events": {}}}, "more": null}}"#,
            r#"[{"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-25T06:00:00Z", "throwables": 7}}]"#
        );
        let read = read_printed(wrapped.as_bytes()).unwrap();
        assert_eq!(read.throwables[0].throwables, 7);
        for bad in [
            r#"{"recording": {}}"#,
            r#"{"other": 1}"#,
            r#"{"recording": {"events": []}} x"#,
        ] {
            let err = read_printed(bad.as_bytes()).unwrap_err().to_string();
            assert!(
                err.starts_with("jfr print --json gave what kiln cannot read"),
                "{err}"
            );
        }
        let none = read_printed(r#"{"recording": {"events": []}}"#.as_bytes()).unwrap();
        assert!(none.throwables.is_empty() && none.lock_waits.is_empty());
    }

    #[test]
    fn jfr_durations_are_read_in_ms() {
        assert_eq!(iso_duration_ms("PT0.0185S"), Some(18.5));
        assert_eq!(iso_duration_ms("PT1M2.5S"), Some(62_500.0));
        assert_eq!(iso_duration_ms("PT2H"), Some(7_200_000.0));
        assert_eq!(iso_duration_ms("PT0S"), Some(0.0));
        for bad in ["", "P1D", "PT", "PT1.5", "PTxS", "0.5S"] {
            assert_eq!(iso_duration_ms(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_read_as_jfr_json_give_an_answer_or_an_error(bytes: Vec<u8>) {
            let _ = read_printed(bytes.as_slice());
        }
        #[test]
        fn any_duration_text_gives_a_number_or_none(text in "PT[0-9.HMS]{0,12}") {
            let _ = iso_duration_ms(&text);
        }
    }

    #[test]
    fn what_is_not_jfr_json_is_a_clear_error() {
        assert!(throwable_counts(b"not json")
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        assert!(throwable_counts(b"{\"recording\": {\"events\": []}}")
            .unwrap()
            .is_empty());
    }
}
