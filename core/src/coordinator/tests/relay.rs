//! The relay windows of a cluster coordinator (SPEC.md §18.2), one test per
//! rule and per interaction with the other rules: the grace window (§8.4),
//! detached flights (§15.2), the reuse window (§16), nested flights
//! (§17.2) and the counters (§8.11).
//!
//! Connections 1 to 9 are ordinary; 10 and up are relay connections, opened
//! by each test with [`open_relay`].

use std::time::Duration;

use super::*;
use crate::protocol::limits::MAX_OUTCOME_BYTES;
use crate::protocol::{HostId, HostStatus, HostsStatus, ReuseWindow, encoded_len};

/// The relay window of these tests: a cluster's default grace window
/// (§14.4).
const RELAY_WINDOW: Duration = Duration::from_secs(2);

fn host(name: &str) -> HostId {
    HostId::new(name).unwrap()
}

/// A coordinator that keeps relay windows, with ordinary connections
/// 1..=`connections` open.
fn relaying(epoch: u64, term: Term, connections: u64) -> Coordinator {
    coordinator(epoch, term, connections).with_relay_window(RELAY_WINDOW)
}

fn opened(connection: u64, name: &str) -> Event {
    Event::ConnectionOpened {
        connection: c(connection),
        relay: Some(host(name)),
    }
}

/// Opens the relay connection `connection` of the host `name`, which has
/// no other open.
fn open_relay(co: &mut Coordinator, connection: u64, name: &str) {
    assert_eq!(co.step(opened(connection, name)), vec![]);
}

fn closed(connection: u64) -> Event {
    Event::ConnectionClosed {
        connection: c(connection),
    }
}

fn window_timer(name: &str, closed: u64) -> Timer {
    Timer::RelayWindow {
        host: host(name),
        closed: c(closed),
    }
}

/// The relay window of `name` that the close of `closed` opened.
fn window_opens(name: &str, closed: u64) -> Effect {
    Effect::StartTimer {
        timer: window_timer(name, closed),
        after: RELAY_WINDOW,
    }
}

fn window_ends(name: &str, closed: u64) -> Event {
    Event::TimerFired {
        timer: window_timer(name, closed),
    }
}

/// A host's flight led through relay connection 10, joined by ordinary
/// connection 1: the start of most scenarios.
fn orphan_of_build_7() -> Coordinator {
    let mut co = relaying(1, Term::First, 3);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "k")),
        vec![lead(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(run(1, "1", "k")), vec![joined(1, "1", token(1, 1))]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    co
}

/// §18.2: a closed relay connection's flight goes on without a leader: its
/// joiners are not interrupted, and new runs of its key join it rather
/// than lead a second flight.
#[test]
fn s18_2_a_lost_host_coordinators_flight_goes_on_orphaned_and_new_runs_join_it() {
    let mut co = orphan_of_build_7();
    assert_eq!(co.step(run(2, "1", "k")), vec![joined(2, "1", token(1, 1))]);
    assert_eq!(
        co.flights().collect::<Vec<_>>(),
        vec![(&key("k"), token(1, 1))]
    );
    // Nothing of the dead connection's party answers a land.
    assert_eq!(
        co.step(land(10, "r1", value("v"))),
        vec![],
        "§8.1: a closed connection's requests are ignored"
    );
}

/// §18.2: the host's next relay connection takes its orphaned flight back
/// with a running reassert, without an answer; the flight keeps its
/// joiners, and its new leader's land reaches them.
#[test]
fn s18_2_the_hosts_running_reassert_adopts_its_orphan_without_an_answer() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 11, "build-7");
    assert_eq!(co.step(reassert(11, "r1", "k", token(1, 1))), vec![]);
    assert_eq!(co.step(run(2, "1", "k")), vec![joined(2, "1", token(1, 1))]);
    assert_eq!(
        co.step(land(11, "r1", value("v"))),
        vec![
            landed(1, "1", value("v")),
            landed(2, "1", value("v")),
            ack(11, "r1")
        ]
    );
    assert_eq!(co.flights().count(), 0);
    // The window's end finds nothing orphaned any more.
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
}

