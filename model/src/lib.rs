//! The stateright model of single-flight (SPEC.md §12): the model checker
//! runs the **shipped** coordinator and client state machines through every
//! interleaving of calls (detached or not, with a reuse window or not),
//! messages, work, cancels, process deaths, coordinator failovers,
//! reconnects, grace windows and reuse windows' expiries that the bounds
//! allow, and checks the properties of [`properties`] in every state it
//! reaches.
//!
//! # What is modelled
//!
//! A [`Directory`] is a plain [`stateright::Model`]. Its [`State`] holds:
//!
//! - the client processes, each a real [`single_flight_core::client::Client`]
//!   with its connection, the work its leading calls run, and the model's
//!   record of each call;
//! - one real [`single_flight_core::coordinator::Coordinator`] for the current
//!   term, and the durable epoch of the election;
//! - every connection as two ordered queues (requests, responses): a Unix
//!   socket is reliable and ordered per connection, and what breaks is the
//!   whole connection, which both ends learn;
//! - the history the properties need (what each flight's work produced,
//!   the last token minted, the flights a later term may take back) and what
//!   the last step broke or showed.
//!
//! [`Directory::next_state`](stateright::Model::next_state) applies one
//! [`Action`] by feeding events to the real `step` functions and carrying
//! out the effects they return, exactly as the shell does: a `Send` goes on
//! the queue of its connection, `StartWork` starts the work and `StopWork`
//! drops it, a coordinator's `Close` closes the connection at both ends, and
//! its `StartTimer` of a reuse window starts a timer that a later action
//! fires (the grace window ends by an action of its own).
//!
//! # Why a plain `Model` and not stateright's `ActorModel`
//!
//! The `ActorModel` delivers messages from a network that keeps them across
//! crashes and loses or reorders them one by one. That is not a Unix socket:
//! here messages on one connection stay in order, and when a process dies
//! its connections close, both ends are told, and what was still queued is
//! gone with them. The actor network cannot say "connection lost, both ends
//! notified", and its per-message nondeterminism explodes the state space (a
//! small trial went from 39 to 1.45 M states when one crash was allowed). A
//! plain model with per-connection queues says exactly what the shell
//! guarantees, and lets one action die and elect atomically.
//!
//! # Bounds and reductions
//!
//! Every bound is a budget of the action generator ([`Directory`]'s fields):
//! calls, cancels, broken connections, process deaths, coordinator deaths,
//! overlapping terms, stops. No depth or state cap is used, so a finished run has
//! explored every state the bounds allow ([`check::check`]). Processes are
//! interchangeable, so [`State`]'s hash, which is all the checker keeps of a
//! visited state, is the same for every permutation of them (symmetry
//! reduction without a representative). The configurations CI checks are
//! [`Directory::small`], [`Directory::two_keys`], [`Directory::disconnect`],
//! [`Directory::detach`], [`Directory::reuse`], [`Directory::overlap`],
//! [`Directory::nested`], [`Directory::stop`] and [`Directory::large`] (and
//! variants in `tests/exhaustive.rs`);
//! [`Directory::detach_and_reuse`] runs on request.
//! [`slots::Slots`] is a second, small model, of one term's connection
//! slots (SPEC.md §11.3): accepts, refusals in the handshake, departures,
//! opens and closes against a limit of two, checked exhaustively in CI.
//! The README gives their state counts and times.
//!
//! [`Directory::fleet`] (six processes, four keys, twenty calls, five
//! failovers) is far past what an exhaustive check reaches; [`simulate`]
//! walks it, and any configuration, at random from a printed seed, checking
//! every property in every state of every trace, and replays one trace from
//! its seed. CI walks the fleet for about a minute (`tests/simulation.rs`).
//!
//! [`connector`] is a second, small model: one process's real
//! [`single_flight_core::client::Connector`] with modelled time, against a
//! scripted coordinator that answers, goes away with answers still buffered,
//! breaks or refuses (SPEC.md §12.6); its seeded bugs are the connector's.
//!
//! [`tier`] is a third model, of the host tier (SPEC.md §18): two hosts, each
//! a real [`single_flight_core::relay::Relay`] (its host coordinator) and a
//! real client process, and the cluster's real coordinator with its relay
//! windows, through the death of a host coordinator and of the cluster's
//! coordinator; its properties are the tier's (§18.4), and its seeded bugs
//! a relay that acknowledges a land before the cluster did and a
//! coordinator that interrupts a relayed flight at once.
//!
//! [`shards`] is a fourth model, of a sharded cluster (SPEC.md §19, §12.9):
//! two shards' real coordinators, processes with a real client per shard
//! that route each call by the shipped `ShardCount::of` and each nested
//! call's parent by the shipped `ShardCount::parent_for`, through the death
//! of one shard's coordinator; its seeded bug is a routing that sends a
//! parent to the other shard.
//!
//! Violations are recorded as flags in the state rather than panics: a panic
//! inside `next_state` ends the run without a path to show.
//!
//! # What the model found
//!
//! The model found two core bugs, both fixed; `tests/regressions.rs` keeps
//! their paths. A new term could bring back a flight that had already landed
//! (SPEC.md §8.3, §9.4). And a flight that a later flight of its key had
//! superseded, reasserted first in a grace window, was joined by the runs
//! that waited there, which the later flight's reassert then interrupted;
//! reasserted flights are now held until the window ends (§8.3, §8.4), and
//! the property "a reassert interrupts only rejoins" checks it.
//! [`properties::KNOWN_VIOLATIONS`] is empty. In detached calls and reuse
//! windows it found no core bug; `tests/scenarios.rs` plays their main
//! paths, among them why a joiner of a detached flight may be interrupted
//! after a failover (SPEC.md §12.2).
//!
//! # The seeded bugs
//!
//! The core built with `--cfg single_flight_mutants` (.cargo/config.toml) compiles in
//! deliberately wrong coordinators ([`single_flight_core::coordinator::Mutant`]);
//! [`Directory::mutant`] picks one, and the tests show that each is caught.
#![forbid(unsafe_code)]

pub mod check;
pub mod connector;
mod directory;
pub mod properties;
pub mod shards;
pub mod simulate;
pub mod slots;
mod state;
pub mod tier;

pub use directory::{Action, Choice, Directory, Ending, KEY_NAMES};
pub use state::{
    CallRecord, Deposed, History, Link, Process, Rejoin, State, StepFacts, Used, Violation, Witness,
};

/// The allocator of every binary that links the model (the tests, the
/// command): see model/Cargo.toml for why.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
