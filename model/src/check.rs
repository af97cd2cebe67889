//! Running the checker and judging its result, shared by the tests and the
//! `check` command.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::fmt::Write as _;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::directory::{Action, Directory};
use crate::properties::KNOWN_VIOLATIONS;

/// Threads of the checker: CI machines have two cores.
pub const THREADS: usize = 2;

/// What one run of the checker found.
#[derive(Debug)]
pub struct Report {
    pub directory: Directory,
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Whether the run visited every state the bounds allow (see
    /// [`check`]).
    pub complete: bool,
    /// The path to each discovery, by property name.
    pub discoveries: BTreeMap<&'static str, Vec<Action>>,
}

/// Checks `directory` exhaustively: depth-first, [`THREADS`] threads,
/// symmetry reduction (by the state's fingerprint, `State`'s `Hash`), no
/// state, depth or time cap.
pub fn check(directory: Directory) -> Report {
    run(directory, HasDiscoveries::All)
}

/// Checks `directory` until one of the properties that the shipped core
/// keeps fails: for the seeded bugs, whose runs need not be complete.
pub fn hunt(directory: Directory) -> Report {
    run(directory, HasDiscoveries::AnyOf(must_hold()))
}

/// The `always` properties the shipped core keeps: all of them but the
/// [`KNOWN_VIOLATIONS`].
pub fn must_hold() -> BTreeSet<&'static str> {
    crate::properties::all()
        .into_iter()
        .filter(|property| property.expectation == Expectation::Always)
        .map(|property| property.name)
        .filter(|name| !KNOWN_VIOLATIONS.contains(name))
        .collect()
}

fn run(directory: Directory, finish_when: HasDiscoveries) -> Report {
    // The model is not the pure core: it may read a clock, to report how
    // long a check took (never to decide anything).
    let started = Instant::now();
    let checker = directory
        .clone()
        .checker()
        .threads(THREADS)
        .finish_when(finish_when)
        .spawn_dfs()
        .join();
    let elapsed = started.elapsed();
    let discoveries: BTreeMap<&'static str, Vec<Action>> = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name, path.into_actions()))
        .collect();
    // Stateright 0.31 reports a run as done when every property has a
    // discovery, even if states remain. With no cap set, a run that ends
    // while some property still waits for one has visited every state.
    let complete = checker.is_done() && discoveries.len() < directory.properties().len();
    Report {
        directory,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        complete,
        discoveries,
    }
}

impl Report {
    /// One line for logs and the README.
    pub fn summary(&self) -> String {
        format!(
            "{} unique states ({} generated, depth {}) in {:.1} s, {}",
            self.unique_states,
            self.states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            if self.complete {
                "complete"
            } else {
                "INCOMPLETE"
            }
        )
    }

    /// Everything wrong with this run of the shipped core, with the paths
    /// to show it; empty when the run was complete, every property that
    /// must hold held, and every `sometimes` property was reached. The
    /// known violations may or may not show in a configuration; the tests
    /// would be pinned by scenario tests of their own.
    pub fn problems(&self) -> String {
        let mut text = String::new();
        if !self.complete {
            let _ = writeln!(text, "the run was not complete: {}", self.summary());
        }
        for property in self.directory.properties() {
            let name = property.name;
            let found = self.discoveries.get(name);
            match (property.expectation, found) {
                (Expectation::Sometimes, None) => {
                    let _ = writeln!(text, "never reached: {name:?} (the model proves nothing)");
                }
                (Expectation::Always | Expectation::Eventually, Some(path))
                    if !KNOWN_VIOLATIONS.contains(&name) =>
                {
                    let _ = writeln!(text, "violated: {name:?}, by this path:");
                    text.push_str(&self.directory.narrate(path));
                }
                _ => {}
            }
        }
        text
    }

    /// The paths to the known violations, for the log.
    pub fn known_violations(&self) -> String {
        let mut text = String::new();
        for name in KNOWN_VIOLATIONS {
            if let Some(path) = self.discoveries.get(name) {
                let _ = writeln!(text, "known violation {name:?} (a core bug), by this path:");
                text.push_str(&self.directory.narrate(path));
            }
        }
        text
    }
}

/// A model whose paths can be told as a story: the directory's, the tier's
/// and the shards'. [`exhaust`] and [`first_broken`] check the last two;
/// the directory's has its own [`Report`], which knows its known
/// violations.
pub trait Narrated: Model {
    /// Applies `action` to a copy of `state`; with `log`, says what
    /// happened.
    fn apply(
        &self,
        state: &Self::State,
        action: &Self::Action,
        log: Option<&mut String>,
    ) -> Self::State;

    /// What the step into `state` broke, if anything.
    fn broke(state: &Self::State) -> Option<String>;

    /// The actions of the path, replayed with what happened in each.
    fn narrate(&self, actions: &[Self::Action]) -> String
    where
        Self::Action: Debug,
    {
        let mut state = self.init_states().remove(0);
        let mut text = String::new();
        for (number, action) in actions.iter().enumerate() {
            let _ = writeln!(text, "{:>3}. {action:?}", number + 1);
            let mut log = String::new();
            state = self.apply(&state, action, Some(&mut log));
            text.push_str(&log);
            if let Some(broken) = Self::broke(&state) {
                let _ = writeln!(text, "       !! {broken}");
            }
        }
        text
    }
}

/// Checks `model` to the end (depth-first, [`THREADS`] threads); returns its
/// unique states, or the path of every property broken and the name of every
/// `sometimes` one never reached.
pub fn exhaust<M>(model: &M) -> Result<usize, String>
where
    M: Narrated + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Debug + Clone + PartialEq,
{
    let checker = model.clone().checker().threads(THREADS).spawn_dfs().join();
    let mut problems = String::new();
    for property in model.properties() {
        match (property.expectation, checker.discovery(property.name)) {
            (Expectation::Sometimes, None) => {
                let _ = writeln!(problems, "never reached: {:?}", property.name);
            }
            (Expectation::Always | Expectation::Eventually, Some(path)) => {
                let _ = writeln!(problems, "violated: {:?}, by this path:", property.name);
                problems.push_str(&model.narrate(&path.into_actions()));
            }
            _ => {}
        }
    }
    if problems.is_empty() {
        Ok(checker.unique_state_count())
    } else {
        Err(problems)
    }
}

/// The first `always` property of `model` that a state breaks, and the path
/// to it: for the seeded bugs.
pub fn first_broken<M>(model: &M) -> Option<(&'static str, Vec<M::Action>)>
where
    M: Narrated + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Debug + Clone + PartialEq,
{
    let checker = model.clone().checker().threads(THREADS).spawn_dfs().join();
    model
        .properties()
        .into_iter()
        .filter(|property| property.expectation == Expectation::Always)
        .find_map(|property| {
            checker
                .discovery(property.name)
                .map(|path| (property.name, path.into_actions()))
        })
}
