//! Cluster mode against a real etcd (SPEC.md §14): the election (§14.1–
//! §14.3), and processes on hosts that are network namespaces. Without etcd,
//! or without root for the namespaces, the tests say so and skip (CI
//! requires both). One test binary, one module each; support/ is what they
//! share.
#![cfg(feature = "cluster")]

mod support;

#[path = "cluster/access.rs"]
mod access;
#[path = "cluster/election.rs"]
mod election;
#[path = "cluster/processes.rs"]
mod processes;
#[path = "cluster/sharded.rs"]
mod sharded;
#[path = "cluster/shards.rs"]
mod shards;
#[path = "cluster/stampede.rs"]
mod stampede;
#[path = "cluster/tier.rs"]
mod tier;

/// The entry point of this binary's child processes (support/child.rs).
#[test]
#[ignore = "the entry point of child processes, which run it by name"]
fn child() {
    support::child::enter(|module, role| match module {
        "processes" => processes::child(role),
        _ => support::child::unknown(module),
    });
}