/// §18.2: a landed reassert of the host lands its orphan as its leader's
/// `land` would (§8.5): the joiners get the outcome, the leader `ack`.
#[test]
fn s18_2_the_hosts_landed_reassert_lands_its_orphan() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert_landed(11, "r1", "k", token(1, 1), value("v"))),
        vec![landed(1, "1", value("v")), ack(11, "r1")]
    );
    assert_eq!(co.flights().count(), 0);
    assert_eq!(co.step(run(2, "1", "k")), vec![lead(2, "1", token(1, 2))]);
}

/// §18.2: an orphan is remembered as joined by its own host, whose joiners
/// of it were the relay's (§18.3): after the host's landed reassert lands
/// it, their rejoins through the host's next coordinator get its outcome,
/// not `interrupted` (found by the model of the host tier).
#[test]
fn s18_2_the_hosts_own_joiners_of_its_orphan_get_its_ending() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert_landed(11, "r1", "k", token(1, 1), value("v"))),
        vec![landed(1, "1", value("v")), ack(11, "r1")]
    );
    assert_eq!(
        co.step(rejoin(11, "r2", "k", token(1, 1))),
        vec![landed(11, "r2", value("v"))]
    );
}

/// §18.2, §8.5: the size rule of a land holds for a landed reassert of an
/// orphan: its joiners get the `ValueTooLarge` failure, its leader
/// `rejected`, and the flight ends all the same.
#[test]
fn s18_2_an_orphan_landed_with_an_outcome_too_large_hands_the_failure_over() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 11, "build-7");
    let too_large = value_of_len(MAX_OUTCOME_BYTES + 1);
    let effects = co.step(reassert_landed(11, "r1", "k", token(1, 1), too_large));
    let [joiner, answer] = &effects[..] else {
        panic!("a landed and an answer, not {effects:?}");
    };
    assert!(
        matches!(
            joiner,
            Effect::Send { connection, response: Response::Landed { outcome, .. } }
                if *connection == c(1)
                    && matches!(&**outcome, Outcome::Failure(f) if f.name == "ValueTooLarge")
        ),
        "{joiner:?}"
    );
    assert_eq!(*answer, rejected(11, "r1"));
    assert_eq!(co.flights().count(), 0);
    assert_eq!(co.counters().lands_failure, 1);
}

/// §18.2: when the window ends, the flights still orphaned by the host are
/// interrupted (§8.6), and the key is free for a new flight.
#[test]
fn s18_2_the_windows_end_interrupts_the_flights_still_orphaned() {
    let mut co = orphan_of_build_7();
    assert_eq!(co.step(run(2, "1", "k")), vec![joined(2, "1", token(1, 1))]);
    assert_eq!(
        co.step(window_ends("build-7", 10)),
        vec![interrupted(1, "1"), interrupted(2, "1")]
    );
    assert_eq!(co.flights().count(), 0);
    assert_eq!(co.step(run(3, "1", "k")), vec![lead(3, "1", token(1, 2))]);
    // A reassert after the window is of no orphan, and is rejected (§8.3).
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert(11, "r1", "k", token(1, 1))),
        vec![rejected(11, "r1")]
    );
}

/// §18.2: a relay connection that closes while its host's window is open
/// opens the window again from then: the earlier timer, firing later, is
/// ignored, and only the later one ends the window.
#[test]
fn s18_2_a_window_opened_again_ignores_its_earlier_timer() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 11, "build-7");
    assert_eq!(co.step(closed(11)), vec![window_opens("build-7", 11)]);
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
    assert_eq!(
        co.flights().collect::<Vec<_>>(),
        vec![(&key("k"), token(1, 1))]
    );
    assert_eq!(
        co.step(window_ends("build-7", 11)),
        vec![interrupted(1, "1")]
    );
    // A timer that fires twice, or for a host without a window, changes
    // nothing.
    assert_eq!(co.step(window_ends("build-7", 11)), vec![]);
    assert_eq!(co.step(window_ends("build-9", 11)), vec![]);
}

