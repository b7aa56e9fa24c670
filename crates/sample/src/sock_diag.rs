//! Listen backlog limits from the kernel's sock_diag netlink interface (what `ss -lt` shows
//! as a listener's Send-Q). /proc/net/tcp gives a listener's current accept queue but not
//! the limit it was created with, so "how full is the backlog" needs this.
//!
//! The request is one fixed 72-byte message and the answers are fixed-layout records
//! (`inet_diag_msg`) followed by attributes, over the small netlink helpers of `netlink.rs`.
//! One attribute is asked for: the socket's memory figures, whose last is `sk_drops`. On a
//! listener the kernel counts there every connection it dropped because that listener's
//! queue was full (`tcp_listendrop`), which tells its drops from the rest of the host's.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::netlink::{attributes, messages, Message, NetlinkSocket, NLM_F_REQUEST};

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_DUMP: u16 = 0x300;
const TCP_LISTEN: u32 = 10;
/// inet_diag_msg: family, state, timer, retrans (4), sockid (48), expires, rqueue, wqueue,
/// uid, inode (20).
const DIAG_MSG: usize = 72;
/// The `sk_meminfo` attribute (INET_DIAG_SKMEMINFO), asked for by its bit in the request's
/// extensions byte, and the place of `sk_drops` in its array of u32 (SK_MEMINFO_DROPS).
const INET_DIAG_SKMEMINFO: u16 = 7;
const SK_MEMINFO_DROPS: usize = 8;
/// The `tcp_info` attribute (INET_DIAG_INFO) and the places in it of `tcpi_total_retrans`
/// and `tcpi_segs_out` (Linux 4.2 and later; an older kernel's shorter struct has no
/// segs_out and gives no figures).
const INET_DIAG_INFO: u16 = 2;
const TCPI_TOTAL_RETRANS: usize = 100;
const TCPI_SEGS_OUT: usize = 136;

/// A listening TCP socket: its inode, connections waiting to be accepted, and the backlog
/// limit (`listen()`'s argument, capped by net.core.somaxconn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenQueue {
    pub inode: u64,
    pub queued: u32,
    pub limit: u32,
    /// Connections dropped at this listener since it was opened (its `sk_drops`); None on a
    /// kernel that does not report it.
    pub drops: Option<u32>,
    /// The address it listens on (None for a family other than IPv4 and IPv6).
    pub local: Option<SocketAddr>,
}

/// inet_diag_req_v2: family, protocol, extensions, pad, states, then a zero sockid.
fn request(family: u8, extension: u16, states: u32) -> Vec<u8> {
    let mut req = Vec::with_capacity(56);
    let extensions = 1u8 << (extension - 1);
    req.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, extensions, 0]);
    req.extend_from_slice(&states.to_ne_bytes());
    req.extend_from_slice(&[0u8; 48]);
    req
}

/// Sends one dump request per address family and hands each answer record (the
/// `inet_diag_msg` and its attributes) to `each`.
fn dump(extension: u16, states: u32, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let mut socket = NetlinkSocket::open(NETLINK_SOCK_DIAG)?;
    let mut buf = vec![0u8; 32 * 1024];
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        socket.send(
            SOCK_DIAG_BY_FAMILY,
            NLM_F_REQUEST | NLM_F_DUMP,
            &request(family, extension, states),
        )?;
        loop {
            let n = socket.recv(&mut buf)?;
            if n == 0 || records(&buf[..n], &mut each)? {
                break;
            }
        }
    }
    Ok(())
}

/// The u32 at `at` in a record or attribute (native byte order, as netlink's are); None
/// past its end.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The inode of an `inet_diag_msg` record (0 for the mini-sockets that have none).
fn inode(m: &[u8]) -> u64 {
    u32_at(m, 68).map_or(0, u64::from)
}

/// A connection's TCP counters since it opened: segments sent again and segments sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentCounts {
    pub retrans: u64,
    pub out: u64,
}

