//! kiln against a real nginx: the requests kiln reports are the lines nginx logged, nginx
//! closing keep-alive connections after `keepalive_requests` is not an error, and every
//! framing nginx uses (length, chunked, none for HEAD and 204, `Connection: close`) is read
//! to the byte.

use std::net::TcpListener;

use crate::common;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers; SIGKILL would orphan them.
        kiln_runner::child::stop_gracefully(&mut self.child, Duration::from_secs(5));
    }
}

fn nginx_binary() -> PathBuf {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("nginx is not installed: run the README's test command (scripts/test.sh), which installs it");
}

fn start_nginx() -> Nginx {
    start_nginx_with(
        "keepalive_requests 100;",
        r#"location / { return 200 "hello from nginx\n"; }"#,
    )
}

/// nginx with `http_extra` in its http block and `locations` in its one server. The port is
/// chosen free and then given to nginx, so another test may take it in between: nginx then
/// fails to bind, or a probe reaches the other test's listener (a run once met "connect
/// refused" after the probe had connected). Ready is an answer only this nginx gives; else
/// another port.
fn start_nginx_with(http_extra: &str, locations: &str) -> Nginx {
    for _ in 0..5 {
        if let Some(nginx) = try_start_nginx(http_extra, locations) {
            return nginx;
        }
    }
    panic!("nginx did not start on any of 5 ports");
}

fn try_start_nginx(http_extra: &str, locations: &str) -> Option<Nginx> {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // the folder's name is this nginx's own answer to the probe
    let token = dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let conf = format!(
        r#"daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    {http_extra}
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
        location = /kiln-ready {{ return 200 "{token}"; }}
        {locations}
    }}
}}
"#
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let child = Command::new(nginx_binary())
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut nginx = Nginx { child, dir, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if nginx.child.try_wait().unwrap().is_some() {
            return None; // it could not bind the port: another test has it
        }
        if answers_ready(port, &token) {
            // the probe's line says /kiln-ready: the tests count only their own paths
            return Some(nginx);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None // dropped: stopped
}

/// Whether the server on `port` answers /kiln-ready with `token` (this test's nginx).
fn answers_ready(port: u16, token: &str) -> bool {
    http10(port, "/kiln-ready", "").is_ok_and(|answer| answer.ends_with(token.as_bytes()))
}

/// One HTTP/1.0 request on a fresh connection: the whole answer, head and body, as the
/// server sent it before closing.
fn http10(port: u16, path: &str, headers: &str) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n{headers}\r\n")?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    Ok(all)
}

#[test]
fn requests_kiln_counts_are_the_lines_nginx_logged() {
    let _turn = common::beside();
    let nginx = start_nginx();
    let url = format!("http://127.0.0.1:{}/", nginx.port);
    let run = kiln_json(&url, "8", "2s", &[]);
    std::thread::sleep(Duration::from_millis(200));
    let log = std::fs::read_to_string(nginx.dir.path().join("access.log")).unwrap();
    let logged = log
        .lines()
        .filter(|l| l.contains("\"GET / HTTP/1.1\" 200"))
        .count() as u64;
    assert!(logged > 1_000, "only {logged} requests");
    assert_eq!(run["total"]["requests"].as_u64(), Some(logged));
    assert_eq!(run["total"]["status"]["200"].as_u64(), Some(logged));
    assert_eq!(
        run["total"]["failed"], 0,
        "keep-alive closes are not errors: {}",
        run["total"]["errors"]
    );
    assert_eq!(run["total"]["body_bytes"].as_u64(), Some(logged * 17));
    // keepalive_requests 100: nginx closes each connection after 100 requests; kiln reconnects.
    let opened = run["total"]["connections_opened"].as_u64().unwrap();
    assert!(
        opened >= logged / 100,
        "{opened} connections for {logged} requests"
    );
}

