//! A real etcd for the cluster tests: members on free ports of the given
//! addresses (loopback, or the harness's own namespaces' addresses), each in
//! a temporary data directory, stopped and removed on drop.

#![allow(dead_code)] // each test file uses a part of it

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a member may take to answer after its start. A member starts
/// within seconds; a loaded machine takes longer.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether etcd can run here. Without it the cluster tests say so and
/// skip, unless `SINGLE_FLIGHT_REQUIRE_ETCD` is set (CI sets it, so that a
/// missing package fails instead of passing silently).
pub fn available() -> bool {
    super::tools::needed(
        super::tools::installed("etcd"),
        "etcd",
        "SINGLE_FLIGHT_REQUIRE_ETCD",
        "install it (Debian: apt-get install etcd-server)",
    )
}

/// Whether etcdctl can run here, for the tests that set etcd up or look into
/// it as an operator would (README's least-privilege lines). Without it they
/// skip as without etcd, unless `SINGLE_FLIGHT_REQUIRE_ETCD` is set.
pub fn ctl_available() -> bool {
    super::tools::needed(
        super::tools::runs("etcdctl", &["version"]),
        "etcdctl",
        "SINGLE_FLIGHT_REQUIRE_ETCD",
        "install it (Debian: apt-get install etcd-client)",
    )
}

/// A free TCP port on `ip`, found by binding port 0.
pub fn free_port(ip: IpAddr) -> u16 {
    TcpListener::bind((ip, 0))
        .expect("a free port")
        .local_addr()
        .expect("a bound address")
        .port()
}

/// The shell that a member runs under: `sh -c WATCHDOG sh PARENT etcd …`
/// starts a subshell that polls PARENT (this process) once a second, then
/// `exec`s etcd in its own place, so that the member's pid is the child's.
/// In the subshell `$$` is that pid. When PARENT is gone the subshell
/// `kill -9`s the member, but only while that pid is still an etcd (a pid
/// comes back once its process is gone); it leaves by itself once the
/// member exits.
const WATCHDOG: &str = r#"parent=$1; shift
( while kill -0 "$parent" 2>/dev/null && [ -e /proc/$$ ]; do sleep 1; done
  grep -q etcd /proc/$$/cmdline 2>/dev/null && kill -9 $$ ) >/dev/null 2>&1 &
exec "$@""#;

/// One member's settings.
struct Member {
    name: String,
    client_url: String,
    /// Where the member answers `/health` and `/metrics` over plain HTTP:
    /// its client URL, or a port of its own when clients need TLS.
    metrics_url: String,
    peer_url: String,
    data: PathBuf,
    /// How to start it: the command's prefix (e.g. `ip netns exec NAME`).
    prefix: Vec<String>,
    child: Option<Child>,
}

/// An etcd cluster of one or more members.
pub struct Etcd {
    members: Vec<Member>,
    scratch: PathBuf,
    initial_cluster: String,
    token: String,
    /// The certificates directory (support/certs.rs) when clients must
    /// present a certificate over TLS.
    tls: Option<PathBuf>,
    /// More flags for every member (`--auth-token-ttl`, …).
    flags: Vec<String>,
}

/// The password of etcd's `root` user in the tests that turn
/// authentication on ([`Etcd::enable_auth`]).
pub const ROOT_PASSWORD: &str = "root-password";

impl Etcd {
    /// One member on loopback.
    pub fn single() -> Etcd {
        Etcd::start(&[(IpAddr::V4(Ipv4Addr::LOCALHOST), Vec::new())])
    }

    /// Three members on loopback (quorum tests).
    pub fn three() -> Etcd {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Etcd::start(&[(ip, Vec::new()), (ip, Vec::new()), (ip, Vec::new())])
    }

    /// One member per `(address, command prefix)`.
    pub fn start(places: &[(IpAddr, Vec<String>)]) -> Etcd {
        Etcd::start_with(places, None)
    }

    /// One member on loopback whose clients need mutual TLS with the
    /// certificates in `certs` (support/certs.rs): `https://` endpoints,
    /// `--client-cert-auth`, and the health and metrics on a plain port.
    pub fn single_tls(certs: &std::path::Path) -> Etcd {
        Etcd::start_with(
            &[(IpAddr::V4(Ipv4Addr::LOCALHOST), Vec::new())],
            Some(certs),
        )
    }