/// §18.2: a host has at most one open relay connection: a new one closes
/// the older first, as a relay connection that ended (its flights are
/// orphaned, the window opens), and then takes them back.
#[test]
fn s18_2_a_newer_relay_connection_of_a_host_closes_the_older() {
    let mut co = relaying(1, Term::First, 1);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "k")),
        vec![lead(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(run(1, "1", "k")), vec![joined(1, "1", token(1, 1))]);
    assert_eq!(
        co.step(opened(11, "build-7")),
        vec![
            window_opens("build-7", 10),
            Effect::Close {
                connection: c(10),
                reason: CloseReason::RelayReplaced
            }
        ]
    );
    assert!(!co.is_open(c(10)) && co.is_open(c(11)));
    // Another host's connection closes nothing.
    open_relay(&mut co, 12, "build-8");
    assert!(co.is_open(c(11)));
    assert_eq!(co.step(reassert(11, "r1", "k", token(1, 1))), vec![]);
    assert_eq!(
        co.step(land(11, "r1", value("v"))),
        vec![landed(1, "1", value("v")), ack(11, "r1")]
    );
    // The close the shell reports after carrying the effect out is late.
    assert_eq!(co.step(closed(10)), vec![]);
}

/// §18.2: an orphan is the host's alone: another host's relay connection,
/// or an ordinary one, cannot take it back, and is decided as anywhere
/// (§8.3: outside a grace window, `rejected`).
#[test]
fn s18_2_only_the_orphans_host_takes_it_back() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 12, "build-8");
    assert_eq!(
        co.step(reassert(12, "r1", "k", token(1, 1))),
        vec![rejected(12, "r1")]
    );
    assert_eq!(
        co.step(reassert(2, "r1", "k", token(1, 1))),
        vec![rejected(2, "r1")]
    );
    // A reassert of the host that names another key or token is no
    // adoption either.
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert(11, "r1", "other", token(1, 1))),
        vec![rejected(11, "r1")]
    );
    assert_eq!(
        co.step(reassert(11, "r2", "k", token(1, 2))),
        vec![rejected(11, "r2")]
    );
    assert_eq!(
        co.step(window_ends("build-7", 10)),
        vec![interrupted(1, "1")]
    );
}

/// §18.2: a closed relay connection's joiners leave their flights, and the
/// host remembers them: a flight that lands in the window answers the
/// host's rejoin at once with its outcome, one interrupted with
/// `interrupted`; one still in progress is joined again as any rejoin
/// joins it (§8.2).
#[test]
fn s18_2_the_host_gets_the_endings_of_the_flights_it_had_joined() {
    let mut co = relaying(1, Term::First, 2);
    assert_eq!(co.step(run(1, "1", "a")), vec![lead(1, "1", token(1, 1))]);
    assert_eq!(co.step(run(1, "2", "b")), vec![lead(1, "2", token(1, 2))]);
    assert_eq!(co.step(run(2, "1", "c")), vec![lead(2, "1", token(1, 3))]);
    open_relay(&mut co, 10, "build-7");
    for (i, k, t) in [("r1", "a", 1), ("r2", "b", 2), ("r3", "c", 3)] {
        assert_eq!(co.step(run(10, i, k)), vec![joined(10, i, token(1, t))]);
    }
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    // The joiner is gone: nothing is sent to it.
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    assert_eq!(co.step(cancel(1, "2")), vec![]);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(rejoin(11, "r1", "a", token(1, 1))),
        vec![landed(11, "r1", value("v"))]
    );
    assert_eq!(
        co.step(rejoin(11, "r2", "b", token(1, 2))),
        vec![interrupted(11, "r2")]
    );
    assert_eq!(
        co.step(rejoin(11, "r3", "c", token(1, 3))),
        vec![joined(11, "r3", token(1, 3))]
    );
    // The endings are the host's: another host's rejoin is decided as any
    // (§8.2: its flight is not in progress, so `interrupted`).
    open_relay(&mut co, 12, "build-8");
    assert_eq!(
        co.step(rejoin(12, "r1", "a", token(1, 1))),
        vec![interrupted(12, "r1")]
    );
    // A second rejoin of the host within the window gets the ending too.
    assert_eq!(
        co.step(rejoin(11, "r4", "a", token(1, 1))),
        vec![landed(11, "r4", value("v"))]
    );
}

