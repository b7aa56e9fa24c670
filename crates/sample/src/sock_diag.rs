//! Listen backlog limits from the kernel's sock_diag netlink interface (what `ss -lt` shows
//! as a listener's Send-Q). /proc/net/tcp gives a listener's current accept queue but not
//! the limit it was created with, so "how full is the backlog" needs this.
//!
//! Written by hand over libc: the request is one fixed 72-byte message and the answers are
//! fixed-layout records (`inet_diag_msg`); a netlink crate would add more than it saves.

use std::collections::HashMap;
use std::io;

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCP_LISTEN: u32 = 10;
const NLMSG_HDR: usize = 16;
/// inet_diag_msg: family, state, timer, retrans (4), sockid (48), expires, rqueue, wqueue,
/// uid, inode (20).
const DIAG_MSG: usize = 72;

/// A listening TCP socket: its inode, connections waiting to be accepted, and the backlog
/// limit (`listen()`'s argument, capped by net.core.somaxconn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenQueue {
    pub inode: u64,
    pub queued: u32,
    pub limit: u32,
}

fn request(family: u8) -> Vec<u8> {
    let mut msg = Vec::with_capacity(NLMSG_HDR + 56);
    msg.extend_from_slice(&((NLMSG_HDR + 56) as u32).to_ne_bytes());
    msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
                                                // inet_diag_req_v2: family, protocol, extensions, pad, states, then a zero sockid
    msg.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    msg.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    msg.extend_from_slice(&[0u8; 48]);
    msg
}

/// Parses the answer datagrams' records; true when the dump is complete.
fn parse(buf: &[u8], out: &mut Vec<ListenQueue>) -> io::Result<bool> {
    let mut rest = buf;
    while rest.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().expect("2 bytes"));
        if len < NLMSG_HDR || len > rest.len() {
            return Err(io::Error::other("malformed netlink message"));
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = rest
                    .get(16..20)
                    .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
                return Err(io::Error::from_raw_os_error(-errno));
            }
            SOCK_DIAG_BY_FAMILY if len >= NLMSG_HDR + DIAG_MSG => {
                let m = &rest[NLMSG_HDR..NLMSG_HDR + DIAG_MSG];
                let word =
                    |at: usize| u32::from_ne_bytes(m[at..at + 4].try_into().expect("4 bytes"));
                out.push(ListenQueue {
                    queued: word(56),
                    limit: word(60),
                    inode: u64::from(word(68)),
                });
            }
            _ => {}
        }
        // messages are 4-byte aligned
        let step = (len + 3) & !3;
        rest = &rest[step.min(rest.len())..];
    }
    Ok(false)
}

/// Every listening TCP socket of the host (IPv4 and IPv6) by inode. Needs no privilege for
/// the caller's own network namespace.
pub fn listen_queues() -> io::Result<HashMap<u64, ListenQueue>> {
    // SAFETY: plain socket syscalls on a descriptor this function owns and closes
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    struct Closer(i32);
    impl Drop for Closer {
        fn drop(&mut self) {
            // SAFETY: closes the descriptor opened above, once
            unsafe { libc::close(self.0) };
        }
    }
    let _closer = Closer(fd);
    let mut found = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        let req = request(family);
        // SAFETY: req is a live buffer of req.len() bytes
        if unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: buf is a live, writable buffer of buf.len() bytes
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 || parse(&buf[..n as usize], &mut found)? {
                break;
            }
        }
    }
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
                limit: 7
            }
        );
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let mut out = Vec::new();
        assert!(parse(&[0u8; 3], &mut out).is_ok());
        assert!(parse(&[255u8; 40], &mut out).is_err());
        let mut short = vec![0u8; 16];
        short[0] = 16;
        short[4] = SOCK_DIAG_BY_FAMILY as u8;
        assert!(!parse(&short, &mut out).unwrap());
        assert!(out.is_empty());
    }
}
