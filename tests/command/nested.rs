//! Nested runs (SPEC.md §17.3): a `run` in the COMMAND of another flight of
//! the same directory names that flight as its parent, and when it would
//! wait for a flight that waits for its parent it exits 78 at once, naming
//! the cycle, where it used to hang until `--timeout`.
//!
//! Each outer run has a `--timeout` far above what the runs take: a cycle
//! left waiting would end it with 124, which fails the test, instead of
//! hanging it. No test asserts on time.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use single_flight::SingleFlight;

use crate::support::{BINARY, PATIENCE, child};

/// The outer runs' `--timeout`: a bound, never reached when cycles are
/// found.
const TIMEOUT: &str = "60";

struct Scene {
    root: PathBuf,
    dir: PathBuf,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let root = std::env::temp_dir().join(format!("sf-nested-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        Scene {
            dir: root.join("flights"),
            root,
        }
    }

    /// `single-flight run --key KEY -- sh -c SCRIPT`, where SCRIPT runs the
    /// command as `"$SF"` and the flight directory is `$D`; no variable of
    /// the test's own environment reaches it.
    fn command(&self, key: &str, script: &str) -> Command {
        let mut command = Command::new(BINARY);
        command
            .current_dir(&self.root)
            .env_remove("SINGLE_FLIGHT_DIR")
            .env_remove("SINGLE_FLIGHT_TOKEN")
            .env_remove("SINGLE_FLIGHT_PLACE")
            .env_remove("SINGLE_FLIGHT_KEY")
            .env_remove("RUST_LOG")
            .env("SF", BINARY)
            .env("D", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .args(["run", "--dir"])
            .arg(&self.dir)
            .args(["--timeout", TIMEOUT, "--key", key, "--", "sh", "-c", script]);
        command
    }

    /// Runs it to its end (boundedly): its exit code, stdout and stderr.
    fn run(&self, key: &str, script: &str) -> (Option<i32>, String, String) {
        let mut process = self.command(key, script).spawn().unwrap();
        let (mut out, mut err) = (
            process.stdout.take().unwrap(),
            process.stderr.take().unwrap(),
        );
        let reading = std::thread::spawn(move || {
            let (mut stdout, mut stderr) = (String::new(), String::new());
            use std::io::Read;
            out.read_to_string(&mut stdout).unwrap();
            err.read_to_string(&mut stderr).unwrap();
            (stdout, stderr)
        });
        let status = child::wait(&mut process).expect("the run ends within the patience");
        let (stdout, stderr) = reading.join().unwrap();
        (status.code(), stdout, stderr)
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// §17.3: the command of issue 29's report: a run in the COMMAND of its
/// own key exits 78 at once with the cycle named, and the outer run goes
/// on (it used to hang until --timeout and exit 124).
#[test]
fn a_run_in_its_own_command_exits_at_once() {
    let scene = Scene::new("self");
    let (code, stdout, stderr) = scene.run(
        "A",
        r#""$SF" run --dir "$D" --key A -- echo inner; echo "inner exited $?""#,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "inner exited 78\n");
    assert!(
        stderr.starts_with(r#"single-flight: the call for "A" was refused: "A" waits for itself"#),
        "{stderr}"
    );
}

/// §17.3: A's COMMAND runs B in another process, whose COMMAND runs A in a
/// third: refused, naming B then A; B's and A's commands go on.
#[test]
fn a_loop_through_two_processes_exits_at_once() {
    let scene = Scene::new("loop");
    let (code, stdout, stderr) = scene.run(
        "A",
        r#""$SF" run --dir "$D" --key B -- sh -c '"$SF" run --dir "$D" --key A -- echo deep; echo "deep exited $?"'; echo "B exited $?""#,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "deep exited 78\nB exited 0\n");
    assert!(
        stderr.contains(r#""B" waits for itself through "A""#),
        "{stderr}"
    );
}

/// §17.2: a diamond is no cycle: A's COMMAND runs B and C at once, each of
/// whose COMMAND runs D; one of them leads D, whose COMMAND waits until the
/// other has joined, and every run succeeds. A nested run of a key that
/// does not loop is untouched.
#[test]
fn a_diamond_succeeds() {
    let scene = Scene::new("diamond");
    let release = scene.root.join("release");
    let script = format!(
        r#"d='"$SF" run --dir "$D" --key D -- sh -c "n=0; while [ ! -e {release} ] && [ \$n -lt 3000 ]; do sleep 0.05; n=\$((n+1)); done; echo d"'
"$SF" run --dir "$D" --key B -- sh -c "$d" > b.out &
"$SF" run --dir "$D" --key C -- sh -c "$d" > c.out &
wait
cat b.out c.out"#,
        release = release.display()
    );
    let mut outer = scene
        .command("A", &script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Until D has one joiner (the other of B and C), then let D's command
    // finish.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let status = runtime.block_on(SingleFlight::builder(&scene.dir).status());
        let joined = status.ok().is_some_and(|status| {
            status
                .flights
                .iter()
                .any(|flight| flight.key.as_str() == "D" && flight.joiners == 1)
        });
        if joined {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "D never had a joiner");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fs::write(&release, b"").unwrap();
    let status = child::wait(&mut outer).expect("the outer run ends");
    let mut stdout = String::new();
    use std::io::Read;
    outer
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(stdout, "d\nd\n");
}

/// §17.3: a parent of another directory is ignored: a run of A in the
/// COMMAND of A of another directory leads there as any run does.
#[test]
fn a_parent_of_another_directory_is_ignored() {
    let scene = Scene::new("other");
    let other = scene.root.join("other");
    let (code, stdout, stderr) = scene.run(
        "A",
        &format!(
            r#""$SF" run --dir {} --key A -- echo other; echo "other exited $?""#,
            other.display()
        ),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "other\nother exited 0\n");
}
