//! Cluster mode against an etcd with access control (SPEC.md §14.9): users
//! and roles, tokens that expire while processes run, refusals that say
//! what was refused; and `status`, which only reads (§13.5). Every process
//! is the `single-flight` command on loopback.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::etcd::{self, Etcd};
use crate::support::{BINARY, PATIENCE, certs};

/// The cluster of these tests, the one README's least-privilege lines are
/// written for.
const CLUSTER: &str = "ci";

/// The idle time after which etcd forgets a token (`--auth-token-ttl`):
/// short, so that tokens expire many times within one run.
const TOKEN_TTL_S: &str = "2";

/// One test's world: etcd with authentication on, and a scratch directory
/// for certificates and password files.
struct World {
    scratch: PathBuf,
    etcd: Etcd,
}

impl World {
    /// An etcd whose tokens expire after [`TOKEN_TTL_S`] idle seconds,
    /// with authentication on once README's lines ran; with mutual TLS for
    /// its clients when `tls`.
    fn new(name: &str, tls: bool) -> Option<World> {
        if !etcd::available() || !etcd::ctl_available() {
            return None;
        }
        let scratch = std::env::temp_dir().join(format!("sf-access-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(scratch.join("certs")).unwrap();
        certs::make(&scratch.join("certs"), "").expect("the test certificates");
        let flags = ["--auth-token", "simple", "--auth-token-ttl", TOKEN_TTL_S];
        let etcd = Etcd::single_with(tls.then(|| scratch.join("certs")).as_deref(), &flags);
        let world = World { scratch, etcd };
        world.readme_lines();
        Some(world)
    }

    /// Runs README's least-privilege lines (SPEC.md §14.9) as written,
    /// with passwords on stdin: `root`'s, and `single-flight-ci`'s, which
    /// is also written to the password file [`World::password_file`].
    fn readme_lines(&self) {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
            .expect("README.md reads");
        let block = readme
            .split("<!-- least-privilege etcd role: run by tests/cluster/access.rs -->")
            .nth(1)
            .and_then(|rest| rest.split("```sh").nth(1))
            .and_then(|rest| rest.split("```").next())
            .expect("README.md has the least-privilege lines");
        let lines: Vec<Vec<&str>> = block
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default().trim())
            .filter(|line| !line.is_empty())
            .map(|line| line.split_whitespace().collect())
            .collect();
        let grant = [
            "etcdctl",
            "role",
            "grant-permission",
            "--prefix=true",
            "single-flight-ci",
            "readwrite",
            "single-flight/ci/",
        ];
        assert!(
            lines.iter().any(|line| line[..] == grant[..]),
            "README grants readwrite on the cluster's prefix and nothing more: {lines:?}"
        );
        std::fs::write(self.password_file("single-flight-ci"), "ci-password\n").unwrap();
        for line in lines {
            assert_eq!(line[0], "etcdctl", "{line:?}");
            let mut arguments = line[1..].to_vec();
            let password = match arguments[..] {
                ["user", "add", "root"] => Some(etcd::ROOT_PASSWORD),
                ["user", "add", "single-flight-ci"] => Some("ci-password"),
                ["user", "add", ..] => panic!("an unknown user in README: {line:?}"),
                _ => None,
            };
            if password.is_some() {
                arguments.push("--interactive=false");
            }
            self.etcd
                .etcdctl_with_stdin(None, &arguments, password.unwrap_or(""));
        }
    }

    /// Adds `user` (password `<user>-password`, also in its password file)
    /// with a role of its own that has `permission` on `prefix`.
    fn user(&self, user: &str, permission: &str, prefix: &str) {
        let password = format!("{user}-password");
        std::fs::write(self.password_file(user), format!("{password}\n")).unwrap();
        let role = format!("role-{user}");
        self.etcd.etcdctl_root(&["role", "add", &role]);
        self.etcd.etcdctl_root(&[
            "role",
            "grant-permission",
            "--prefix=true",
            &role,
            permission,
            prefix,
        ]);
        self.etcd
            .etcdctl_root(&["user", "add", &format!("{user}:{password}")]);
        self.etcd.etcdctl_root(&["user", "grant-role", user, &role]);
    }

    fn password_file(&self, user: &str) -> PathBuf {
        self.scratch.join(format!("{user}.password"))
    }

    fn certs(&self) -> PathBuf {
        self.scratch.join("certs")
    }

    /// `single-flight SUBCOMMAND` in the cluster `ci`, plain TCP on
    /// loopback, as etcd's `user` (none: by its certificate).
    fn command(&self, subcommand: &str, user: Option<&str>) -> Command {
        self.command_at(subcommand, user, "127.0.0.1:0")
    }

    /// The same, listening at `listen` when it coordinates.
    fn command_at(&self, subcommand: &str, user: Option<&str>, listen: &str) -> Command {
        let mut command = Command::new(BINARY);
        command
            .arg(subcommand)
            .arg("--etcd")
            .arg(self.etcd.endpoints().join(","))
            .args(["--cluster", CLUSTER, "--listen", listen, "--insecure"])
            .arg("--dir")
            .arg(certs::own_host_directory(&self.certs().join("ca.pem")))
            .env_remove("SINGLE_FLIGHT_DIR")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(user) = user {
            command
                .args(["--etcd-user", user, "--etcd-password-file"])
                .arg(self.password_file(user));
        }
        command
    }

    /// `single-flight run --key KEY -- sh -c 'echo $SINGLE_FLIGHT_TOKEN'`
    /// as `user`.
    fn run(&self, user: &str, key: &str) -> Output {
        let mut command = self.command("run", Some(user));
        command.args(["--key", key, "--", "sh", "-c", "echo $SINGLE_FLIGHT_TOKEN"]);
        command.output().expect("run runs")
    }

    /// Waits until `status` as `user` names the coordinator of pid `pid`.
    fn wait_for_coordinator(&self, user: &str, pid: u32) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let output = self
                .command("status", Some(user))
                .arg("--json")
                .output()
                .expect("status runs");
            if String::from_utf8_lossy(&output.stdout).contains(&format!("\"pid\":{pid}")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the coordinator {pid} never answered: {}",
                text(&output)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The leases etcd holds, as `etcdctl lease list` prints them.
    fn leases(&self) -> Vec<String> {
        let listed = self.etcd.etcdctl_root(&["lease", "list"]);
        let mut leases: Vec<String> = listed
            .lines()
            .filter(|line| !line.starts_with("found"))
            .map(str::to_owned)
            .collect();
        leases.sort();
        leases
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A process's stdout and stderr, for messages.
fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Stops `serve` with SIGTERM; its output.
fn stop(serve: Child) -> Output {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&serve),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM is sent");
    serve.wait_with_output().expect("serve ends")
}

/// The epoch of a fencing token (SPEC.md §6): its high 32 bits.
fn epoch(output: &Output) -> u64 {
    let token: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a token: {}", text(output)));
    token >> 32
}

/// §14.9: with README's least-privilege role and tokens that etcd forgets
/// after two idle seconds, a `serve` and the callers that come one after
/// another for several token lifetimes all work: every call is answered
/// by one term, and the term's end is still written (its clean key) with
/// the token long expired.
#[test]
fn s14_9_a_least_privilege_user_serves_through_expiring_tokens() {
    let Some(world) = World::new("tokens", false) else {
        return;
    };
    let mut serve = world.command("serve", Some("single-flight-ci"));
    serve.env("RUST_LOG", "single_flight=debug");
    let serve = serve.spawn().expect("serve starts");
    world.wait_for_coordinator("single-flight-ci", serve.id());
    let mut epochs = Vec::new();
    let started = Instant::now();
    // Callers for four token lifetimes and more, with idle gaps longer
    // than a token's lifetime between some.
    for index in 0..6 {
        let output = world.run("single-flight-ci", &format!("key-{index}"));
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
        epochs.push(epoch(&output));
        std::thread::sleep(Duration::from_millis(if index % 2 == 0 {
            500
        } else {
            2500
        }));
    }
    assert!(started.elapsed() >= Duration::from_secs(8));
    let output = stop(serve);
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert!(
        epochs.iter().all(|epoch| *epoch == epochs[0]),
        "one term: {epochs:?}\n{log}"
    );
    assert!(
        log.contains("etcd refused the token; asking for a new one"),
        "a token expired during the run and was replaced: {log}"
    );
    assert!(!log.contains("could not"), "{log}");
    let clean = world
        .etcd
        .etcdctl_root(&["get", "--keys-only", "single-flight/ci/clean"]);
    assert!(
        clean.contains("single-flight/ci/clean"),
        "the term's clean end was written with a new token: {clean}\n{log}"
    );
}

/// §14.9: a wrong password is refused at once, naming the user and the
/// password file, with exit 125 (§13.3).
#[test]
fn s14_9_a_wrong_password_is_a_clear_error() {
    let Some(world) = World::new("password", false) else {
        return;
    };
    std::fs::write(
        world.password_file("single-flight-ci"),
        "not-the-password\n",
    )
    .unwrap();
    let output = world.run("single-flight-ci", "key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{}", text(&output));
    assert!(
        stderr.contains("\"single-flight-ci\""),
        "names the user: {stderr}"
    );
    assert!(
        stderr.contains("password") && stderr.contains("authentication failed"),
        "says the password failed: {stderr}"
    );
    assert!(
        stderr.contains(
            &world
                .password_file("single-flight-ci")
                .display()
                .to_string()
        ),
        "names the password file: {stderr}"
    );
    // An empty password file is refused before etcd is asked, naming it.
    std::fs::write(world.password_file("single-flight-ci"), "\n").unwrap();
    let output = world.run("single-flight-ci", "key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{}", text(&output));
    assert!(stderr.contains("is empty"), "{stderr}");
}

/// §14.9: a user whose role may only read the cluster's keys, or only
/// touch another prefix, is refused with the user, the key and the
/// permission named, exit 125; `status` needs only read permission
/// (§13.5).
#[test]
fn s14_9_a_missing_permission_names_the_user_the_key_and_the_permission() {
    let Some(world) = World::new("permission", false) else {
        return;
    };
    world.user("reader", "read", "single-flight/ci/");
    world.user("elsewhere", "readwrite", "other-app/");
    let output = world.run("reader", "key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{}", text(&output));
    for words in [
        "\"reader\"",
        "write permission",
        "single-flight/ci/coordinator",
        "readwrite single-flight/ci/",
    ] {
        assert!(stderr.contains(words), "{words:?} in: {stderr}");
    }
    let output = world.run("elsewhere", "key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{}", text(&output));
    for words in [
        "\"elsewhere\"",
        "read permission",
        "single-flight/ci/coordinator",
    ] {
        assert!(stderr.contains(words), "{words:?} in: {stderr}");
    }
    // Reading is all `status` does: the reader learns that nobody
    // coordinates (exit 3), not a refusal.
    let output = world
        .command("status", Some("reader"))
        .output()
        .expect("status runs");
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
}

/// §14.9: etcd takes the common name of the certificate a process presents
/// for its user (mutual TLS with etcd, no password): the process runs with
/// that user's role.
#[test]
fn s14_9_a_client_certificates_common_name_is_its_etcd_user() {
    let Some(world) = World::new("common-name", true) else {
        return;
    };
    // The common name of the test certificates' process certificate.
    let user = "single-flight test process";
    world
        .etcd
        .etcdctl_root(&["user", "add", &format!("{user}:unused")]);
    world
        .etcd
        .etcdctl_root(&["user", "grant-role", user, "single-flight-ci"]);
    let mut command = Command::new(BINARY);
    command.arg("run");
    certs::member_flags(
        &mut command,
        &world.etcd.endpoints(),
        CLUSTER,
        "127.0.0.1:0",
        &world.certs(),
    );
    let output = command
        .args([
            "--key",
            "key",
            "--",
            "sh",
            "-c",
            "echo $SINGLE_FLIGHT_TOKEN",
        ])
        .env_remove("SINGLE_FLIGHT_DIR")
        .env_remove("RUST_LOG")
        .output()
        .expect("run runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
}

/// §13.5: `status` in a cluster reads the coordinator key and asks the
/// coordinator, and nothing else: it binds no port (its `--listen` port is
/// held by another socket, or is an address of no interface here) and
/// takes no lease.
#[test]
fn s13_5_status_binds_no_port_and_takes_no_lease() {
    let Some(world) = World::new("status", false) else {
        return;
    };
    let serve = world
        .command("serve", Some("single-flight-ci"))
        .spawn()
        .expect("serve starts");
    world.wait_for_coordinator("single-flight-ci", serve.id());
    let leases = world.leases();
    assert_eq!(leases.len(), 1, "the coordinator's lease: {leases:?}");
    let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a port");
    let held_port = held.local_addr().unwrap().port();
    for listen in [
        format!("127.0.0.1:{held_port}"),
        // TEST-NET-1 (RFC 5737): no interface of this host has it, so
        // binding it fails; an address that is not loopback, refused
        // without TLS to a process that would listen there (SPEC.md §14.5).
        "192.0.2.1:7000".to_owned(),
    ] {
        let output = world
            .command_at("status", Some("single-flight-ci"), &listen)
            .arg("--json")
            .output()
            .expect("status runs");
        assert_eq!(
            output.status.code(),
            Some(0),
            "--listen {listen}: {}",
            text(&output)
        );
        assert!(
            String::from_utf8_lossy(&output.stdout).contains(&format!("\"pid\":{}", serve.id())),
            "{}",
            text(&output)
        );
    }
    assert_eq!(world.leases(), leases, "status took no lease");
    drop(held);
    let output = stop(serve);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
}

/// §14.9: a client whose token etcd has forgotten (idle past
/// `--auth-token-ttl`) reads, writes and watches as before: each request
/// refused for its token, and a watch canceled at its creation for it, is
/// made again once with a new token.
#[tokio::test]
async fn s14_9_requests_and_watches_outlive_an_expired_token() {
    use single_flight::_internal::election::etcd::REQUEST_TIMEOUT;
    use single_flight::_internal::election::etcd::client::{Client, Credentials};
    let Some(world) = World::new("client", false) else {
        return;
    };
    let client = Client::connect(&world.etcd.endpoints(), None, REQUEST_TIMEOUT)
        .unwrap()
        .authenticated_as(Credentials {
            user: "single-flight-ci".to_owned(),
            password: "ci-password".to_owned(),
        });
    client.authenticate().await.expect("the password is right");
    let idle = Duration::from_secs(TOKEN_TTL_S.parse::<u64>().unwrap() + 1);
    tokio::time::sleep(idle).await;
    let read = client.get("single-flight/ci/coordinator").await;
    assert!(read.is_ok(), "{read:?}");
    tokio::time::sleep(idle).await;
    let mut watch = client
        .watch("single-flight/ci/watched", 0)
        .await
        .expect("a watch with a new token");
    tokio::time::sleep(idle).await;
    client
        .put("single-flight/ci/watched", "value", 0)
        .await
        .expect("a write with a new token");
    let changes = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("the watch answers")
        .expect("the watch lives")
        .expect("a change");
    assert_eq!(changes.events.len(), 1, "{changes:?}");
    // A key outside the role's prefix stays refused, new token or not.
    let denied = client.get("other-app/key").await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    let denied = client.watch("other-app/key", 0).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
}
