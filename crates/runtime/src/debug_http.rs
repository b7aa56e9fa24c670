//! The few HTTP GETs kiln makes to a Go target's own debug pages (expvar's `/debug/vars`,
//! pprof's goroutine dump) on the addresses it listens on: HTTP/1.0 over a plain socket, a
//! bounded answer and short timeouts. Never anything but a GET.

use crate::error::io;
use crate::RuntimeError;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The largest page read (memstats with its 256-entry arrays is about 10 KiB, a goroutine
/// dump grows with the goroutines, an execution trace of a busy service is megabytes a
/// second; an application may publish more of its own).
const MAX_PAGE: u64 = 64 * 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(2);

/// `GET path` over HTTP/1.0 (no chunked answer, the connection closed after it): the body of
/// a 200 answer.
pub(crate) fn get(addr: SocketAddr, path: &str) -> Result<Vec<u8>, RuntimeError> {
    get_within(addr, path, TIMEOUT)
}

/// As [`get`], for a page that takes its time (an execution trace of N seconds).
pub(crate) fn get_within(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<Vec<u8>, RuntimeError> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(io(format!("cannot connect to {addr}")))?;
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(io(format!("{addr}")))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_PAGE)
        .read_to_end(&mut answer)
        .map_err(io(format!("{addr}{path}")))?;
    let head_end = memchr::memmem::find(&answer, b"\r\n\r\n")
        .ok_or_else(|| format!("{addr}{path}: not an HTTP answer"))?;
    let status_line = answer[..head_end]
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    let status = String::from_utf8_lossy(status_line);
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{addr}{path}: {}", status.trim()).into());
    }
    Ok(answer.split_off(head_end + 4))
}

/// The first of `addrs` whose `path` answers with a body `accept` takes; every address's
/// reason otherwise, or that there was none to ask.
pub(crate) fn first_serving<T>(
    addrs: &[SocketAddr],
    path: &str,
    accept: impl Fn(SocketAddr, Vec<u8>) -> Result<T, RuntimeError>,
) -> Result<T, RuntimeError> {
    let mut why = Vec::new();
    for addr in addrs {
        match get(*addr, path).and_then(|body| accept(*addr, body)) {
            Ok(found) => return Ok(found),
            Err(e) => why.push(e.to_string()),
        }
    }
    if why.is_empty() {
        return Err("it listens on no TCP port".into());
    }
    Err(why.join("; ").into())
}
