//! The little of netlink that sock_diag and taskstats need: a socket that closes itself,
//! and walking the messages of an answer. Written over libc by hand: the messages are a
//! fixed 16-byte header and fixed or type-length-value payloads; a netlink crate would add
//! more than it saves.

use std::io;

pub const NLMSG_HDR: usize = 16;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

/// A netlink socket of one protocol, closed on drop.
pub struct NetlinkSocket {
    fd: i32,
    sequence: u32,
}

impl NetlinkSocket {
    pub fn open(protocol: i32) -> io::Result<Self> {
        // SAFETY: a plain socket syscall; the descriptor is owned by the value returned
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd, sequence: 0 })
    }

    /// Sends one message of `kind` with `flags` and `payload` after the header.
    pub fn send(&mut self, kind: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut msg = Vec::with_capacity(NLMSG_HDR + payload.len());
        msg.extend_from_slice(&((NLMSG_HDR + payload.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&self.sequence.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        msg.extend_from_slice(payload);
        // SAFETY: msg is a live buffer of msg.len() bytes
        if unsafe { libc::send(self.fd, msg.as_ptr().cast(), msg.len(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one datagram into `buf`; its length.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes
        let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

impl Drop for NetlinkSocket {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns, once
        unsafe { libc::close(self.fd) };
    }
}

/// One message of an answer: its type and the payload after the header.
pub enum Message<'a> {
    Done,
    /// The kernel refused: a negative errno.
    Error(io::Error),
    Data(u16, &'a [u8]),
}

/// Splits a datagram into its messages; a length that does not fit is an error.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = io::Result<Message<'_>>> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.len() < NLMSG_HDR {
            return None;
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().expect("2 bytes"));
        if len < NLMSG_HDR || len > rest.len() {
            rest = &[];
            return Some(Err(io::Error::other("malformed netlink message")));
        }
        let payload = &rest[NLMSG_HDR..len];
        // messages are 4-byte aligned
        rest = &rest[((len + 3) & !3).min(rest.len())..];
        Some(Ok(match kind {
            NLMSG_DONE => Message::Done,
            NLMSG_ERROR => {
                let errno = payload
                    .get(0..4)
                    .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
                Message::Error(io::Error::from_raw_os_error(-errno))
            }
            _ => Message::Data(kind, payload),
        }))
    })
}

/// Walks type-length-value attributes (netlink `nlattr`): (type without flags, value).
pub fn attributes(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes(rest[0..2].try_into().expect("2 bytes")) as usize;
        let kind = u16::from_ne_bytes(rest[2..4].try_into().expect("2 bytes")) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let value = &rest[4..len];
        rest = &rest[((len + 3) & !3).min(rest.len())..];
        Some((kind, value))
    })
}

/// One attribute, padded to 4 bytes.
pub fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
    let len = 4 + value.len();
    let mut out = Vec::with_capacity((len + 3) & !3);
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize((len + 3) & !3, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn attributes_round_trip() {
        let mut buf = attribute(1, b"abc");
        buf.extend(attribute(7, &42u32.to_ne_bytes()));
        let got: Vec<_> = attributes(&buf).collect();
        assert_eq!(got, vec![(1, &b"abc"[..]), (7, &42u32.to_ne_bytes()[..])]);
    }

    proptest! {
        #[test]
        fn no_bytes_panic_the_walkers(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            for m in messages(&buf) {
                let _ = m.map(|m| if let Message::Data(_, p) = m { attributes(p).count() } else { 0 });
            }
            let _ = attributes(&buf).count();
        }
    }
}
