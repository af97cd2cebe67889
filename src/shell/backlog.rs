//! Which connections the coordinator's process closes for not reading their
//! answers (SPEC.md §11.3): a pure machine of the server's, one per step of
//! the coordinator. The server tells it each line it is about to queue and
//! how many bytes that connection's writer has still to write; it answers
//! whether to queue the line and, once the step's effects are carried out,
//! which connections to close. A host coordinator's connection to the
//! cluster's coordinator has a bound of its own (§18.3). It reads no clock
//! and does no I/O.

use crate::coordinator::ConnectionId;
use crate::protocol::limits::MAX_FRAME_BYTES;

/// Bytes of responses queued for one connection before the coordinator gives
/// up on it (SPEC.md §11.3). One whole frame must fit (a `landed` may be that
/// large) plus the small answers around it; a client that stops reading past
/// that is closed, so it can neither block the coordinator nor grow its
/// memory.
pub const MAX_QUEUED_BYTES: usize = MAX_FRAME_BYTES + 1024 * 1024;

/// Bytes of requests queued for the connection to the cluster's coordinator
/// before a host coordinator takes that connection for lost (SPEC.md
/// §18.3). It carries its whole host's requests, not one process's answers:
/// several leaders of the host may land values of a whole frame at once,
/// and after a loss they replay those lands together (§9.4), so the bound
/// of one connection ([`MAX_QUEUED_BYTES`]) would lose the connection to a
/// burst of two lands, and the next connection to their replay. Eight whole
/// frames and the small requests around them hold such a burst; a
/// coordinator that reads none of it loses the host's requests to its next
/// connection rather than growing the host coordinator's memory without end.
pub(super) const MAX_UPSTREAM_QUEUED_BYTES: usize = 8 * MAX_FRAME_BYTES + 1024 * 1024;

/// Whether a request of `line` bytes may be queued for the connection to the
/// cluster's coordinator, whose writer has `unwritten` bytes queued still
/// (SPEC.md §18.3): not when it would take the queue past
/// [`MAX_UPSTREAM_QUEUED_BYTES`], and then the connection is given up.
pub(super) fn upstream_admits(unwritten: usize, line: usize) -> bool {
    within(unwritten, line, MAX_UPSTREAM_QUEUED_BYTES)
}

/// Whether `line` more bytes behind `unwritten` stay within `bound`.
fn within(unwritten: usize, line: usize, bound: usize) -> bool {
    unwritten.saturating_add(line) <= bound
}

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
        if within(unwritten, line, MAX_QUEUED_BYTES) {
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
    fn s18_3_the_upstream_takes_requests_up_to_its_bound_to_the_byte() {
        assert!(upstream_admits(0, MAX_FRAME_BYTES));
        assert!(upstream_admits(7 * MAX_FRAME_BYTES, MAX_FRAME_BYTES));
        assert!(upstream_admits(MAX_UPSTREAM_QUEUED_BYTES - 10, 10));
        assert!(upstream_admits(MAX_UPSTREAM_QUEUED_BYTES, 0));
    }

    #[test]
    fn s18_3_one_byte_past_the_upstreams_bound_is_refused() {
        assert!(!upstream_admits(MAX_UPSTREAM_QUEUED_BYTES - 10, 11));
        assert!(!upstream_admits(MAX_UPSTREAM_QUEUED_BYTES, 1));
        assert!(!upstream_admits(usize::MAX, 1), "no overflow");
    }

    /// §18.3: the upstream holds a burst of eight whole frames (eight of
    /// the host's leaders landing at once) where one connection to a
    /// process holds one.
    #[test]
    fn s18_3_the_upstream_holds_eight_whole_frames_where_a_connection_holds_one() {
        let mut queued = 0;
        for land in 0..8 {
            assert!(upstream_admits(queued, MAX_FRAME_BYTES), "land {land}");
            queued += MAX_FRAME_BYTES;
        }
        assert!(upstream_admits(queued, 1024 * 1024));
        assert!(!upstream_admits(queued, MAX_FRAME_BYTES));
        let mut slow = SlowReaders::default();
        assert!(slow.admits(ONE, 0, MAX_FRAME_BYTES));
        assert!(!slow.admits(ONE, MAX_FRAME_BYTES, MAX_FRAME_BYTES));
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
