//! The `single-flight` command (SPEC.md §13): run a shell command once among
//! every concurrent caller of a key, hold a coordinator, or look at one.
//!
//! The command is a client of the library like any other program; it lives
//! in `src/cli/` and is no part of the library's API.
#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
