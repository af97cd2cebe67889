//! The library with real processes: calls through the async and the blocking
//! API (SPEC.md §9, §15, §16), the tokio shell (§10, §11), counting (§8.11,
//! §9.8), the protocol on a real coordinator's socket (§3–§6), the
//! election in a flight directory (§7) and the TCP transport (§11.4).
//! One test binary, one module each; support/ is what they share.

mod support;

#[path = "library/calls.rs"]
mod calls;
#[path = "library/election.rs"]
mod election;
#[path = "library/nested.rs"]
mod nested;
#[path = "library/shell.rs"]
mod shell;
#[path = "library/stats.rs"]
mod stats;
#[cfg(feature = "cluster")]
#[path = "library/transport_tcp.rs"]
mod transport_tcp;
#[path = "library/wire.rs"]
mod wire;

/// The entry point of this binary's child processes (support/child.rs).
#[test]
#[ignore = "the entry point of child processes, which run it by name"]
fn child() {
    support::child::enter(|module, role| match module {
        "calls" => calls::child(role),
        "election" => election::child(role),
        "shell" => shell::child(role),
        _ => support::child::unknown(module),
    });
}
