//! kiln against a real nginx: the requests kiln reports are the lines nginx logged, and
//! nginx closing keep-alive connections after `keepalive_requests` is not an error.

use std::net::TcpListener;
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
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
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
    keepalive_requests 100;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "hello from nginx\n"; }}
    }}
}}
"#
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let child = Command::new(nginx_binary())
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The readiness probe above is not an HTTP request, so it is not logged.
    Nginx { child, dir, port }
}

#[test]
fn requests_kiln_counts_are_the_lines_nginx_logged() {
    let nginx = start_nginx();
    let url = format!("http://127.0.0.1:{}/", nginx.port);
    let out_dir = nginx.dir.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            &url,
            "-c",
            "8",
            "-d",
            "2s",
            "--json",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
