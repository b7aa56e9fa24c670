//! A throwaway PostgreSQL server for tests: a fresh cluster in a temporary directory, on a
//! free loopback port, with trust authentication, stopped and removed on drop. Run as the
//! `postgres` user when the tests run as root (PostgreSQL refuses to run as root).

use std::io;
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Postgres {
    child: Child,
    dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
    user: Option<(u32, u32)>,
}

/// The newest installed server's binaries (Debian's /usr/lib/postgresql/<major>/bin).
pub fn bin_dir() -> io::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let major = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no PostgreSQL server in /usr/lib/postgresql (apt-get install postgresql)",
        )
    })
}

/// uid and gid of a user, from /etc/passwd.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// The file under the data directory where `start_logging_statements` logs.
const STATEMENT_LOG: &str = "log/statements.log";

impl Postgres {
    pub fn start() -> io::Result<Self> {
        Self::start_with(&[])
    }

    /// A server that logs every statement it runs (`log_statement = all`): the truth of
    /// what an application sent, read back by [`Postgres::statements`].
    pub fn start_logging_statements() -> io::Result<Self> {
        Self::start_with(&[
            "logging_collector=on",
            "log_directory=log",
            "log_filename=statements.log",
            "log_statement=all",
        ])
    }

    /// The statements the server logged so far (`start_logging_statements`), in order, each
    /// as it was sent.
    pub fn statements(&self) -> io::Result<Vec<String>> {
        let log = std::fs::read_to_string(self.dir.join("data").join(STATEMENT_LOG))?;
        let mut out: Vec<String> = Vec::new();
        for line in log.lines() {
            // the simple protocol's `statement: `, the extended one's `execute NAME: ` (psycopg
            // 3, JDBC; NAME is `<unnamed>` or a prepared statement's)
            let extended = line
                .split_once("LOG:  execute ")
                .and_then(|(_, rest)| rest.split_once(": "));
            let statement = line.split_once("LOG:  statement: ").or(extended);
            match statement {
                Some((_, statement)) => out.push(statement.to_string()),
                // a statement's further lines are indented by a tab
                None if line.starts_with('\t') => {
                    if let Some(last) = out.last_mut() {
                        last.push('\n');
                        last.push_str(&line[1..]);
                    }
                }
                None => {}
            }
        }
        Ok(out)
    }

    fn start_with(settings: &[&str]) -> io::Result<Self> {
        let bin = bin_dir()?;
        // SAFETY: geteuid has no preconditions
        let root = unsafe { libc::geteuid() } == 0;
        let user =
            if root {
                Some(user_ids("postgres").ok_or_else(|| {
                    io::Error::other("running as root and there is no postgres user")
                })?)
            } else {
                None
            };
        let dir = std::env::temp_dir().join(format!(
            "kiln-pg-{}-{}",
            std::process::id(),
            crate::free_port()?
        ));
        std::fs::create_dir_all(&dir)?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "-A",
                "trust",
                "-U",
                "kiln",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_user(&mut initdb, user);
        let out = initdb.output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let port = crate::free_port()?;
        let mut server = Command::new(bin.join("postgres"));
        server
            .arg("-D")
            .arg(&data)
            .args([
                "-p",
                &port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
            ])
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(settings.iter().flat_map(|s| ["-c", s]))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_user(&mut server, user);
        let child = server.spawn()?;
        let pg = Postgres {
            child,
            dir,
            port,
            bin,
            user,
        };
        pg.wait_ready()?;
        Ok(pg)
    }

    fn wait_ready(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok()
                && self.psql("SELECT 1").is_ok()
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(io::Error::other("PostgreSQL did not start within 30 s"))
    }

    /// A libpq connection string to the `postgres` database as superuser `kiln`.
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=kiln dbname=postgres",
            self.port
        )
    }

    /// A JDBC URL to the same database.
    pub fn jdbc_url(&self) -> String {
        format!(
            "jdbc:postgresql://127.0.0.1:{}/postgres?user=kiln",
            self.port
        )
    }

    /// Runs SQL through psql; its output on success.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.conninfo())
            .args(["-c", sql])
            .output()?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the server runs as another user (root's tests).
    pub fn runs_as_other_user(&self) -> bool {
        self.user.is_some()
    }
}

fn as_user(cmd: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid).env("HOME", "/tmp");
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown
        // SAFETY: signals our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