/// §18.2: the endings remembered for a host are forgotten when its window
/// ends: a rejoin after it is decided as any (`interrupted`, §8.2).
#[test]
fn s18_2_the_windows_end_forgets_the_hosts_endings() {
    let mut co = relaying(1, Term::First, 1);
    assert_eq!(co.step(run(1, "1", "a")), vec![lead(1, "1", token(1, 1))]);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "a")),
        vec![joined(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(rejoin(11, "r1", "a", token(1, 1))),
        vec![interrupted(11, "r1")]
    );
}

/// §18.2: a flight joined by the host that ends after the window is not
/// remembered: the window bounds what the coordinator keeps for a host.
#[test]
fn s18_2_a_flight_that_ends_after_the_window_is_not_remembered() {
    let mut co = relaying(1, Term::First, 1);
    assert_eq!(co.step(run(1, "1", "a")), vec![lead(1, "1", token(1, 1))]);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "a")),
        vec![joined(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(rejoin(11, "r1", "a", token(1, 1))),
        vec![interrupted(11, "r1")]
    );
}

/// §18.2: one host's window ending forgets what it had joined, not what
/// another host whose window is still open had joined of the same flight.
#[test]
fn s18_2_one_hosts_window_ending_keeps_anothers_joins() {
    let mut co = relaying(1, Term::First, 1);
    assert_eq!(co.step(run(1, "1", "a")), vec![lead(1, "1", token(1, 1))]);
    open_relay(&mut co, 10, "build-7");
    open_relay(&mut co, 11, "build-8");
    for connection in [10, 11] {
        assert_eq!(
            co.step(run(connection, "r1", "a")),
            vec![joined(connection, "r1", token(1, 1))]
        );
    }
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(closed(11)), vec![window_opens("build-8", 11)]);
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    open_relay(&mut co, 12, "build-8");
    assert_eq!(
        co.step(rejoin(12, "r1", "a", token(1, 1))),
        vec![landed(12, "r1", value("v"))]
    );
}

/// §18.2: a closed relay connection's waiting runs (§8.4) are withdrawn:
/// when the grace window ends, none of them leads.
#[test]
fn s18_2_the_waiting_runs_of_a_closed_relay_connection_are_withdrawn() {
    let mut co = relaying(3, AFTER_FAILOVER, 1);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(co.step(run(10, "r1", "k")), vec![]);
    assert_eq!(co.step(run(1, "1", "k")), vec![]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(GRACE_ENDED), vec![lead(1, "1", token(3, 1))]);
}

/// §18.2, §8.7: a coordinator built without a relay window takes a relay
/// connection for an ordinary one: its close interrupts its flights at once,
/// and no window opens.
#[test]
fn s18_2_without_relay_windows_a_relay_connection_is_an_ordinary_one() {
    let mut co = coordinator(1, Term::First, 1);
    assert!(!co.keeps_relay_windows());
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "k")),
        vec![lead(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(run(1, "1", "k")), vec![joined(1, "1", token(1, 1))]);
    // A second connection of the host closes nothing either.
    open_relay(&mut co, 11, "build-7");
    assert!(co.is_open(c(10)));
    assert_eq!(co.step(closed(10)), vec![interrupted(1, "1")]);
    assert!(relaying(1, Term::First, 0).keeps_relay_windows());
}

