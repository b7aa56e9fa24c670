//! How a record's seconds sit on the wall clock, said once for every reader: a second (of
//! load, resources or runtime) is stamped at its end, and a sample belongs to a span of time
//! when more than half of its second lies inside it. The summary and the findings once read
//! different samples of one run (82 listen overflows against 38) by two rules of their own.

/// A second's length, in the milliseconds of its stamps.
pub const SECOND_MS: u64 = 1000;

/// Where the second stamped `end_unix_ms` began.
pub fn second_start_ms(end_unix_ms: u64) -> u64 {
    end_unix_ms.saturating_sub(SECOND_MS)
}

/// The wall-clock second (since the Unix epoch) that the second stamped `end_unix_ms` ended
/// in: a stamp on a second's boundary ends the second before it.
pub fn wall_second_ending(end_unix_ms: u64) -> u64 {
    end_unix_ms.saturating_sub(1) / SECOND_MS
}

/// A span of wall-clock time, ms since the Unix epoch, from the start of its first second to
/// the end of its last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

impl Span {
    /// From the start of the second stamped `first_end_ms` to the end of the one stamped
    /// `last_end_ms`.
    pub fn of_seconds(first_end_ms: u64, last_end_ms: u64) -> Self {
        Self {
            from_unix_ms: second_start_ms(first_end_ms),
            to_unix_ms: last_end_ms,
        }
    }

    /// The items of `items` whose second belongs to the span (all of them without a span: a
    /// record without measured load); `end_unix_ms` is an item's stamp.
    pub fn keep<T: Clone>(
        span: Option<Self>,
        items: &[T],
        end_unix_ms: impl Fn(&T) -> u64,
    ) -> Vec<T> {
        match span {
            Some(span) => items
                .iter()
                .filter(|item| span.holds_second(end_unix_ms(item)))
                .cloned()
                .collect(),
            None => items.to_vec(),
        }
    }

    /// Whether the sample stamped `end_unix_ms` (covering the second before it) belongs to the
    /// span: more than half of its second lies inside.
    pub fn holds_second(&self, end_unix_ms: u64) -> bool {
        let half = SECOND_MS / 2;
        end_unix_ms > self.from_unix_ms + half && end_unix_ms <= self.to_unix_ms + half
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_belongs_where_most_of_its_second_lies() {
        let span = Span {
            from_unix_ms: 10_000,
            to_unix_ms: 20_000,
        };
        // the second 9.4-10.4 s lies mostly before the span; 9.6-10.6 s mostly inside
        assert!(!span.holds_second(10_400));
        assert!(span.holds_second(10_600));
        assert!(span.holds_second(20_500));
        assert!(!span.holds_second(20_501));
        assert_eq!(second_start_ms(500), 0);
    }

    #[test]
    fn a_second_ends_in_the_wall_second_its_stamp_closes() {
        assert_eq!(wall_second_ending(10_599), 10);
        assert_eq!(wall_second_ending(11_000), 10);
        assert_eq!(wall_second_ending(11_001), 11);
        assert_eq!(wall_second_ending(0), 0);
    }
}
