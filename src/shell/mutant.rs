//! Deliberately wrong variants of the shell (SPEC.md §12.7), so that the
//! deterministic simulation (sim/) can show that it catches each of them.
//! Only a build with `--cfg single_flight_mutants` makes them reachable
//! (`Seeded::new`): the simulation's own workspace sets it
//! (sim/.cargo/config.toml). A `cfg` and not a Cargo feature, because
//! features unify: a feature that any crate in a build turns on would seed
//! the bugs into every user of the library in that build. Without it
//! [`Seeded`] is zero-sized and every hook is its shipped value, as in the
//! core's seeded bugs (core/src/coordinator/mutant.rs).
//!
//! Each hook takes the shipped value and the seeded one, so the code that
//! ships reads the same with or without the `cfg`.

use crate::client::Connector;

/// One seeded bug of the shell, each one that was once shipped (issue 27's
/// list) or found by a black-box test. Each names the rule of SPEC.md it
/// breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Mutant {
    /// §11.3: the writers never flush, so what a TLS-like writer keeps
    /// back never reaches the peer (bug 1).
    WritersNeverFlush,
    /// §10.4: an ending term gives its writers a fixed second, whatever
    /// they still have queued, cutting a large landed line off (bug 6).
    FixedEndOfTermFlush,
    /// §14.3: a connection attempt goes on to an address the watch has
    /// already replaced, waiting out the connect timeout and missing the
    /// new term's grace window (bug 7; issue 28, item 2).
    ConnectIgnoresGone,
    /// §10: the backend is opened in the caller's task, so that what its
    /// client starts in the background (a cluster's channel to etcd) lives
    /// on the caller's runtime, and dies with it: every later failover
    /// fails (bug 4). Its hook is in `open_on`, whose shipped choice is
    /// `start_thread`'s: open where the driver runs.
    #[cfg_attr(
        not(feature = "_internal"),
        allow(
            dead_code,
            reason = "its hook is in `open_on`, which only `_internal` has"
        )
    )]
    BackendOpenedByCaller,
    /// A seeded bug of the connector, the core's client machine (bugs 2
    /// and 3, which the connector's model catches too), carried into the
    /// process's connector, so that the simulation runs it in whole
    /// processes over a simulated network and election.
    #[cfg(single_flight_mutants)]
    Connector(crate::client::Mutant),
}

/// The seeded bug of one `SingleFlight`, if any: zero-sized, and always
/// none, in a build without `--cfg single_flight_mutants`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seeded {
    #[cfg(single_flight_mutants)]
    mutant: Option<Mutant>,
}

impl Seeded {
    /// The shipped shell.
    pub const NONE: Seeded = Seeded {
        #[cfg(single_flight_mutants)]
        mutant: None,
    };

    /// A shell with `mutant` seeded in.
    #[cfg(single_flight_mutants)]
    pub fn new(mutant: Option<Mutant>) -> Seeded {
        Seeded { mutant }
    }

    /// The connector of a process with this bug: the shipped one unless
    /// the bug is the connector's.
    pub(crate) fn connector(self) -> Connector {
        let connector = Connector::new();
        #[cfg(single_flight_mutants)]
        if let Some(Mutant::Connector(bug)) = self.mutant {
            return connector.with_mutant(Some(bug));
        }
        connector
    }

    /// `seeded` when `mutant` is the bug seeded in, otherwise `shipped`.
    #[cfg_attr(not(single_flight_mutants), allow(unused_variables))]
    pub(crate) fn hook<T>(self, mutant: Mutant, shipped: T, seeded: T) -> T {
        #[cfg(single_flight_mutants)]
        if self.mutant == Some(mutant) {
            return seeded;
        }
        shipped
    }
}
