//! Random walks far past the exhaustive bounds (SPEC.md §12.1): the fleet
//! configuration keeps every property along every trace walked, and a walk
//! finds each seeded bug (SPEC.md §12.3).

use std::time::Duration;

use single_flight_core::coordinator::Mutant;
use single_flight_model::check::must_hold;
use single_flight_model::simulate::{self, Budget, DEFAULT_SECONDS, Simulation};

/// Overrides the walk's budget of seconds, for a long run on request.
const SECONDS_VARIABLE: &str = "SINGLE_FLIGHT_MODEL_SECONDS";
/// Pins the walk's run seed, to replay the one a CI run printed.
const SEED_VARIABLE: &str = "SINGLE_FLIGHT_MODEL_SEED";

/// The run seed of the deterministic walks (the mutants', the `sometimes`
/// properties'): fixed, so that which trace finds each bug is the same on
/// every machine (the README's table). The first seed from 1 up with which
/// the walk finds `JoinsHeldFlights`, the rarest bug, within 25 000 traces
/// (seeds 1 to 4 do not; the README gives its rate from fresh seeds).
const FIXED_SEED: u64 = 5;

/// The traces a mutant's walk may take: a budget of traces, not of time, so
/// that the result does not depend on the machine. Above the 18 327 that
/// `JoinsHeldFlights` needs from [`FIXED_SEED`], the most of any mutant, and
/// small enough that a mutant that is no longer caught fails in about twenty
/// seconds.
const MUTANT_TRACES: u64 = 50_000;

/// The traces of the walk that must reach every `sometimes` property: from
/// [`FIXED_SEED`], 500 reach them all and 200 leave one unreached; twice 500
/// is about a second of walking.
const SOMETIMES_TRACES: u64 = 1_000;

/// A whole number from the environment variable `name`, if set.
fn from_environment(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    match text.parse() {
        Ok(number) => Some(number),
        Err(_) => panic!("{name} must be a whole number, not {text:?}"),
    }
}

#[test]
fn random_walks_keep_every_property() {
    let seconds = from_environment(SECONDS_VARIABLE).unwrap_or(DEFAULT_SECONDS);
    let seed = from_environment(SEED_VARIABLE).unwrap_or_else(simulate::fresh_seed);
    let simulation = Simulation::new("fleet", None, seed).expect("fleet is a configuration");
    println!(
        "walking fleet for {seconds} s from seed {seed} (set {SEED_VARIABLE}={seed} to walk \
         the same traces)"
    );
    let report = simulation.run(Budget {
        traces: None,
        time: Some(Duration::from_secs(seconds)),
    });
    print!("{}", report.summary());
    // Each worker walks its first trace whatever the time: however slow the
    // machine, this run checked something.
    assert!(
        report.traces >= single_flight_model::check::THREADS as u64,
        "seed {seed}: {}",
        report.summary()
    );
    let problems = report.problems();
    assert!(
        problems.is_empty(),
        "seed {seed} ({SEED_VARIABLE}={seed} walks it again):\n{problems}"
    );
}

#[test]
fn random_walks_find_every_seeded_bug() {
    let must_hold = must_hold();
    let mut missed = Vec::new();
    for mutant in Mutant::ALL {
        // The connection slots (SPEC.md §11.3) are not actions of the
        // directory that the walks take: tests/slots.rs and tests/mutants.rs
        // check them, and catch this one, exhaustively.
        if mutant == Mutant::KeepsRefusedSlots {
            continue;
        }
        // Nor are relays (SPEC.md §18): tests/tier.rs hunts this one in the
        // model of the host tier.
        if mutant == Mutant::InterruptsRelayedAtOnce {
            continue;
        }
        // The held flights' bug needs two leaders of a key reasserted in
        // one window in a given order, behind a waiting run: walks meet it
        // about once in 900 000 traces (model/README.md, "Random walks").
        // FIXED_SEED was picked as the first seed to meet it early in the
        // fleet of one term at a time, where the walk keeps hunting it, so
        // that a change that makes the walker miss that path fails here;
        // the exhaustive hunt of tests/mutants.rs catches it in any case.
        let configuration = match mutant {
            Mutant::JoinsHeldFlights => "fleet-without-overlaps",
            // The fleet makes no nested calls (SPEC.md §17): walked in the
            // configuration that does.
            Mutant::SkipsCycleCheck | Mutant::RefusesNonCycle => "nested",
            // Nor does it stop its coordinators (SPEC.md §10.4).
            Mutant::StopsInGraceAtOnce => "stop",
            _ => "fleet",
        };
        let simulation = Simulation::new(configuration, Some(mutant), FIXED_SEED)
            .expect("both are configurations");
        let report = simulation.run(Budget {
            traces: Some(MUTANT_TRACES),
            time: None,
        });
        let caught = report
            .violation
            .as_ref()
            .filter(|trace| trace.broken.iter().any(|name| must_hold.contains(name)));
        match caught {
            Some(trace) => println!(
                "{mutant:?}: trace {} breaks {:?} ({} traces walked in {:.1} s)",
                trace.index,
                trace.broken,
                report.traces,
                report.elapsed.as_secs_f64()
            ),
            None => {
                println!("{mutant:?} is NOT caught: {}", report.summary());
                missed.push(mutant);
            }
        }
    }
    assert!(
        missed.is_empty(),
        "not caught within {MUTANT_TRACES} traces of seed {FIXED_SEED}: {missed:?}"
    );
}

#[test]
fn a_fixed_walk_reaches_every_sometimes_property() {
    let simulation = Simulation::new("fleet", None, FIXED_SEED).expect("fleet is a configuration");
    let report = simulation.run(Budget {
        traces: Some(SOMETIMES_TRACES),
        time: None,
    });
    print!("{}", report.summary());
    assert_eq!(report.problems(), "");
    assert_eq!(report.traces, SOMETIMES_TRACES);
    assert!(
        report.missed.is_empty(),
        "never reached: {:?}",
        report.missed
    );
}
