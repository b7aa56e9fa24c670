//! TCP sockets from /proc/net/tcp and tcp6: state, queues and peers, and which of them a
//! process owns (its fd links name `socket:[inode]`). Like `ss -tn`: Send-Q is the bytes
//! not yet acknowledged by the peer, Recv-Q the bytes not yet read by the process; on a
//! listening socket Recv-Q is the accept queue's length. (Its limit, the backlog, is not in
//! /proc/net/tcp: `ss` asks netlink for it; ListenOverflows in the kernel counters says when
//! it was hit.)

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

/// One line of /proc/net/tcp or tcp6.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: &'static str,
    pub send_q: u64,
    pub recv_q: u64,
    pub inode: u64,
}

/// The kernel's TCP state numbers (include/net/tcp_states.h), named as `ss` names them.
fn state_name(hex: &str) -> &'static str {
    match u8::from_str_radix(hex, 16).unwrap_or(0) {
        1 => "ESTAB",
        2 => "SYN-SENT",
        3 => "SYN-RECV",
        4 => "FIN-WAIT-1",
        5 => "FIN-WAIT-2",
        6 => "TIME-WAIT",
        7 => "CLOSE",
        8 => "CLOSE-WAIT",
        9 => "LAST-ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        _ => "UNKNOWN",
    }
}

/// `0100007F:1F90` (IPv4, bytes of a little-endian word) or 32 hex digits (IPv6, four such
/// words) and a port.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_le_bytes(),
        )
    };
    match ip.len() {
        8 => Some(SocketAddr::new(Ipv4Addr::from(word(0)?).into(), port)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(SocketAddr::new(Ipv6Addr::from(bytes).into(), port))
        }
        _ => None,
    }
}

/// Every well-formed line of a /proc/net/tcp or tcp6 table (the header and odd lines skipped).
pub fn parse_tcp_table(text: &str) -> Vec<TcpSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(TcpSocket {
                local: parse_address(f.get(1)?)?,
                remote: parse_address(f.get(2)?)?,
                state: state_name(f.get(3)?),
                send_q: u64::from_str_radix(tx, 16).ok()?,
                recv_q: u64::from_str_radix(rx, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// A process's TCP sockets at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketSummary {
    pub by_state: BTreeMap<String, u64>,
    /// The connection with the most unacknowledged bytes, and how many.
    pub max_send_q: Option<(String, u64)>,
    /// The connection with the most unread bytes, and how many.
    pub max_recv_q: Option<(String, u64)>,
    /// Connections holding bytes the process has not read yet (a request waiting for a
    /// thread to read it, when the process is a server).
    #[serde(default)]
    pub unread: u64,
    /// Listening sockets: address and connections waiting to be accepted.
    pub listen: Vec<(String, u64)>,
    /// Listening sockets: address, connections waiting, and the backlog limit (from
    /// sock_diag; empty when it could not be asked).
    #[serde(default)]
    pub listen_backlog: Vec<(String, u64, u64)>,
    /// Listening sockets: address, and the connections the kernel dropped at it because its
    /// queue was full, counted since it was opened (from sock_diag; empty when not known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_dropped: Vec<(String, u64)>,
    /// The process's own connections over the second: TCP segments sent again, and sent
    /// in all (sock_diag's tcp_info; None when not known). The host's Tcp counters count
    /// every process's; these tell the target's losses from a neighbour's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrans_segs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_segs: Option<u64>,
}

impl SocketSummary {
    pub fn of<'a>(sockets: impl IntoIterator<Item = &'a TcpSocket>) -> Self {
        let mut out = Self::default();
        for s in sockets {
            *out.by_state.entry(s.state.to_string()).or_default() += 1;
            if s.state == "LISTEN" {
                out.listen.push((s.local.to_string(), s.recv_q));
                continue;
            }
            if out.max_send_q.as_ref().is_none_or(|(_, q)| s.send_q > *q) && s.send_q > 0 {
                out.max_send_q = Some((s.remote.to_string(), s.send_q));
            }
            if s.recv_q > 0 {
                out.unread += 1;
            }
            if out.max_recv_q.as_ref().is_none_or(|(_, q)| s.recv_q > *q) && s.recv_q > 0 {
                out.max_recv_q = Some((s.remote.to_string(), s.recv_q));
            }
        }
        out.listen.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000080:00000003 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00010000:00000000 01:00000014 00000000     0        0 2222 1 0000000000000000 20 4 30 10 -1\n\
   2: 0100007F:1F90 0100007F:C351 01 00000000:00000200 00:00000000 00000000     0        0 3333 1 0000000000000000 20 4 30 10 -1\n\
   3: garbage\n";

    #[test]
    fn a_table_reads_like_ss() {
        let t = parse_tcp_table(TCP);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].local.to_string(), "127.0.0.1:8080");
        assert_eq!((t[0].state, t[0].recv_q), ("LISTEN", 3));
        assert_eq!(
            (t[1].state, t[1].send_q, t[1].remote.port()),
            ("ESTAB", 65536, 50000)
        );
        let s = SocketSummary::of(&t);
        assert_eq!(s.by_state["ESTAB"], 2);
        assert_eq!(s.max_send_q, Some(("127.0.0.1:50000".into(), 65536)));
        assert_eq!(s.max_recv_q, Some(("127.0.0.1:50001".into(), 512)));
        // one connection with unread bytes; the listener's queue is not one
        assert_eq!(s.unread, 1);
        assert_eq!(s.listen, [("127.0.0.1:8080".into(), 3)]);
    }

    #[test]
    fn ipv6_addresses_decode() {
        // ::1 port 443, as /proc/net/tcp6 writes it.
        let a = parse_address("00000000000000000000000001000000:01BB").unwrap();
        assert_eq!(a.to_string(), "[::1]:443");
    }

    proptest! {
        #[test]
        fn no_table_text_panics(text in "\\PC{0,400}") {
            let _ = parse_tcp_table(&text);
        }
    }
}