/// Runs kiln on `connections` for `duration` with `args` after the URL and returns its JSON
/// summary.
fn kiln_json(url: &str, connections: &str, duration: &str, args: &[&str]) -> serde_json::Value {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            url,
            "-c",
            connections,
            "-d",
            duration,
            "--json",
            "--out",
        ])
        .arg(out_dir.path().join("run"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One HTTP/1.0 request on a fresh connection: nginx answers it without chunking and
/// closes, so the body is everything after the head.
fn body_over_http10(port: u16, path: &str, headers: &str) -> Vec<u8> {
    let all = http10(port, path, headers).unwrap();
    let head = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(!String::from_utf8_lossy(&all[..head]).contains("chunked"));
    all[head..].to_vec()
}

#[test]
fn every_framing_nginx_uses_is_read_to_the_byte() {
    let _turn = common::beside();
    let nginx = start_nginx_with(
        "gzip on; gzip_types text/plain; gzip_min_length 1; gzip_http_version 1.0;",
        r#"location /nothing { return 204; }
        location /closing { keepalive_timeout 0; return 200 "bye\n"; }"#,
    );
    // A static file (Content-Length, sendfile) with varied lines so gzip has work to do.
    let text: String = (0..4000)
        .map(|i| format!("line {i} of the file, {}\n", i * 7919 % 1000))
        .collect();
    std::fs::write(nginx.dir.path().join("www/file.txt"), &text).unwrap();
    let base = format!("http://127.0.0.1:{}", nginx.port);
    let total = |run: &serde_json::Value, key: &str| run["total"][key].as_u64().unwrap();

    let plain = kiln_json(&format!("{base}/file.txt"), "4", "1s", &[]);
    let n = total(&plain, "requests");
    assert!(n > 100 && plain["total"]["failed"] == 0, "{plain}");
    assert_eq!(total(&plain, "body_bytes"), n * text.len() as u64);

    // gzip makes nginx stream the body in chunks; the decoded chunks are the gzip bytes
    // nginx sends unchunked to an HTTP/1.0 client.
    let gz = body_over_http10(nginx.port, "/file.txt", "Accept-Encoding: gzip\r\n");
    assert!(gz.len() < text.len() / 2 && gz.starts_with(&[0x1f, 0x8b]));
    let chunked = kiln_json(
        &format!("{base}/file.txt"),
        "4",
        "1s",
        &["-H", "Accept-Encoding: gzip"],
    );
    let n = total(&chunked, "requests");
    assert!(n > 100 && chunked["total"]["failed"] == 0, "{chunked}");
    assert_eq!(total(&chunked, "body_bytes"), n * gz.len() as u64);

    // HEAD carries a Content-Length but no body: nothing to wait for.
    let head = kiln_json(&format!("{base}/file.txt"), "4", "1s", &["-m", "HEAD"]);
    assert!(
        total(&head, "requests") > 100 && head["total"]["failed"] == 0,
        "{head}"
    );
    assert_eq!(total(&head, "body_bytes"), 0);

    let empty = kiln_json(&format!("{base}/nothing"), "4", "1s", &[]);
    let n = total(&empty, "requests");
    assert!(n > 100 && empty["total"]["failed"] == 0, "{empty}");
    assert_eq!(empty["total"]["status"]["204"].as_u64(), Some(n));

    // Connection: close on every response: a new connection per request, and no errors.
    let closing = kiln_json(&format!("{base}/closing"), "4", "1s", &[]);
    let n = total(&closing, "requests");
    assert!(n > 20 && closing["total"]["failed"] == 0, "{closing}");
    assert_eq!(total(&closing, "body_bytes"), n * 4);
    let opened = total(&closing, "connections_opened");
    assert!(
        opened >= n && opened <= n + 4,
        "{opened} connections for {n} requests"
    );
}

/// nginx over TLS (a self-signed certificate) closing every connection (keepalive_timeout 0)
/// and keeping them: closing, every request pays a TCP connect and a TLS handshake, which
/// the churn finding names with their cost and whether sessions resumed; kept, a handshake
/// serves hundreds of requests, and nothing is found.
#[test]
fn tls_handshakes_on_every_connection_are_churn_and_kept_connections_are_not() {
    let _turn = common::beside();
    let (cert, key) = kiln_targets::self_signed_pem();
    let pem = tempfile::tempdir().unwrap();
    std::fs::write(pem.path().join("cert.pem"), cert).unwrap();
    std::fs::write(pem.path().join("key.pem"), key).unwrap();
    for keepalive in ["0", "75"] {
        let tls_port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = format!(
            r#"server {{
        listen 127.0.0.1:{tls_port} ssl;
        ssl_certificate {p}/cert.pem;
        ssl_certificate_key {p}/key.pem;
        keepalive_timeout {keepalive};
        location / {{ return 200 "hello over TLS\n"; }}
    }}"#,
            p = pem.path().display()
        );
        let _nginx = start_nginx_with(&server, "");
        let v = kiln_json(
            &format!("https://127.0.0.1:{tls_port}/"),
            "2",
            "2s",
            &["--insecure", "--quiet"],
        );
        let wire = &v["total"]["wire"];
        let churn = common::finding(&v, "net.connection-churn");
        let handshakes = wire["tls_handshakes"].as_u64().unwrap();
        assert_eq!(
            handshakes,
            wire["connections_opened"].as_u64().unwrap(),
            "{wire:#}"
        );
        assert!(wire["tls_mean_us"].as_f64().unwrap() > 0.0, "{wire:#}");
        if keepalive == "0" {
            let churn = churn.unwrap_or_else(|| panic!("no churn finding: {:#}", v["findings"]));
            let evidence = churn["evidence"].to_string();
            assert!(evidence.contains("of TLS handshake"), "{churn:#}");
            assert!(evidence.contains("resumed a session"), "{churn:#}");
            assert!(handshakes > 50, "{wire:#}");
            // nginx hands out session tickets: most reconnections resume
            assert!(
                wire["tls_resumed"].as_u64().unwrap() > handshakes / 2,
                "{wire:#}"
            );
        } else {
            assert!(churn.is_none(), "{:#}", v["findings"]);
            // nginx closes a kept connection after keepalive_requests (1000): still
            // hundreds of requests a handshake
            assert!(
                wire["requests_per_connection"].as_f64().unwrap() > 500.0,
                "{wire:#}"
            );
        }
    }
}

