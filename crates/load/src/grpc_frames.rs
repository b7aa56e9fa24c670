//! gRPC's messages counted in a response body as its DATA arrives. Each message is a flag
//! byte, a 4-byte big-endian length and that many bytes (gRPC over HTTP/2, "Length-Prefixed
//! Message"), and DATA frames may split one anywhere, header included.

/// How far into the body's current message the bytes seen so far reach.
#[derive(Debug, Default)]
pub(crate) struct MessageCounter {
    /// The current message's prefix, while it is incomplete.
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the current message still to come, once its prefix is whole.
    remaining: u64,
    messages: u32,
}

impl MessageCounter {
    /// Reads the next bytes of the body; returns how many messages ended in them.
    pub fn feed(&mut self, mut bytes: &[u8]) -> u32 {
        let before = self.messages;
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let take = (bytes.len() as u64).min(self.remaining);
                self.remaining -= take;
                bytes = &bytes[take as usize..];
                if self.remaining == 0 {
                    self.messages = self.messages.saturating_add(1);
                }
                continue;
            }
            let take = bytes.len().min(5 - self.prefix_len);
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&bytes[..take]);
            self.prefix_len += take;
            bytes = &bytes[take..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]);
                self.remaining = u64::from(len);
                if len == 0 {
                    self.messages = self.messages.saturating_add(1);
                }
            }
        }
        self.messages - before
    }

    /// Whole messages seen.
    pub fn messages(&self) -> u32 {
        self.messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        for &n in sizes {
            out.push(0);
            out.extend_from_slice(&(n as u32).to_be_bytes());
            out.extend(std::iter::repeat_n(7u8, n));
        }
        out
    }

    #[test]
    fn counts_messages_whole_and_empty() {
        let mut c = MessageCounter::default();
        assert_eq!(c.feed(&framed(&[3, 0, 10])), 3);
        assert_eq!(c.messages(), 3);
        // a prefix alone is no message yet
        let mut c = MessageCounter::default();
        assert_eq!(c.feed(&framed(&[4])[..5]), 0);
        assert_eq!(c.feed(&[1, 2, 3]), 0);
        assert_eq!(c.feed(&[4]), 1);
    }

    proptest! {
        /// However DATA frames split the body, the count is the messages' number, and each
        /// message is counted in the chunk where its last byte is.
        #[test]
        fn any_split_counts_the_same(
            sizes in proptest::collection::vec(0usize..300, 0..20),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..30),
        ) {
            let body = framed(&sizes);
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
            points.push(0);
            points.push(body.len());
            points.sort_unstable();
            let mut c = MessageCounter::default();
            let mut total = 0;
            for w in points.windows(2) {
                total += c.feed(&body[w[0]..w[1]]);
            }
            prop_assert_eq!(total as usize, sizes.len());
            prop_assert_eq!(c.messages() as usize, sizes.len());
        }
    }
}