/// The TCP counters of every connection of the host (not listeners) by inode: what
/// `ss -ti` shows as `retrans:` and `segs_out:`. A process's own connections tell its
/// retransmissions from the rest of the host's.
pub fn connection_counters() -> io::Result<HashMap<u64, SegmentCounts>> {
    let mut found = HashMap::new();
    // every state but LISTEN (and the request and time-wait mini-sockets, which have no
    // inode and no tcp_info)
    let states = !(1u32 << TCP_LISTEN) & 0xfff;
    dump(INET_DIAG_INFO, states, |m| {
        let inode = inode(m);
        let Some((_, info)) = attributes(&m[DIAG_MSG..]).find(|(kind, _)| *kind == INET_DIAG_INFO)
        else {
            return;
        };
        if let (true, Some(retrans), Some(out)) = (
            inode != 0,
            u32_at(info, TCPI_TOTAL_RETRANS),
            u32_at(info, TCPI_SEGS_OUT),
        ) {
            let (retrans, out) = (u64::from(retrans), u64::from(out));
            found.insert(inode, SegmentCounts { retrans, out });
        }
    })?;
    Ok(found)
}

/// Hands each record of one answer datagram to `each`; true when the dump is complete.
fn records(buf: &[u8], each: &mut impl FnMut(&[u8])) -> io::Result<bool> {
    for message in messages(buf) {
        match message? {
            Message::Done => return Ok(true),
            Message::Error(e) => return Err(e),
            Message::Data(SOCK_DIAG_BY_FAMILY, m) if m.len() >= DIAG_MSG => each(m),
            Message::Data(..) => {}
        }
    }
    Ok(false)
}

/// The local address of an `inet_diag_msg` record: its family, then in its `inet_diag_sockid`
/// the source port (network order) at 4 and the source address at 8 (4 or 16 bytes).
fn local_address(m: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes(m.get(4..6)?.try_into().ok()?);
    let ip = match i32::from(*m.first()?) {
        libc::AF_INET => Ipv4Addr::from(<[u8; 4]>::try_from(m.get(8..12)?).ok()?).into(),
        libc::AF_INET6 => Ipv6Addr::from(<[u8; 16]>::try_from(m.get(8..24)?).ok()?).into(),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// A listener's record: its address, queue, limit and drops.
fn listen_queue(m: &[u8]) -> ListenQueue {
    // a record is at least DIAG_MSG bytes (`records` hands no shorter one)
    let drops = attributes(&m[DIAG_MSG..])
        .find(|(kind, _)| *kind == INET_DIAG_SKMEMINFO)
        .and_then(|(_, v)| u32_at(v, SK_MEMINFO_DROPS * 4));
    ListenQueue {
        queued: u32_at(m, 56).unwrap_or(0),
        limit: u32_at(m, 60).unwrap_or(0),
        inode: inode(m),
        drops,
        local: local_address(m),
    }
}

/// Every listening TCP socket of the host (IPv4 and IPv6) by inode. Needs no privilege for
/// the caller's own network namespace.
pub fn listen_queues() -> io::Result<HashMap<u64, ListenQueue>> {
    let mut found = Vec::new();
    dump(INET_DIAG_SKMEMINFO, 1 << TCP_LISTEN, |m| {
        found.push(listen_queue(m))
    })?;
    Ok(found.into_iter().map(|q| (q.inode, q)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listeners_backlog_limit_is_what_listen_was_given() {
        let (_socket, addr) = kiln_targets::idle_listener(7);
        let port = addr.port();
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let inode = crate::procfs::parse_listening_inodes(&text, port)[0];
        let queues = listen_queues().expect("sock_diag answers");
        assert_eq!(
            queues[&inode],
            ListenQueue {
                inode,
                queued: 0,
                limit: 7,
                drops: Some(0),
                local: Some(addr),
            }
        );
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let mut out = Vec::new();
        let mut push = |m: &[u8]| out.push(listen_queue(m));
        assert!(records(&[0u8; 3], &mut push).is_ok());
        assert!(records(&[255u8; 40], &mut push).is_err());
        let mut short = vec![0u8; 16];
        short[0] = 16;
        short[4] = SOCK_DIAG_BY_FAMILY as u8;
        assert!(!records(&short, &mut push).unwrap());
        assert!(out.is_empty());
    }
}
