//! The simulation's fixed seeds and fresh seeds (SPEC.md §12.4).

use single_flight::_internal::shell::mutant::Mutant;
use single_flight_sim::{Scenario, run};

#[test]
fn probe() {
    let mutant = match std::env::var("M").as_deref() {
        Ok("1") => Some(Mutant::WritersNeverFlush),
        Ok("6") => Some(Mutant::FixedEndOfTermFlush),
        Ok("7") => Some(Mutant::ConnectIgnoresGone),
        _ => None,
    };
    let n: u64 = std::env::var("N").map_or(20, |n| n.parse().unwrap());
    let mut caught = 0;
    for seed in 1..=n {
        let mut scenario = Scenario::chaos(seed);
        scenario.mutant = mutant.map(|m| (m, vec![]));
        let report = run(&scenario);
        if !report.violations.is_empty() {
            caught += 1;
            println!("seed {seed}: {:?} {:?}", report.calls, &report.violations[..report.violations.len().min(3)]);
        }
    }
    println!("{caught}/{n}");
}

#[test]
fn show() {
    let seed: u64 = std::env::var("S").unwrap().parse().unwrap();
    let from: f64 = std::env::var("FROM").unwrap().parse().unwrap();
    let to: f64 = std::env::var("TO").unwrap().parse().unwrap();
    let mut scenario = Scenario::chaos(seed);
    scenario.keep_trace = true;
    let report = run(&scenario);
    for line in report.trace_lines.unwrap() {
        let t: f64 = line.split_whitespace().next().unwrap().parse().unwrap();
        if t >= from && t <= to && !line.contains("deliver") || line.contains("fault") || line.contains("election") {
            println!("{line}");
        }
    }
    println!("{:#?}", report.violations);
}