    /// Members per `(address, command prefix)`, with mutual TLS for their
    /// clients when `tls` names the certificates (whose server certificate
    /// must be valid for the addresses).
    pub fn start_with(places: &[(IpAddr, Vec<String>)], tls: Option<&std::path::Path>) -> Etcd {
        Etcd::start_with_flags(places, tls, &[])
    }

    /// One member on loopback with more `flags`, and mutual TLS for its
    /// clients when `tls` names the certificates.
    pub fn single_with(tls: Option<&std::path::Path>, flags: &[&str]) -> Etcd {
        Etcd::start_with_flags(&[(IpAddr::V4(Ipv4Addr::LOCALHOST), Vec::new())], tls, flags)
    }

    /// Members as [`Etcd::start_with`] makes them, each started with more
    /// `flags` too: `--auth-token simple --auth-token-ttl 2` makes the
    /// tokens of its users expire after two idle seconds (etcd 3.4 has
    /// both flags).
    pub fn start_with_flags(
        places: &[(IpAddr, Vec<String>)],
        tls: Option<&std::path::Path>,
        flags: &[&str],
    ) -> Etcd {
        let scratch = std::env::temp_dir().join(format!(
            "sf-etcd-{}-{}",
            std::process::id(),
            free_port(IpAddr::V4(Ipv4Addr::LOCALHOST))
        ));
        std::fs::create_dir_all(&scratch).expect("a scratch directory");
        let members: Vec<Member> = places
            .iter()
            .enumerate()
            .map(|(index, (ip, prefix))| {
                // A member in a namespace of its own has every port free
                // (and this process cannot bind that namespace's address).
                let (client, peer, metrics) = if prefix.is_empty() {
                    (free_port(*ip), free_port(*ip), free_port(*ip))
                } else {
                    (2379, 2380, 2381)
                };
                (index, ip, prefix, client, peer, metrics)
            })
            .map(|(index, ip, prefix, client, peer, metrics)| Member {
                name: format!("m{index}"),
                client_url: match tls {
                    Some(_) => format!("https://{ip}:{client}"),
                    None => format!("http://{ip}:{client}"),
                },
                metrics_url: match tls {
                    Some(_) => format!("http://{ip}:{metrics}"),
                    None => format!("http://{ip}:{client}"),
                },
                peer_url: format!("http://{ip}:{peer}"),
                data: scratch.join(format!("m{index}")),
                prefix: prefix.clone(),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            members,
            scratch: scratch.clone(),
            initial_cluster,
            token: format!("sf-{}", scratch.display().to_string().len()),
            tls: tls.map(std::path::Path::to_owned),
            flags: flags.iter().map(|flag| (*flag).to_owned()).collect(),
        };
        for index in 0..etcd.members.len() {
            etcd.start_member(index);
        }
        etcd.wait_healthy();
        etcd
    }

    fn start_member(&mut self, index: usize) {
        let member = &self.members[index];
        let state = if member.data.exists() {
            "existing"
        } else {
            "new"
        };
        // The member dies with this process, also when it is killed and no
        // `Drop` runs (a test binary stopped by a timeout, a harness killed
        // by hand): see `WATCHDOG`. (`PR_SET_PDEATHSIG` would need `unsafe`
        // in `pre_exec`.)
        let mut command = match member.prefix.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg("sh");
                command
            }
            None => Command::new("sh"),
        };
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(std::process::id().to_string())
            .arg("etcd");
        command
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.data)
            .arg("--listen-client-urls")
            .arg(&member.client_url)
            .arg("--advertise-client-urls")
            .arg(&member.client_url)
            .arg("--listen-peer-urls")
            .arg(&member.peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&member.peer_url)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg(state)
            .arg("--initial-cluster-token")
            .arg(&self.token);
        if let Some(certs) = &self.tls {
            command
                .arg("--cert-file")
                .arg(certs.join("server.pem"))
                .arg("--key-file")
                .arg(certs.join("server.key"))
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(certs.join("ca.pem"))
                .arg("--listen-metrics-urls")
                .arg(&member.metrics_url);
        }
        command.args(&self.flags);
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(
            std::fs::File::create(self.scratch.join(format!("{}.log", member.name)))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        );
        let child = command.spawn().expect("etcd starts");
        self.members[index].child = Some(child);
    }

    /// The client URLs of every member, for `--etcd`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// The process ids of the running members (for their CPU time).
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter_map(|m| m.child.as_ref().map(Child::id))
            .collect()
    }

    /// Kills one member (`kill -9`).
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops one member (`SIGSTOP`): its sockets stay open and its clients'
    /// requests get no answer, as from a member swamped by a stampede.
    pub fn pause(&self, index: usize) {
        self.signal(index, rustix::process::Signal::STOP);
    }

    /// Lets a stopped member go on (`SIGCONT`).
    pub fn resume(&self, index: usize) {
        self.signal(index, rustix::process::Signal::CONT);
    }

    fn signal(&self, index: usize, signal: rustix::process::Signal) {
        let child = self.members[index].child.as_ref().expect("the member runs");
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("the member takes the signal");
    }

    /// Starts a killed member again with its data.
    pub fn restart(&mut self, index: usize) {
        assert!(self.members[index].child.is_none(), "the member runs");
        self.start_member(index);
    }

    /// Waits until every running member answers its health check.
    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        for member in self.members.iter().filter(|m| m.child.is_some()) {
            loop {
                if healthy(&member.metrics_url) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "etcd member {} did not become healthy; its log is in {}",
                    member.name,
                    self.scratch.display()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// `GET /health` over plain HTTP: `{"health":"true"}` once the member has a
/// leader and can serve.
fn healthy(url: &str) -> bool {
    http_get(url, "/health").is_some_and(|answer| answer.contains("\"health\":\"true\""))
}

/// The answer to `GET path` over plain HTTP, headers included.
fn http_get(url: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let address = url.strip_prefix("http://")?;
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    Some(answer)
}

impl Etcd {
    /// How many requests of each gRPC method the first member has started
    /// (`grpc_server_started_total` of its metrics, summed over services):
    /// what a scenario costs etcd.
    pub fn requests(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        let text = http_get(&self.members[0].metrics_url, "/metrics").unwrap_or_default();
        for line in text
            .lines()
            .filter(|l| l.starts_with("grpc_server_started_total{"))
        {
            let method = line
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next());
            let count = line.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok());
            if let (Some(method), Some(count)) = (method, count) {
                *counts.entry(method.to_owned()).or_insert(0) += count as u64;
            }
        }
        counts.retain(|_, count| *count > 0);
        counts
    }
}

