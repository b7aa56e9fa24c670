//! HTTP/1.1 on the wire, without I/O: the request encoded once per phase, and a response
//! reader fed whatever bytes arrive.
//!
//! Why not hyper's client: a load generator sends one fixed request and needs only the
//! status, the body's framing and its size. hyper's client dispatch (request channel, header
//! maps, body frames, a task's waker per step) was two thirds of kiln's own user-space CPU
//! in perf, and the per-CPU-second goal against wrk is decided there. The parsing itself
//! is httparse's (hyper's parser, SIMD): status line and headers, chunk-size lines and
//! trailers. What is written here is the framing of RFC 9112 section 6.3 on top.

use std::mem::MaybeUninit;

use http::{HeaderName, HeaderValue, Method};
use kiln_record::ErrorKind;

/// A response head (status line and headers) larger than this is refused as bad.
pub const MAX_HEAD: usize = 64 * 1024;
/// Headers read per response head; more is a bad response.
const MAX_HEADERS: usize = 100;
/// A chunk-size line (with extensions) longer than this is a bad response.
const MAX_CHUNK_LINE: usize = 4096;
/// Body bytes kept for a scenario's extractions and checks; the rest is counted, not kept.
pub const MAX_CAPTURED_BODY: usize = 4 * 1024 * 1024;

/// A response's headers and body, kept only when a scenario reads them (extractions,
/// checks, cookies); a plain load run keeps nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// Header names in lower case, values as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// The body was longer than [`MAX_CAPTURED_BODY`]; `body` is its start.
    pub body_truncated: bool,
}

