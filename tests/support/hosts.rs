//! Hosts for the multi-host tests: Linux network namespaces, each joined by
//! a veth pair to one bridge of the test's own, on a /24 of its own. Only
//! traffic between these namespaces (and from the test process, through the
//! bridge's address) is ever sent. A partition is a host's link set down.
//! Needs root; [`Hosts::available`] says so and the tests skip elsewhere.

#![allow(dead_code)] // each test file uses a part of it

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Distinguishes the networks of tests that run at once in one process.
static NEXT_NETWORK: AtomicU32 = AtomicU32::new(0);

/// The namespaces of one test, deleted (with their links) on drop.
pub struct Hosts {
    /// The namespace of each host.
    names: Vec<String>,
    /// The root side of each host's veth pair.
    links: Vec<String>,
    bridge: String,
    /// The first three octets of the test's /24.
    network: [u8; 3],
}

/// Whether a route of this machine covers the /24 `a.b.c.0`.
fn routed([a, b, c]: [u8; 3]) -> bool {
    Command::new("ip")
        .args(["-4", "route", "show", "match", &format!("{a}.{b}.{c}.0/24")])
        .output()
        .is_ok_and(|output| {
            // `match` also lists the default route, which covers everything.
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|line| !line.starts_with("default"))
        })
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip runs");
    assert!(status.success(), "ip {} failed", args.join(" "));
}

impl Hosts {
    /// Whether namespaces can be made here: root and `ip` from iproute2.
    /// Without them the tests say so and skip, unless
    /// `SINGLE_FLIGHT_REQUIRE_NETNS` is set (CI sets it).
    pub fn available() -> bool {
        let root = rustix::process::geteuid().is_root();
        let tool = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .is_ok_and(|output| output.status.success());
        super::tools::needed(
            root && tool,
            "network namespaces",
            "SINGLE_FLIGHT_REQUIRE_NETNS",
            "the multi-host tests need root and iproute2's ip",
        )
    }

    /// `count` hosts, `10.N.M.1` … on a fresh bridge at `10.N.M.254`.
    pub fn new(count: usize) -> Hosts {
        Hosts::named("sf", 100 + (std::process::id() % 100) as u8, count)
    }

    /// `count` hosts whose namespaces and links start with `prefix`, on a
    /// /24 of `10.OCTET.*`: another program (the benchmarks) keeps its
    /// names and networks apart from the tests' this way. A /24 that some
    /// link of this machine already routes is passed over, so that two
    /// processes whose ids lead to the same network do not share it.
    pub fn named(prefix: &str, octet: u8, count: usize) -> Hosts {
        let serial = NEXT_NETWORK.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{:x}", (pid.wrapping_mul(64) + serial) & 0xfffff);
        let third = (0..250)
            .map(|step| ((serial + step) % 250) as u8 + 1)
            .find(|&third| !routed([10, octet, third]))
            .expect("a free /24 among 250");
        let network = [10, octet, third];
        let bridge = format!("{prefix}b{tag}");
        let mut hosts = Hosts {
            names: Vec::new(),
            links: Vec::new(),
            bridge: bridge.clone(),
            network,
        };
        ip(&["link", "add", &bridge, "type", "bridge"]);
        let bridge_address = format!("{}/24", hosts.bridge_address());
        ip(&["addr", "add", &bridge_address, "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        for index in 0..count {
            let name = format!("{prefix}{tag}h{index}");
            let outside = format!("{prefix}v{tag}{index}");
            let inside = format!("{prefix}i{tag}{index}");
            ip(&["netns", "add", &name]);
            hosts.names.push(name.clone());
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ]);
            hosts.links.push(outside.clone());
            ip(&["link", "set", &inside, "netns", &name]);
            ip(&["link", "set", &outside, "master", &bridge]);
            ip(&["link", "set", &outside, "up"]);
            let address = format!("{}/24", hosts.address(index));
            ip(&["-n", &name, "addr", "add", &address, "dev", &inside]);
            ip(&["-n", &name, "link", "set", &inside, "up"]);
            ip(&["-n", &name, "link", "set", "lo", "up"]);
        }
        hosts
    }

    /// Host `index`'s address.
    pub fn address(&self, index: usize) -> IpAddr {
        let [a, b, c] = self.network;
        IpAddr::V4(Ipv4Addr::new(a, b, c, index as u8 + 1))
    }

    /// The bridge's address, through which the test process reaches the
    /// hosts.
    pub fn bridge_address(&self) -> IpAddr {
        let [a, b, c] = self.network;
        IpAddr::V4(Ipv4Addr::new(a, b, c, 254))
    }

    /// The command prefix that runs a program on host `index`.
    pub fn prefix(&self, index: usize) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.names[index].clone(),
        ]
    }

    /// A command that runs `program` on host `index`.
    pub fn command(&self, index: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.names[index]])
            .arg(program);
        command
    }

    /// Cuts host `index` off from every other (its link down).
    pub fn partition(&self, index: usize) {
        ip(&["link", "set", &self.links[index], "down"]);
    }

    /// Joins host `index` again.
    pub fn heal(&self, index: usize) {
        ip(&["link", "set", &self.links[index], "up"]);
    }

    /// Cuts the traffic between hosts `a` and `b` only, both ways, and
    /// keeps every other link of theirs: a partial partition. Without
    /// iptables, which a fresh machine may not have, a blackhole route in each namespace drops what
    /// it would send to the other: established connections go silent as
    /// behind a downed link; a new connection fails at once.
    pub fn cut(&self, a: usize, b: usize) {
        self.blackhole("add", a, b);
        self.blackhole("add", b, a);
    }

    /// Undoes [`Hosts::cut`].
    pub fn uncut(&self, a: usize, b: usize) {
        self.blackhole("del", a, b);
        self.blackhole("del", b, a);
    }

    fn blackhole(&self, verb: &str, from: usize, to: usize) {
        let route = format!("{}/32", self.address(to));
        ip(&["-n", &self.names[from], "route", verb, "blackhole", &route]);
    }

    /// The processes running on host `index`.
    pub fn pids(&self, index: usize) -> Vec<u32> {
        let output = Command::new("ip")
            .args(["netns", "pids", &self.names[index]])
            .output()
            .expect("ip runs");
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect()
    }

    /// Kills every process on host `index` (`kill -9`), as a host's death.
    pub fn kill_all(&self, index: usize) {
        for pid in self.pids(index) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for index in 0..self.names.len() {
            self.kill_all(index);
        }
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}
