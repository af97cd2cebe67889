//! The model's command line (see this crate's README):
//!
//! - `explore [address]`: stateright's web explorer on the CI configuration,
//!   for a person to step through the protocol;
//! - `check [small|two-keys|disconnect|detach|reuse|detach-reuse|large|overlap|nested|stop|goal]`:
//!   an exhaustive check of a configuration of `Directory`, with its counts
//!   and time;
//! - `simulate [CONFIG] [--seed N] [--trace I] [--seconds S] [--traces N]
//!   [--mutant NAME]`: random walks over a configuration (`fleet` unless
//!   named), from a printed seed, until a budget is spent or a property
//!   breaks; `--seed S --trace I` walks one trace of a run again and prints
//!   it (see `single_flight_model::simulate`).
//!
//! Exit status: 0 when every property held, 1 on a violation, 2 on a bad
//! command line.
#![forbid(unsafe_code)]

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::Duration;

use single_flight_core::coordinator::Mutant;
use single_flight_model::Directory;
use single_flight_model::check::Narrated;
use single_flight_model::simulate::{self, Budget, DEFAULT_SECONDS, Simulation};
use stateright::Model;

/// Local only: the explorer has no authentication and runs the checker on
/// request.
const DEFAULT_ADDRESS: &str = "127.0.0.1:3000";

