//! A real Prometheus (Debian's `prometheus`; scripts/test.sh installs it) on loopback, its
//! remote-write receiver and native histograms on, queried through its HTTP API.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::apps::{free_port, Killed};

pub struct Prometheus {
    pub port: u16,
    _server: Killed,
}

impl Prometheus {
    /// Started with its data in `dir`, ready when this returns.
    pub fn start(dir: &Path) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 15s\n").unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-remote-write-receiver")
            .arg("--enable-feature=native-histograms")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts (scripts/test.sh installs Debian's package)");
        let server = Killed(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = http_get(port, "/-/ready") {
                break;
            }
            let said = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "prometheus is not ready:\n{said}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Self {
            port,
            _server: server,
        }
    }

    /// The remote-write URL, as `--export prometheus=` takes it.
    pub fn write_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/write", self.port)
    }

    /// An instant query's result vector.
    pub fn query(&self, expr: &str) -> Vec<Value> {
        self.query_at(expr, None)
    }

    /// An instant query's result at `time` (Unix seconds), or now.
    pub fn query_at(&self, expr: &str, time: Option<f64>) -> Vec<Value> {
        let mut path = format!("/api/v1/query?query={}", percent_encode(expr));
        if let Some(t) = time {
            path.push_str(&format!("&time={t:.3}"));
        }
        let (status, body) = http_get(self.port, &path).expect("prometheus answers");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        assert_eq!(status, 200, "{expr}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The one number an instant query gives.
    pub fn number(&self, expr: &str) -> f64 {
        let result = self.query(expr);
        assert_eq!(result.len(), 1, "{expr}: {result:?}");
        result[0]["value"][1].as_str().unwrap().parse().unwrap()
    }
}

fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // Go's server chunks a long answer: the JSON is between the chunk sizes
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An OpenTelemetry Collector (tests/apps/otelcol: the stock OTLP receiver and the contrib
/// remote-write exporter) writing what it receives into `prometheus`.
pub struct Collector {
    pub port: u16,
    _collector: Killed,
}

impl Collector {
    pub fn start(dir: &Path, prometheus: &Prometheus) -> Self {
        let bin = super::apps::go_app("otelcol");
        let port = free_port();
        let config = dir.join("collector.yaml");
        // its own telemetry off: it would listen on :8888, which tests beside it share
        let yaml = format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
             exporters:\n  prometheusremotewrite:\n    endpoint: {}\n\
             service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    metrics:\n      \
             receivers: [otlp]\n      exporters: [prometheusremotewrite]\n",
            prometheus.write_url()
        );
        std::fs::write(&config, yaml).unwrap();
        let log = std::fs::File::create(dir.join("collector.log")).unwrap();
        let mut child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the collector starts");
        super::apps::wait_port_for(port, &mut child, "the collector", Duration::from_secs(60));
        Self {
            port,
            _collector: Killed(child),
        }
    }

    /// The OTLP/HTTP base URL, as `--export otlp=` takes it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