/// §18.2, §8.4: an orphaned flight held in a grace window stays held: the
/// runs of its key wait, and join it when the window ends; the relay
/// window's end interrupts it later like any orphan.
#[test]
fn s18_2_an_orphaned_held_flight_stays_held_until_the_grace_window_ends() {
    let mut co = relaying(3, AFTER_FAILOVER, 2);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(co.step(reassert(10, "r1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(rejoin(1, "1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![joined(1, "1", token(2, 1)), joined(2, "1", token(2, 1))]
    );
    assert_eq!(
        co.step(window_ends("build-7", 10)),
        vec![interrupted(1, "1"), interrupted(2, "1")]
    );
}

/// §18.2, §8.3: the host's adoption of a held orphan keeps it held; its
/// land in the grace window settles the waiting runs as a held flight's
/// land does (§8.4).
#[test]
fn s18_2_an_adopted_held_flight_is_still_held() {
    let mut co = relaying(3, AFTER_FAILOVER, 2);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(co.step(reassert(10, "r1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(co.step(reassert(11, "r1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(rejoin(1, "1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(
        co.step(land(11, "r1", value("v"))),
        vec![
            landed(1, "1", value("v")),
            joined(2, "1", token(2, 1)),
            landed(2, "1", value("v")),
            ack(11, "r1")
        ]
    );
}

/// §18.2, §8.3: a flight of the key reasserted by another host with a
/// greater token supersedes a held orphan: it ends as interrupted (its
/// waiting rejoins are answered `interrupted`), and there is no leader to
/// reject; the relay window's end then finds nothing.
#[test]
fn s18_2_a_later_reassert_of_another_host_supersedes_a_held_orphan() {
    let mut co = relaying(3, AFTER_FAILOVER, 1);
    open_relay(&mut co, 10, "build-7");
    open_relay(&mut co, 12, "build-8");
    assert_eq!(co.step(reassert(10, "r1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(rejoin(1, "1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(
        co.step(reassert(12, "r1", "k", token(2, 5))),
        vec![interrupted(1, "1")]
    );
    assert_eq!(co.counters().interruptions, 1);
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
    // The host's late reassert finds its flight ended in the window.
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert(11, "r1", "k", token(2, 1))),
        vec![rejected(11, "r1")]
    );
    assert_eq!(
        co.flights().collect::<Vec<_>>(),
        vec![(&key("k"), token(2, 5))]
    );
}

/// §18.2, §8.4: a relay window that ends inside the grace window interrupts
/// a held orphan as its leader's withdrawal would: its waiting rejoins are
/// answered `interrupted`, the key's plain runs wait on and lead when the
/// grace window ends, and the ending is remembered for the window (§8.3: a
/// later reassert of it is rejected).
#[test]
fn s18_2_a_relay_window_that_ends_in_the_grace_window_interrupts_a_held_orphan() {
    let mut co = relaying(3, AFTER_FAILOVER, 2);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(co.step(reassert(10, "r1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(rejoin(1, "1", "k", token(2, 1))), vec![]);
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(
        co.step(window_ends("build-7", 10)),
        vec![interrupted(1, "1")]
    );
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert(11, "r1", "k", token(2, 1))),
        vec![rejected(11, "r1")]
    );
    assert_eq!(co.step(GRACE_ENDED), vec![lead(2, "1", token(3, 1))]);
}

/// §18.2, §15.2: an orphan is never stopped for having no joiners: its
/// detached mark goes with its leader. The adopting leader's flight is not
/// detached until it sends `detach` again.
#[test]
fn s18_2_an_orphan_is_not_stopped_and_its_detached_mark_goes_with_its_leader() {
    let mut co = relaying(1, Term::First, 1);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "k")),
        vec![lead(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(run(1, "1", "k")), vec![joined(1, "1", token(1, 1))]);
    assert_eq!(co.step(detach(10, "r1")), vec![]);
    assert_eq!(co.detached().count(), 1);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.detached().count(), 0);
    // The last joiner leaves: an orphan has no leader to stop.
    assert_eq!(co.step(cancel(1, "1")), vec![]);
    assert_eq!(co.flights().count(), 1);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(co.step(reassert(11, "r1", "k", token(1, 1))), vec![]);
    assert_eq!(co.detached().count(), 0);
    assert_eq!(co.step(detach(11, "r1")), vec![stop(11, "r1")]);
    assert_eq!(co.flights().count(), 0);
}

/// §18.2, §15.2: a relay's leader told to stop still leads until it
/// answers; when its connection closes first, its ended flight is not
/// orphaned, and the key's next flight, led elsewhere, keeps its leader.
#[test]
fn s18_2_a_stopped_flights_leader_closing_orphans_nothing() {
    let mut co = relaying(1, Term::First, 1);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "k")),
        vec![lead(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(detach(10, "r1")), vec![stop(10, "r1")]);
    assert_eq!(co.step(run(1, "1", "k")), vec![lead(1, "1", token(1, 2))]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    // The next flight still has its leader to tell (§15.2).
    assert_eq!(co.step(detach(1, "1")), vec![stop(1, "1")]);
    assert_eq!(co.flights().count(), 0);
}

/// §18.2, §17.2: an orphan's leader party is gone, and its edge with it:
/// a call that would have closed a cycle through it now waits; the
/// adopting reassert brings the edge back with its parent.
#[test]
fn s18_2_an_orphans_leader_edge_goes_with_its_party() {
    let mut co = relaying(1, Term::First, 2);
    let (p, a) = (token(1, 1), token(1, 2));
    assert_eq!(co.step(run(1, "1", "p")), vec![lead(1, "1", p)]);
    open_relay(&mut co, 10, "build-7");
    // The work of p calls a through its host: p waits for a.
    assert_eq!(co.step(nested(10, "r1", "a", p)), vec![lead(10, "r1", a)]);
    // The work of a calls p: a cycle.
    assert_eq!(
        co.step(nested(2, "1", "p", a)),
        vec![send(
            2,
            Response::Cycle {
                id: id("1"),
                keys: vec![key("a"), key("p")]
            }
        )]
    );
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(nested(2, "2", "p", a)), vec![joined(2, "2", p)]);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(co.step(nested_reassert(11, "r1", "a", a, p)), vec![]);
    assert_eq!(
        co.step(nested(2, "3", "p", a)),
        vec![send(
            2,
            Response::Cycle {
                id: id("3"),
                keys: vec![key("a"), key("p")]
            }
        )]
    );
}

/// §18.2, §16.2: an orphan landed by its host's landed reassert keeps its
/// value for its leader's reuse window, as its leader's land would have.
#[test]
fn s18_2_an_orphan_landed_by_a_landed_reassert_keeps_its_value() {
    let mut co = relaying(1, Term::First, 1);
    let window = ReuseWindow::from_millis(60_000).unwrap();
    let reusing = |connection, i: &str| {
        request(
            c(connection),
            Request::Run {
                id: id(i),
                key: key("k"),
                flight: None,
                reuse: Some(window),
                parent: None,
            },
        )
    };
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(reusing(10, "r1")),
        vec![lead(10, "r1", token(1, 1))]
    );
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    open_relay(&mut co, 11, "build-7");
    assert_eq!(
        co.step(reassert_landed(11, "r1", "k", token(1, 1), value("v"))),
        vec![
            ack(11, "r1"),
            Effect::StartTimer {
                timer: Timer::Reuse {
                    key: key("k"),
                    token: token(1, 1)
                },
                after: window.as_duration(),
            }
        ]
    );
    assert_eq!(
        co.step(reusing(1, "1")),
        vec![send(
            1,
            Response::Reused {
                id: id("1"),
                flight: token(1, 1),
                outcome: Box::new(value("v")),
            }
        )]
    );
}

/// §18.2, §8.11: an orphaning counts nothing; an adoption counts as an
/// accepted reassert, a landing by landed reassert also as a land, and the
/// window's end as an interruption per flight.
#[test]
fn s18_2_what_the_counters_count_of_relay_windows() {
    let mut co = relaying(1, Term::First, 1);
    open_relay(&mut co, 10, "build-7");
    for (i, k) in [("r1", "a"), ("r2", "b"), ("r3", "c")] {
        assert_eq!(co.step(run(10, i, k)).len(), 1);
    }
    let before = co.counters();
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(
        co.counters(),
        CoordinatorStats {
            connections_open: 1,
            ..before
        }
    );
    open_relay(&mut co, 11, "build-7");
    co.step(reassert(11, "r1", "a", token(1, 1)));
    co.step(reassert_landed(11, "r2", "b", token(1, 2), value("v")));
    co.step(window_ends("build-7", 10));
    let after = co.counters();
    assert_eq!(after.reasserts_accepted, 2);
    assert_eq!(after.reasserts_rejected, 0);
    assert_eq!(after.lands_value, 1);
    assert_eq!(after.interruptions, 1, "c, still orphaned");
    assert_eq!(after.flights_led, 3);
}

/// §18.2: a relay connection that leads a flight and joins another keeps
/// its roles apart: its flight is orphaned, and it leaves the other.
#[test]
fn s18_2_a_relay_connections_leaders_and_joiners_are_told_apart() {
    let mut co = relaying(1, Term::First, 1);
    assert_eq!(co.step(run(1, "1", "a")), vec![lead(1, "1", token(1, 1))]);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(
        co.step(run(10, "r1", "a")),
        vec![joined(10, "r1", token(1, 1))]
    );
    assert_eq!(
        co.step(run(10, "r2", "b")),
        vec![lead(10, "r2", token(1, 2))]
    );
    assert_eq!(co.step(run(1, "2", "b")), vec![joined(1, "2", token(1, 2))]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![ack(1, "1")],
        "the host's joiner is gone"
    );
    assert_eq!(
        co.step(window_ends("build-7", 10)),
        vec![interrupted(1, "2")]
    );
}

/// §18.2, §8.10: the coordinator's equality ignores its counters but not
/// its relay windows: two coordinators that differ only by an open window
/// are two states.
#[test]
fn s18_2_relay_windows_are_part_of_the_state() {
    let mut with_window = relaying(1, Term::First, 0);
    let without = with_window.clone();
    open_relay(&mut with_window, 10, "build-7");
    with_window.step(closed(10));
    assert_ne!(with_window, without);
    let mut again = without.clone();
    open_relay(&mut again, 10, "build-7");
    again.step(closed(10));
    assert_eq!(with_window, again);
}

/// §18.2: an orphan is its key's flight, not its token's: a client that
/// names the orphan's token with another key (found by the property
/// tests) brings back another flight, which the relay window's end leaves
/// alone.
#[test]
fn s18_2_the_window_ends_only_the_orphans_of_its_keys() {
    let mut co = relaying(3, AFTER_FAILOVER, 1);
    open_relay(&mut co, 10, "build-7");
    assert_eq!(co.step(reassert(10, "r1", "a", token(2, 2))), vec![]);
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    assert_eq!(co.step(reassert(1, "1", "c", token(2, 2))), vec![]);
    assert_eq!(co.step(window_ends("build-7", 10)), vec![]);
    assert_eq!(
        co.flights().collect::<Vec<_>>(),
        vec![(&key("c"), token(2, 2))]
    );
    assert_eq!(co.step(GRACE_ENDED), vec![]);
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
}

/// §18.2: a host's remembered endings are bounded by `MAX_HOST_ENDINGS`: a
/// host coordinator that died twice in one window, having joined one flight
/// more than the bound in all, has the first endings remembered and the
/// last one not (its rejoin is `interrupted`, and reruns nothing).
#[test]
fn s18_2_a_hosts_remembered_endings_are_bounded() {
    let flights = MAX_HOST_ENDINGS as u64 + 1;
    // Two ordinary connections lead the flights (one connection's open
    // requests are bounded by the same number).
    let mut co = relaying(1, Term::First, 2);
    let leader = |n: u64| 1 + n % 2;
    for n in 0..flights {
        let effects = co.step(run(leader(n), &n.to_string(), &format!("k{n}")));
        assert_eq!(effects.len(), 1);
    }
    open_relay(&mut co, 10, "build-7");
    for n in 0..flights - 1 {
        let effects = co.step(run(10, &format!("r{n}"), &format!("k{n}")));
        assert_eq!(effects.len(), 1);
    }
    assert_eq!(co.step(closed(10)), vec![window_opens("build-7", 10)]);
    open_relay(&mut co, 11, "build-7");
    let last = flights - 1;
    let effects = co.step(run(11, &format!("r{last}"), &format!("k{last}")));
    assert_eq!(effects.len(), 1);
    assert_eq!(co.step(closed(11)), vec![window_opens("build-7", 11)]);
    for n in 0..flights {
        let effects = co.step(land(leader(n), &n.to_string(), value("v")));
        assert_eq!(effects, vec![ack(leader(n), &n.to_string())]);
    }
    open_relay(&mut co, 12, "build-7");
    let first = token(1, 1);
    assert_eq!(
        co.step(rejoin(12, "a", "k0", first)),
        vec![landed(12, "a", value("v"))]
    );
    let beyond = token(1, u32::try_from(flights).unwrap());
    assert_eq!(
        co.step(rejoin(12, "b", &format!("k{last}"), beyond)),
        vec![interrupted(12, "b")]
    );
}

/// The `hosts` of a status answer that `connection` asks for.
fn hosts_status(co: &mut Coordinator, connection: u64) -> Option<HostsStatus> {
    let effects = co.step(request(c(connection), Request::Status { id: id("s") }));
    let [
        Effect::Send {
            response: Response::Status { hosts, .. },
            ..
        },
    ] = effects.as_slice()
    else {
        panic!("one status answer: {effects:?}");
    };
    hosts.as_deref().cloned()
}

/// §3.5, §18.2: a coordinator that keeps relay windows reports its
/// connections by host: how many are direct, and in host id order each host
/// with an open relay connection (and its open parties) or an open relay
/// window (and the flights orphaned in it); a host whose connection came
/// back within its window shows both.
#[test]
fn status_lists_the_relay_connections_by_host_and_counts_the_direct_ones_3_5() {
    let mut co = orphan_of_build_7();
    open_relay(&mut co, 11, "build-9");
    co.step(run(11, "r1", "k"));
    co.step(run(11, "r2", "other"));
    let listed = |name: &str, connections, parties, window, orphans| HostStatus {
        host: host(name),
        connections,
        parties,
        window,
        orphans,
    };
    assert_eq!(
        hosts_status(&mut co, 1),
        Some(HostsStatus {
            direct: 3,
            relays: vec![
                listed("build-7", 0, 0, true, 1),
                listed("build-9", 1, 2, false, 0),
            ],
            omitted: 0,
        })
    );
    // build-7's next host coordinator takes its flight back.
    open_relay(&mut co, 12, "build-7");
    co.step(request(
        c(12),
        Request::Reassert {
            id: id("r1"),
            key: key("k"),
            token: token(1, 1),
            outcome: None,
            parent: None,
        },
    ));
    assert_eq!(
        hosts_status(&mut co, 12).map(|hosts| (hosts.direct, hosts.relays[0].clone())),
        Some((3, listed("build-7", 1, 1, true, 0)))
    );
    // Its window ends: it is listed for its connection alone.
    co.step(window_ends("build-7", 10));
    assert_eq!(
        hosts_status(&mut co, 1).map(|hosts| hosts.relays),
        Some(vec![
            listed("build-7", 1, 1, false, 0),
            listed("build-9", 1, 2, false, 0),
        ])
    );
}

/// §3.5, §18.2: a coordinator without relay windows knows no relay
/// connection, and its answer has no `hosts`, as an older one's.
#[test]
fn a_coordinator_without_relay_windows_reports_no_hosts_3_5() {
    let mut co = coordinator(1, Term::First, 1);
    co.step(opened(10, "build-7"));
    assert_eq!(hosts_status(&mut co, 1), None);
}

/// §3.5: the hosts come out of the room of the flights, and those that do
/// not fit are counted in `omitted`.
#[test]
fn hosts_that_do_not_fit_in_the_answer_are_counted_3_5() {
    use crate::protocol::MAX_HOST_BYTES;
    use crate::protocol::limits::STATUS_FLIGHTS_BYTES;
    let mut co = relaying(1, Term::First, 1).with_connection_limit(usize::MAX);
    // Each host id at its limit, every byte escaped: about 550 bytes listed.
    let name = |n: u64| format!("{n:05}{}", "\"".repeat(MAX_HOST_BYTES - 5));
    let one = encoded_len(&HostStatus {
        host: host(&name(0)),
        connections: 1,
        parties: 0,
        window: false,
        orphans: 0,
    }) + 1;
    let fit = (STATUS_FLIGHTS_BYTES / one) as u64;
    let hosts = fit + 3;
    for n in 0..hosts {
        co.step(opened(100 + n, &name(n)));
    }
    let answer = hosts_status(&mut co, 1).unwrap();
    assert_eq!(answer.relays.len() as u64, fit);
    assert_eq!(answer.omitted, 3);
    assert_eq!(answer.direct, 1);
}