impl Captured {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Keeps body bytes, up to [`MAX_CAPTURED_BODY`].
    pub(crate) fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_CAPTURED_BODY.saturating_sub(self.body.len());
        if bytes.len() > room {
            self.body_truncated = true;
        }
        self.body.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// The request bytes every connection of a phase sends.
pub fn encode_request(
    method: &Method,
    path_and_query: &str,
    authority: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let has = |name: &HeaderName| headers.iter().any(|(n, _)| n == name);
    if !has(&http::header::HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(authority.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // A body is framed by its length unless the user framed it; methods that carry a body
    // say so even when it is empty (as curl and hyper do).
    let framed = has(&http::header::CONTENT_LENGTH) || has(&http::header::TRANSFER_ENCODING);
    let carries_body = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if !framed && (!body.is_empty() || carries_body) {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// What is known of a complete response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The body's size after chunked decoding.
    pub body_bytes: u64,
    /// False when the server said it closes the connection (or must, to end the body).
    pub keep_alive: bool,
    /// A gRPC call's answer (see [`crate::connection`]'s gRPC answers); None otherwise.
    pub grpc: Option<GrpcAnswer>,
}

/// A gRPC call's status and the messages that came with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcAnswer {
    /// `grpc-status`, or the code an HTTP error maps to.
    pub code: u8,
    /// Whole messages received.
    pub messages: u32,
    /// When the first whole message had arrived.
    pub first_message: Option<std::time::Instant>,
    /// A failed call's `grpc-message`, decoded (percent-encoding undone), at most
    /// [`kiln_record::grpc::MAX_GRPC_MESSAGE`] bytes.
    pub message: Option<Box<str>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    /// Bytes of a Content-Length body still to come.
    Length(u64),
    ChunkSize,
    /// Bytes of the current chunk still to come.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    Trailers,
    /// No length given: the body ends when the server closes the connection.
    UntilClose,
    Done,
}

/// Reads one response from the bytes given to [`ResponseReader::advance`], in any split.
pub struct ResponseReader {
    state: State,
    head_request: bool,
    response: Response,
    /// Headers and body kept for a scenario; `None` on the plain load path.
    captured: Option<Box<Captured>>,
}

/// The outcome of [`ResponseReader::advance`]: how many input bytes were used, and whether
/// the response is complete (the rest of the input belongs to what comes next).
#[derive(Debug, PartialEq, Eq)]
pub struct Progress {
    pub consumed: usize,
    pub complete: bool,
}

impl ResponseReader {
    /// A reader for the response to a request of `method` (HEAD responses have no body).
    pub fn new(method: &Method) -> Self {
        Self {
            state: State::Head,
            head_request: *method == Method::HEAD,
            response: Response {
                status: 0,
                body_bytes: 0,
                keep_alive: true,
                grpc: None,
            },
            captured: None,
        }
    }

    /// Starts over for a response to `method`, keeping its headers and body when `capture`.
    pub fn reset_for(&mut self, method: &Method, capture: bool) {
        self.reset();
        self.head_request = *method == Method::HEAD;
        self.captured = capture.then(Box::default);
    }

    /// The kept headers and body of the last response (empty unless asked for).
    pub fn take_captured(&mut self) -> Captured {
        self.captured.take().map(|c| *c).unwrap_or_default()
    }

    /// Starts over for the next response on the same connection.
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.response = Response {
            status: 0,
            body_bytes: 0,
            keep_alive: true,
            grpc: None,
        };
    }

    pub fn response(&self) -> Response {
        // an HTTP/1.1 response has no gRPC answer: a copy of plain words
        self.response.clone()
    }

    /// Uses as much of `input` as it can. Bytes not consumed must be offered again, with
    /// more after them.
    pub fn advance(&mut self, input: &[u8]) -> Result<Progress, ErrorKind> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            let step = match self.state {
                State::Done => {
                    return Ok(Progress {
                        consumed: used,
                        complete: true,
                    })
                }
                State::UntilClose => {
                    self.response.body_bytes += rest.len() as u64;
                    self.keep(rest);
                    rest.len()
                }
                _ if rest.is_empty() => 0,
                State::Head => self.head(rest)?,
                State::Length(left) => {
                    let n = left.min(rest.len() as u64);
                    self.response.body_bytes += n;
                    self.keep(&rest[..n as usize]);
                    self.state = if n == left {
                        State::Done
                    } else {
                        State::Length(left - n)
                    };
                    n as usize
                }
                State::ChunkSize => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((n, 0))) => {
                        self.state = State::Trailers;
                        n
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        self.state = State::ChunkData(size);
                        n
                    }
                    Ok(httparse::Status::Partial) if rest.len() < MAX_CHUNK_LINE => 0,
                    _ => return Err(ErrorKind::BadResponse),
                },
                State::ChunkData(left) => {
                    let n = left.min(rest.len() as u64);
                    self.response.body_bytes += n;
                    self.keep(&rest[..n as usize]);
                    self.state = if n == left {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left - n)
                    };
                    n as usize
                }
                State::ChunkEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        self.state = State::ChunkSize;
                        2
                    }
                    [b'\r'] => 0,
                    _ => return Err(ErrorKind::BadResponse),
                },
                State::Trailers => {
                    let mut trailers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    match httparse::parse_headers(rest, &mut trailers) {
                        Ok(httparse::Status::Complete((n, _))) => {
                            self.state = State::Done;
                            n
                        }
                        Ok(httparse::Status::Partial) if rest.len() < MAX_HEAD => 0,
                        _ => return Err(ErrorKind::BadResponse),
                    }
                }
            };
            if step == 0 {
                return Ok(Progress {
                    consumed: used,
                    complete: self.state == State::Done,
                });
            }
            used += step;
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if let Some(c) = &mut self.captured {
            c.keep(bytes);
        }
    }

    /// The connection was closed: the response ends here if its body runs until the close.
    pub fn end_of_input(&mut self) -> Result<Response, ErrorKind> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                self.response.keep_alive = false;
                Ok(self.response.clone())
            }
            _ => Err(ErrorKind::Reset),
        }
    }

    /// Parses a response head from the start of `input`; 0 when it is not all there yet.
    fn head(&mut self, input: &[u8]) -> Result<usize, ErrorKind> {
        // Uninitialized header slots: zeroing 100 of them was a visible share of each parse.
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let config = httparse::ParserConfig::default();
        let len = match config.parse_response_with_uninit_headers(&mut parsed, input, &mut headers)
        {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if input.len() < MAX_HEAD => return Ok(0),
            _ => return Err(ErrorKind::BadResponse),
        };
        let status = parsed.code.unwrap_or(0);
        // 1xx (100 Continue, 103 Early Hints) come before the real response; 101 would
        // switch protocols, which a load test of HTTP cannot follow.
        if (100..200).contains(&status) && status != 101 {
            return Ok(len);
        }
        if let Some(c) = &mut self.captured {
            c.headers = parsed
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), trim(h.value).to_vec()))
                .collect();
        }
        let mut content_length: Option<u64> = None;
        let mut chunked = false;
        let mut other_coding = false;
        let mut close = parsed.version == Some(0);
        for h in parsed.headers.iter() {
            let value = trim(h.value);
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or(ErrorKind::BadResponse)?;
                if content_length.is_some_and(|m| m != n) {
                    return Err(ErrorKind::BadResponse);
                }
                content_length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Only the last coding frames the body (RFC 9112 6.3).
                let last = value.rsplit(|&b| b == b',').next().map(trim);
                chunked = last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"));
                other_coding = !chunked;
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        close = false;
                    }
                }
            }
        }
        self.response.status = status;
        self.response.keep_alive = !close;
        self.state = if self.head_request || status == 204 || status == 304 {
            State::Done
        } else if chunked {
            State::ChunkSize
        } else if other_coding || content_length.is_none() {
            self.response.keep_alive = false;
            State::UntilClose
        } else {
            match content_length {
                Some(0) => State::Done,
                Some(n) => State::Length(n),
                None => State::UntilClose,
            }
        };
        Ok(len)
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}