/// nginx over h2c ends each HTTP/2 connection after `keepalive_requests` with a GOAWAY: kiln
/// takes it as the end of the connection, as it takes HTTP/1.1's `Connection: close`, opens
/// another, and counts no failure (nginx's log has each request once).
#[test]
fn nginx_ending_http2_connections_with_goaway_fails_no_request() {
    let _turn = common::beside();
    let h2_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nginx = start_nginx_with(
        &format!(
            r#"server {{
        listen 127.0.0.1:{h2_port} http2;
        keepalive_requests 20;
        location / {{ return 200 "hello over h2c\n"; }}
    }}"#
        ),
        r#"location / { return 200 "hello from nginx\n"; }"#,
    );
    let url = format!("http://127.0.0.1:{h2_port}/h2");
    let runs = tempfile::tempdir().unwrap();
    let run_dir = runs.path().join("run");
    let out = common::kiln(&[
        "run",
        &url,
        "--http2",
        "-c",
        "4",
        "-d",
        "2s",
        "--json",
        "-q",
        "--out",
        run_dir.to_str().unwrap(),
    ]);
    let v = common::json_with_exit(&out, 0);
    let total = &v["total"];
    let requests = total["requests"].as_u64().unwrap();
    // many connections ended by nginx, none of their last requests lost
    assert!(requests > 20 * 4 * 10, "{total}");
    assert!(
        total["wire"]["closed_by_target"].as_u64().unwrap() >= requests / 20 - 4,
        "{total}"
    );
    assert_eq!(total["failed"], 0, "{total}");
    let logged = std::fs::read_to_string(nginx.dir.path().join("access.log")).unwrap();
    assert_eq!(
        logged.matches("GET /h2 ").count() as u64,
        requests,
        "{total}"
    );
}