impl Etcd {
    /// `etcdctl ARGS` against these members, as `user` (`NAME:PASSWORD`)
    /// if given, with the test certificates when the members need TLS;
    /// panics, with its output, when it fails.
    pub fn etcdctl(&self, user: Option<&str>, args: &[&str]) -> String {
        self.etcdctl_with_stdin(user, args, "")
    }

    /// `etcdctl ARGS` as [`Etcd::etcdctl`] runs it, with `stdin` on its
    /// standard input (a password for `user add --interactive=false`).
    pub fn etcdctl_with_stdin(&self, user: Option<&str>, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoints().join(","));
        if let Some(certs) = &self.tls {
            command
                .arg("--cacert")
                .arg(certs.join("ca.pem"))
                .arg("--cert")
                .arg(certs.join("server.pem"))
                .arg("--key")
                .arg(certs.join("server.key"));
        }
        if let Some(user) = user {
            command.arg("--user").arg(user);
        }
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("etcdctl runs");
        let mut input = child.stdin.take().expect("a piped stdin");
        input
            .write_all(stdin.as_bytes())
            .expect("etcdctl reads its stdin");
        drop(input);
        let output = child.wait_with_output().expect("etcdctl ends");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "etcdctl {args:?}: {text}");
        text
    }

    /// `etcdctl ARGS` as `root` once [`Etcd::enable_auth`] has run.
    pub fn etcdctl_root(&self, args: &[&str]) -> String {
        self.etcdctl(Some(&format!("root:{ROOT_PASSWORD}")), args)
    }

    /// Turns etcd's authentication on, with a `root` user whose password
    /// is [`ROOT_PASSWORD`]; make the other users and roles with
    /// [`Etcd::etcdctl_root`].
    pub fn enable_auth(&self) {
        self.etcdctl(None, &["user", "add", &format!("root:{ROOT_PASSWORD}")]);
        self.etcdctl(None, &["auth", "enable"]);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
