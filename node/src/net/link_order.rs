//! The RN↔VN link's reorder buffer, sans-IO: messages of one peer arrive on separate substreams and may
//! complete out of order, and are handed on in sequence order. What waits for a missing message is bounded in
//! messages AND in bytes: a peer that skips a sequence number and sends on (a lost message, or a hostile
//! tenant of a VN host filling memory) reaches a bound and its link is reset, whatever size its messages are.

use std::collections::BTreeMap;

/// Why a message was not taken; the link is to be reset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("sequence number {seq} repeated (next expected {next})")]
    Repeated { seq: u64, next: u64 },
    #[error("{held} messages waiting for sequence number {next} (at most {max})")]
    TooManyWaiting { held: usize, max: usize, next: u64 },
    #[error("{held} bytes waiting for sequence number {next} (at most {max})")]
    TooManyBytes { held: usize, max: usize, next: u64 },
}

/// One peer's incoming sequence: the next number expected and the messages that arrived ahead of it, each
/// with its size on the wire.
#[derive(Debug)]
pub struct LinkOrder<M> {
    next: u64,
    early: BTreeMap<u64, (M, usize)>,
    early_bytes: usize,
    max_messages: usize,
    max_bytes: usize,
}

impl<M> LinkOrder<M> {
    /// A sequence starting at 0 that holds at most `max_messages` messages and `max_bytes` bytes ahead of a
    /// missing one.
    pub fn new(max_messages: usize, max_bytes: usize) -> Self {
        Self {
            next: 0,
            early: BTreeMap::new(),
            early_bytes: 0,
            max_messages,
            max_bytes,
        }
    }

    /// Takes message `seq` of `bytes` bytes. A message over the bounds is refused without being kept (the
    /// caller resets the link, which drops the rest).
    pub fn push(&mut self, seq: u64, msg: M, bytes: usize) -> Result<(), OrderError> {
        if seq < self.next || self.early.contains_key(&seq) {
            return Err(OrderError::Repeated {
                seq,
                next: self.next,
            });
        }
        // The next message expected is handed on at once: it never waits, so only the others count.
        if seq != self.next {
            if self.early.len() >= self.max_messages {
                return Err(OrderError::TooManyWaiting {
                    held: self.early.len() + 1,
                    max: self.max_messages,
                    next: self.next,
                });
            }
            if self.early_bytes + bytes > self.max_bytes {
                return Err(OrderError::TooManyBytes {
                    held: self.early_bytes + bytes,
                    max: self.max_bytes,
                    next: self.next,
                });
            }
        }
        self.early_bytes += bytes;
        self.early.insert(seq, (msg, bytes));
        Ok(())
    }

    /// The next message in sequence, if it has arrived, with its size.
    pub fn pop(&mut self) -> Option<(M, usize)> {
        let (msg, bytes) = self.early.remove(&self.next)?;
        self.next += 1;
        self.early_bytes -= bytes;
        Some((msg, bytes))
    }

    /// Bytes of the messages held (waiting for a missing one, or ready and not yet popped).
    pub fn held_bytes(&self) -> usize {
        self.early_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(o: &mut LinkOrder<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| o.pop().map(|(m, _)| m)).collect()
    }

    #[test]
    fn messages_come_out_in_sequence_order() {
        let mut o = LinkOrder::new(8, 1000);
        o.push(1, "b", 10).unwrap();
        o.push(2, "c", 10).unwrap();
        assert!(drain(&mut o).is_empty());
        assert_eq!(o.held_bytes(), 20);
        o.push(0, "a", 10).unwrap();
        assert_eq!(drain(&mut o), ["a", "b", "c"]);
        assert_eq!(o.held_bytes(), 0);
        assert!(matches!(
            o.push(1, "again", 1),
            Err(OrderError::Repeated { seq: 1, next: 3 })
        ));
    }

    #[test]
    fn bytes_waiting_for_a_missing_message_are_bounded_whatever_their_count() {
        // Four large messages ahead of a missing one fill 1,000 bytes; the fifth is refused though far below
        // the count bound.
        let mut o = LinkOrder::new(4096, 1000);
        for seq in 1..=4 {
            o.push(seq, "big", 250).unwrap();
        }
        let err = o.push(5, "big", 250).unwrap_err();
        assert_eq!(
            err,
            OrderError::TooManyBytes {
                held: 1250,
                max: 1000,
                next: 0
            }
        );
        assert_eq!(o.held_bytes(), 1000, "the refused message is not kept");
        // The message expected next is taken whatever its size: it leaves at once.
        o.push(0, "huge", 5000).unwrap();
        assert_eq!(drain(&mut o), ["huge", "big", "big", "big", "big"]);
        assert_eq!(o.held_bytes(), 0);
    }

    #[test]
    fn the_count_is_bounded_too() {
        let mut o = LinkOrder::new(3, usize::MAX);
        for seq in 1..=3 {
            o.push(seq, "x", 0).unwrap();
        }
        assert!(matches!(
            o.push(4, "x", 0),
            Err(OrderError::TooManyWaiting {
                held: 4,
                max: 3,
                ..
            })
        ));
        assert!(matches!(
            o.push(2, "x", 0),
            Err(OrderError::Repeated { .. })
        ));
    }
}
