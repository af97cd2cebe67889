//! Which connections the coordinator's process closes for not reading their
//! answers (SPEC.md §11.3): a pure machine of the server's, one per step of
//! the coordinator. The server tells it each line it is about to queue and
//! how many bytes that connection's writer has still to write; it answers
//! whether to queue the line and, once the step's effects are carried out,
//! which connections to close. It reads no clock and does no I/O.

use crate::coordinator::ConnectionId;
use crate::protocol::limits::MAX_FRAME_BYTES;

/// Bytes of responses queued for one connection before the coordinator gives
/// up on it (SPEC.md §11.3). One whole frame must fit (a `landed` may be that
/// large) plus the small answers around it; a client that stops reading past
/// that is closed, so it can neither block the coordinator nor grow its
/// memory.
pub const MAX_QUEUED_BYTES: usize = MAX_FRAME_BYTES + 1024 * 1024;

/// The connections one step found over their bound, or without a writer.
#[derive(Debug, Default)]
pub(super) struct SlowReaders {
    /// In the order they were found, each once.
    closing: Vec<ConnectionId>,
}

impl SlowReaders {
    /// A line of `line` bytes is to be queued for `connection`, whose writer
    /// has `unwritten` bytes queued still: `true` when it is queued. A line
    /// that would take the connection past [`MAX_QUEUED_BYTES`] is not, and
    /// neither is any later line of the step for that connection: it is
    /// closed once the step is carried out, so that every other
    /// connection's answers of the step keep their order.
    pub(super) fn admits(
        &mut self,
        connection: ConnectionId,
        unwritten: usize,
        line: usize,
    ) -> bool {
        if self.closing.contains(&connection) {
            return false;
        }
        if unwritten.saturating_add(line) <= MAX_QUEUED_BYTES {
            return true;
        }
        self.writer_gone(connection);
        false
    }

    /// The writer of `connection` is gone (its socket failed), or it is
    /// found slow: the connection is closed after the step, once.
    pub(super) fn writer_gone(&mut self, connection: ConnectionId) {
        if !self.closing.contains(&connection) {
            self.closing.push(connection);
        }
    }

    /// The connections to close, each once, in the order they were found.
    pub(super) fn take(&mut self) -> Vec<ConnectionId> {
        std::mem::take(&mut self.closing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: ConnectionId = ConnectionId(1);
    const TWO: ConnectionId = ConnectionId(2);

    #[test]
    fn s11_3_a_connection_takes_lines_up_to_its_bound_to_the_byte() {
        let mut slow = SlowReaders::default();
        assert!(slow.admits(ONE, 0, MAX_FRAME_BYTES));
        assert!(slow.admits(ONE, MAX_QUEUED_BYTES - 10, 10));
        assert_eq!(slow.take(), []);
    }

    #[test]
    fn s11_3_one_byte_past_the_bound_closes_the_connection_after_the_step() {
        let mut slow = SlowReaders::default();
        assert!(!slow.admits(ONE, MAX_QUEUED_BYTES - 10, 11));
        assert!(slow.admits(TWO, 0, 1), "another connection is not held up");
        assert_eq!(slow.take(), [ONE]);
        assert_eq!(slow.take(), [], "taken once");
    }

    #[test]
    fn s11_3_a_connection_found_slow_takes_no_later_line_of_the_step() {
        let mut slow = SlowReaders::default();
        assert!(!slow.admits(ONE, MAX_QUEUED_BYTES, 1));
        // Its writer may have written meanwhile: the step's order for this
        // connection is broken already, so nothing more is queued for it.
        assert!(!slow.admits(ONE, 0, 1));
        assert_eq!(slow.take(), [ONE]);
    }

    #[test]
    fn s11_3_connections_close_once_each_in_the_order_found() {
        let mut slow = SlowReaders::default();
        slow.writer_gone(TWO);
        assert!(!slow.admits(ONE, usize::MAX, 1), "no overflow");
        slow.writer_gone(TWO);
        assert!(!slow.admits(TWO, 0, 1));
        assert_eq!(slow.take(), [TWO, ONE]);
    }
}
