//! The `single-flight` command as users meet it (SPEC.md §13): `run`,
//! `serve` and `status` end to end, and the completion scripts and the man
//! page (§13.7). One test binary, one module each; support/ is what they
//! share.

mod support;

#[path = "command/cli.rs"]
mod cli;
#[path = "command/completions.rs"]
mod completions;
#[path = "command/nested.rs"]
mod nested;
