//! `single-flight completions` and `single-flight man` (SPEC.md §13.7) as a
//! user meets them: the bash script sourced in a real bash, the page rendered
//! by a real man(1).

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::support::BINARY;
use crate::support::tools::{self, installed};

/// Every shell `completions` takes, as `completions --help` lists them.
const SHELLS: [&str; 5] = ["bash", "zsh", "fish", "elvish", "powershell"];

/// Every subcommand a user can type, as `single-flight --help` lists them.
const SUBCOMMANDS: [&str; 5] = ["run", "serve", "status", "completions", "man"];

fn single_flight(args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the single-flight binary starts")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A file of this test's own in the temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, contents: &[u8]) -> Scratch {
        let path = std::env::temp_dir().join(format!("sf-{name}-{}", std::process::id()));
        fs::write(&path, contents).expect("the temporary directory is writable");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Sources the bash script and completes the words, the last of which is the
/// one under the cursor, as bash does at a Tab: through the function that
/// the script registers for single-flight, with the `COMP_*` variables bash
/// sets. Returns the candidates, one a line.
const COMPLETE: &str = r#"
source "$1"; shift
spec=$(complete -p single-flight) || { echo "the script registers no completion for single-flight" >&2; exit 3; }
function=${spec##* -F }; function=${function%% *}
COMP_WORDS=("$@")
COMP_CWORD=$(($# - 1))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
previous=${COMP_WORDS[COMP_CWORD - 1]}
"$function" single-flight "${COMP_WORDS[COMP_CWORD]}" "$previous"
printf '%s\n' "${COMPREPLY[@]}"
"#;

/// The candidates bash offers for `words`, or `None` without bash.
fn bash_completes(script: &Scratch, words: &[&str]) -> Option<Vec<String>> {
    if !installed("bash") {
        eprintln!("skipping: bash is not installed, so its completion script cannot be tried");
        return None;
    }
    let path = script.0.to_str().expect("a temporary path in UTF-8");
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", COMPLETE, "bash", path])
        .args(words)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs");
    assert!(output.status.success(), "bash: {}", text(&output.stderr));
    Some(text(&output.stdout).lines().map(str::to_owned).collect())
}

/// §13.7: the bash script completes a subcommand's options and the fixed
/// values of an option, sourced in a real bash.
#[test]
fn bash_completes_the_options_of_a_subcommand() {
    let made = single_flight(&["completions", "bash"]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));
    let script = Scratch::new("completion.bash", &made.stdout);

    let Some(key) = bash_completes(&script, &["single-flight", "run", "--ke"]) else {
        return;
    };
    assert!(key.contains(&"--key".to_owned()), "{key:?}");

    let subcommands = bash_completes(&script, &["single-flight", "s"]).expect("bash ran above");
    assert!(subcommands.contains(&"serve".to_owned()), "{subcommands:?}");
    assert!(
        subcommands.contains(&"status".to_owned()),
        "{subcommands:?}"
    );

    let formats = bash_completes(&script, &["single-flight", "status", "--format", ""])
        .expect("bash ran above");
    assert_eq!(formats, ["text", "json", "openmetrics"]);
}

/// §13.7: every shell gets a script, and an unknown one is a usage error,
/// which exits 125 like every usage error of the command (§13.3) and says
/// which shells there are.
#[test]
fn every_shell_gets_a_script_and_an_unknown_one_is_a_usage_error() {
    for shell in SHELLS {
        let made = single_flight(&["completions", shell]);
        assert_eq!(
            made.status.code(),
            Some(0),
            "{shell}: {}",
            text(&made.stderr)
        );
        assert!(!made.stdout.is_empty(), "{shell}");
        assert!(made.stderr.is_empty(), "{shell}: {}", text(&made.stderr));
        assert!(text(&made.stdout).contains("single-flight"), "{shell}");
    }
    let unknown = single_flight(&["completions", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(125));
    assert!(unknown.stdout.is_empty());
    let message = text(&unknown.stderr);
    assert!(message.contains("invalid value 'tcsh'"), "{message}");
    for shell in SHELLS {
        assert!(message.contains(shell), "{shell} in {message}");
    }
}

/// Both are part of the command a user discovers with `--help`, like
/// `rustup completions`.
#[test]
fn help_lists_completions_and_man() {
    let help = single_flight(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let help = text(&help.stdout);
    for subcommand in SUBCOMMANDS {
        assert!(
            help.contains(&format!("\n  {subcommand} ")),
            "{subcommand} in {help}"
        );
    }
}

/// Whether man(1) is here. Without it the page test says so and skips,
/// unless `SINGLE_FLIGHT_REQUIRE_MAN` is set (CI sets it, so that a missing
/// package fails instead of passing silently).
fn man_available() -> bool {
    tools::needed(
        installed("man"),
        "man",
        "SINGLE_FLIGHT_REQUIRE_MAN",
        "install it (Debian: apt-get install man-db)",
    )
}

/// §13.7: the page renders in man(1) without a warning from groff, and
/// holds every subcommand and the exit statuses of §13.3 and §13.5.
#[test]
fn the_man_page_renders_without_warnings() {
    let made = single_flight(&["man"]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));
    assert!(made.stderr.is_empty(), "{}", text(&made.stderr));
    if !man_available() {
        return;
    }
    let page = Scratch::new("single-flight.1", &made.stdout);
    // --warnings makes man-db run groff with -w: every warning groff has
    // for the page comes out on stderr.
    let rendered = Command::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(&page.0)
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .stdin(Stdio::null())
        .output()
        .expect("man runs");
    assert_eq!(
        rendered.status.code(),
        Some(0),
        "{}",
        text(&rendered.stderr)
    );
    assert!(
        rendered.stderr.is_empty(),
        "man: {}",
        text(&rendered.stderr)
    );
    let shown = text(&rendered.stdout);

    for subcommand in SUBCOMMANDS {
        let heading = format!("\nSINGLE-FLIGHT {}\n", subcommand.to_uppercase());
        assert!(shown.contains(&heading), "{heading:?} in {shown}");
        let synopsis = format!("single-flight {subcommand} ");
        assert!(shown.contains(&synopsis), "{synopsis:?} in {shown}");
    }
    // clap's `help` subcommand says no more than `--help`.
    assert!(!shown.contains("SINGLE-FLIGHT HELP"), "{shown}");

    let statuses = shown
        .split_once("\nEXIT STATUS\n")
        .map(|(_, rest)| rest)
        .expect("an EXIT STATUS section");
    let statuses = statuses.split("\nEXAMPLES\n").next().unwrap_or(statuses);
    // Each status begins a row at the section's indentation, followed by
    // its meaning on the same line or, when it is too wide, the next.
    for status in ["0", "3", "75", "124", "125", "126", "127", "129, 130, 143"] {
        let row = |line: &str| {
            line.strip_prefix("       ")
                .and_then(|rest| rest.strip_prefix(status))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        };
        assert!(statuses.lines().any(row), "{status} in {statuses}");
    }
    assert!(statuses.contains("COMMAND's exit status"), "{statuses}");
}