/// One request of a scenario, rendered: HTTP/1.1 bytes or HTTP/2 frames are made from it.
#[derive(Clone, Debug, Default)]
pub struct RequestParts {
    pub method: http::Method,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub body: bytes::Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `wire` in pieces of the given sizes (cycled) the way a connection would: the
    /// unconsumed rest is offered again with the next piece. Returns the response and the
    /// bytes left after it.
    fn read_split(
        method: &Method,
        wire: &[u8],
        pieces: &[usize],
    ) -> Result<(Response, usize), ErrorKind> {
        let mut reader = ResponseReader::new(method);
        let (mut start, mut end) = (0, 0);
        let mut sizes = pieces.iter().copied().cycle();
        loop {
            let p = reader.advance(&wire[start..end])?;
            start += p.consumed;
            if p.complete {
                return Ok((reader.response(), end - start));
            }
            if end == wire.len() {
                return reader.end_of_input().map(|r| (r, 0));
            }
            end = (end + sizes.next().unwrap_or(1).max(1)).min(wire.len());
        }
    }

    fn read(wire: &[u8]) -> Result<(Response, usize), ErrorKind> {
        read_split(&Method::GET, wire, &[wire.len().max(1)])
    }

    #[test]
    fn content_length_and_what_follows() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
        let (r, left) = read(wire).unwrap();
        assert_eq!((r.status, r.body_bytes, r.keep_alive), (200, 5, true));
        assert_eq!(left, 8, "the next response's bytes stay for it");
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
            4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n";
        for split in [1, 2, 3, 7, 1000] {
            let (r, left) = read_split(&Method::GET, wire, &[split]).unwrap();
            assert_eq!(
                (r.status, r.body_bytes, left),
                (200, 23, 0),
                "split {split}"
            );
        }
    }

    #[test]
    fn body_until_close_when_no_length() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of this";
        let (r, _) = read(wire).unwrap();
        assert_eq!((r.body_bytes, r.keep_alive), (11, false));
    }

    #[test]
    fn connection_close_and_http10() {
        let (r, _) =
            read(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
        let (r, _) = read(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok").unwrap();
        assert!(!r.keep_alive);
        let (r, _) =
            read(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
        assert!(r.keep_alive);
    }

    #[test]
    fn informational_responses_are_skipped() {
        let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
            HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        let (r, _) = read_split(&Method::POST, wire, &[5]).unwrap();
        assert_eq!((r.status, r.body_bytes), (201, 2));
    }

    #[test]
    fn no_body_for_head_204_304() {
        let (r, left) = read_split(
            &Method::HEAD,
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
            &[64],
        )
        .unwrap();
        assert_eq!((r.body_bytes, left), (0, 0));
        let (r, _) = read(b"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n").unwrap();
        assert_eq!((r.status, r.body_bytes, r.keep_alive), (204, 0, true));
        let (r, _) = read(b"HTTP/1.1 304 Not Modified\r\n\r\n").unwrap();
        assert_eq!((r.status, r.keep_alive), (304, true));
    }

    #[test]
    fn bad_and_cut_responses() {
        let bad = [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"SSH-2.0-OpenSSH_9.2\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n",
        ];
        for wire in bad {
            assert_eq!(
                read(wire).err(),
                Some(ErrorKind::BadResponse),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let cut = [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"[..],
            b"HTTP/1.1 200 OK\r\nContent-Le",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            b"",
        ];
        for wire in cut {
            assert_eq!(
                read(wire).err(),
                Some(ErrorKind::Reset),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let huge = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(read(huge.as_bytes()).err(), Some(ErrorKind::BadResponse));
    }

    #[test]
    fn request_encoding() {
        let h = |n: &str, v: &str| {
            (
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        };
        let get = encode_request(
            &Method::GET,
            "/a?b=1",
            "127.0.0.1:80",
            &[h("accept", "*/*")],
            b"",
        );
        assert_eq!(
            get,
            b"GET /a?b=1 HTTP/1.1\r\nhost: 127.0.0.1:80\r\naccept: */*\r\n\r\n"
        );
        let post = encode_request(&Method::POST, "/", "x", &[], b"");
        assert!(post.ends_with(b"content-length: 0\r\n\r\n"));
        let own = encode_request(
            &Method::PUT,
            "/",
            "x",
            &[h("Host", "y"), h("content-length", "2")],
            b"ab",
        );
        assert_eq!(
            own,
            b"PUT / HTTP/1.1\r\nhost: y\r\ncontent-length: 2\r\n\r\nab"
        );
        let mut parsed = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut parsed);
        assert!(
            req.parse(&own).unwrap().is_complete(),
            "httparse reads what we send"
        );
    }

    proptest! {
        /// Any bytes in any split: an error or a response, never a panic, and never more
        /// consumed than given.
        #[test]
        fn any_bytes_any_split(wire in proptest::collection::vec(any::<u8>(), 0..600),
                               pieces in proptest::collection::vec(1usize..40, 1..8)) {
            let _ = read_split(&Method::GET, &wire, &pieces);
        }

        /// A chunked body of random chunks, split anywhere, decodes to its exact size.
        #[test]
        fn chunked_body_size_is_exact(chunks in proptest::collection::vec(1usize..300, 0..12),
                                      pieces in proptest::collection::vec(1usize..50, 1..8)) {
            let mut wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for c in &chunks {
                wire.extend_from_slice(format!("{c:x}\r\n").as_bytes());
                wire.extend(std::iter::repeat_n(b'x', *c));
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\nNEXT");
            let (r, left) = read_split(&Method::GET, &wire, &pieces).unwrap();
            prop_assert_eq!(r.body_bytes, chunks.iter().sum::<usize>() as u64);
            prop_assert!(left <= 4);
        }
    }
}
