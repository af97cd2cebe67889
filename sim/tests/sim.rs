//! The simulation's fixed seeds and fresh seeds (SPEC.md §12.4).

use single_flight_sim::{Scenario, run};

#[test]
fn probe() {
    let report = run(&Scenario::chaos(1));
    println!("{report:#?}");
}