const USAGE: &str = "usage: single-flight-model explore [address]   (default 127.0.0.1:3000)
       single-flight-model check [CONFIG]   (default small)
       single-flight-model simulate [CONFIG] [--seed N] [--trace I] [--seconds S] [--traces N]
                                    [--mutant NAME]
           CONFIG for check: small, two-keys, disconnect, detach, reuse, detach-reuse, large,
                   overlap, nested, stop, goal; for simulate, also fleet (the default)
           --seed N      the run seed (default: a fresh one, printed)
           --trace I     walk trace I of run --seed N again and print it
           --seconds S   stop after S seconds (default 60 when --traces is not given)
           --traces N    stop after N traces (with --seconds: whichever comes first)
           --mutant NAME seed a bug of the coordinator (e.g. RejoinMayLead)";

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    match arguments.as_slice() {
        ["explore"] => explore(DEFAULT_ADDRESS),
        ["explore", address] => explore(address),
        ["check"] => check(Directory::small()),
        ["check", name] if !simulate::WALKED_ONLY.contains(name) => {
            match simulate::configuration(name) {
                Some((_, directory)) => check(directory),
                None => {
                    eprintln!("single-flight-model check: no configuration {name:?}\n{USAGE}");
                    ExitCode::from(2)
                }
            }
        }
        ["simulate", rest @ ..] => match Walk::parse(rest) {
            Ok(walk) => walk.run(),
            Err(error) => {
                eprintln!("single-flight-model simulate: {error}\n{USAGE}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn check(directory: Directory) -> ExitCode {
    println!("checking {directory:?}");
    let report = single_flight_model::check::check(directory);
    println!("{}", report.summary());
    print!("{}", report.known_violations());
    let problems = report.problems();
    if problems.is_empty() {
        println!("every other property holds; every `sometimes` property was reached");
        ExitCode::SUCCESS
    } else {
        print!("{problems}");
        ExitCode::FAILURE
    }
}

fn explore(address: &str) -> ExitCode {
    // The explorer panics on an address it cannot bind; check first, so that
    // the error says what to do.
    if let Err(error) = TcpListener::bind(address) {
        eprintln!(
            "cannot listen on {address}: {error}; pass a free address, e.g. \
             `explore 127.0.0.1:3001`"
        );
        return ExitCode::FAILURE;
    }
    let directory = Directory::small();
    println!("exploring {directory:?}");
    println!("open http://{address}/ (Ctrl-C stops)");
    // Blocks for as long as the explorer serves.
    directory.checker().serve(address);
    ExitCode::SUCCESS
}

/// A `simulate` command line, checked.
struct Walk {
    simulation: Simulation,
    /// The seed was given (a fresh one is printed as such).
    seeded: bool,
    trace: Option<u64>,
    budget: Budget,
}

impl Walk {
    fn parse(arguments: &[&str]) -> Result<Walk, String> {
        let mut configuration = None;
        let mut seed = None;
        let mut trace = None;
        let mut seconds = None;
        let mut traces = None;
        let mut mutant: Option<Mutant> = None;
        let mut arguments = arguments.iter();
        while let Some(&argument) = arguments.next() {
            let mut value = |option: &str| {
                arguments
                    .next()
                    .copied()
                    .ok_or_else(|| format!("{option} needs a value"))
            };
            match argument {
                "--seed" => seed = Some(number("--seed", value("--seed")?)?),
                "--trace" => trace = Some(number("--trace", value("--trace")?)?),
                "--seconds" => seconds = Some(number("--seconds", value("--seconds")?)?),
                "--traces" => traces = Some(number("--traces", value("--traces")?)?),
                "--mutant" => {
                    let name = value("--mutant")?;
                    let found = simulate::mutant(name).ok_or_else(|| {
                        let known: Vec<String> =
                            Mutant::ALL.iter().map(|each| format!("{each:?}")).collect();
                        format!("no mutant {name:?}; the mutants are {}", known.join(", "))
                    })?;
                    mutant = Some(found);
                }
                option if option.starts_with('-') => {
                    return Err(format!("unknown option {option:?}"));
                }
                name if configuration.is_none() => configuration = Some(name),
                extra => return Err(format!("unexpected argument {extra:?}")),
            }
        }
        if trace.is_some() && seed.is_none() {
            return Err("--trace replays a trace of a run: give the run's --seed".into());
        }
        if trace.is_some() && (seconds.is_some() || traces.is_some()) {
            return Err("--trace walks one trace: it takes no --seconds or --traces".into());
        }
        if seconds == Some(0) || traces == Some(0) {
            return Err("a budget of 0 walks nothing: give --seconds or --traces above 0".into());
        }
        let name = configuration.unwrap_or("fleet");
        let seeded = seed.is_some();
        let seed = seed.unwrap_or_else(simulate::fresh_seed);
        let simulation = Simulation::new(name, mutant, seed).ok_or_else(|| {
            let known: Vec<&str> = simulate::CONFIGURATIONS
                .iter()
                .map(|(known, _)| *known)
                .collect();
            format!(
                "no configuration {name:?}; the configurations are {}",
                known.join(", ")
            )
        })?;
        let budget = Budget {
            traces,
            time: match (seconds, traces) {
                (None, None) => Some(Duration::from_secs(DEFAULT_SECONDS)),
                (seconds, _) => seconds.map(Duration::from_secs),
            },
        };
        Ok(Walk {
            simulation,
            seeded,
            trace,
            budget,
        })
    }

    fn run(self) -> ExitCode {
        let simulation = &self.simulation;
        println!(
            "simulating {} {:?}",
            simulation.configuration, simulation.directory
        );
        println!(
            "seed {}{}",
            simulation.seed,
            if self.seeded { "" } else { " (fresh)" }
        );
        if let Some(index) = self.trace {
            let trace = simulation.trace(index);
            println!(
                "trace {index} (trace seed {}), {} steps{}:",
                trace.seed,
                trace.actions.len(),
                if trace.capped { ", capped" } else { "" }
            );
            if trace.broken.is_empty() {
                println!("its budgets: {:?}", trace.directory);
                print!("{}", trace.directory.narrate(&trace.actions));
                println!("every property held along it");
                return ExitCode::SUCCESS;
            }
            print!("{}", simulate::describe(simulation, &trace));
            return ExitCode::FAILURE;
        }
        match (self.budget.time, self.budget.traces) {
            (Some(time), Some(traces)) => {
                println!("for {} s or {traces} traces", time.as_secs())
            }
            (Some(time), None) => println!("for {} s", time.as_secs()),
            (None, Some(traces)) => println!("for {traces} traces"),
            (None, None) => {}
        }
        let report = simulation.run(self.budget);
        print!("{}", report.summary());
        let problems = report.problems();
        if problems.is_empty() {
            println!("every property held");
            ExitCode::SUCCESS
        } else {
            print!("{problems}");
            ExitCode::FAILURE
        }
    }
}

/// A whole number given to `option`.
fn number(option: &str, text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{option} takes a whole number, not {text:?}"))
}
