//! `single-flight completions SHELL` (SPEC.md §13.7): the shell's completion
//! script, made by clap_complete from the definitions in mod.rs, so that it
//! completes what the parser accepts.

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Prints the script for `shell` on stdout; returns the exit code.
pub fn completions(shell: Shell) -> u8 {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    // Into memory first: clap_complete panics when its writer fails, and a
    // closed or full stdout is the user's to hear about, not a panic.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, &name, &mut script);
    if shell == Shell::Bash {
        script = bash_fixed(&name, script);
    }
    super::print_text("the completion script", &script)
}

/// The bash script with the states of its subcommands spelt alike.
/// clap_complete (4.6.12, the newest) names the state of `single-flight run`
/// `single__flight__subcmd__run` where it walks the words typed, but
/// `single__subcmd__flight__subcmd__run` in the `case` arm that completes
/// it, so no subcommand's options would ever complete: a bin name with a
/// hyphen is escaped two ways (clap-rs/clap#6421, open). Once it is fixed
/// the wrong spelling no longer occurs and this changes nothing.
fn bash_fixed(name: &str, script: Vec<u8>) -> Vec<u8> {
    /// What clap_complete puts between the names of a command and its
    /// subcommand in a state.
    const SEPARATOR: &str = "__subcmd__";
    let wrong = format!("{}{SEPARATOR}", name.replace('-', SEPARATOR));
    let right = format!("{}{SEPARATOR}", name.replace('-', "__"));
    match String::from_utf8(script) {
        Ok(text) => text.replace(&wrong, &right).into_bytes(),
        // Made of our names and clap_complete's text, so UTF-8; if it ever
        // was not, the script as made completes the subcommands at least.
        Err(error) => error.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bash_states_are_spelt_alike() {
        let script = b"cmd=\"single__flight__subcmd__run\"\nsingle__subcmd__flight__subcmd__run)\n";
        let fixed = bash_fixed("single-flight", script.to_vec());
        assert_eq!(
            String::from_utf8(fixed).unwrap(),
            "cmd=\"single__flight__subcmd__run\"\nsingle__flight__subcmd__run)\n"
        );
    }
}
