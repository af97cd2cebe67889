//! The seeded fault schedule. Two lanes per form, each an endless sequence
//! drawn from its own stream of the seed: the process and file system
//! faults (one at a time, since each waits for its effect), and the hostile
//! clients (several at a time); the cluster form's are its cluster faults
//! and its hostile clients over TLS. The same seed always gives the same
//! sequences; which process a fault hits depends on what runs at that
//! moment, chosen with the fault's own draw among the candidates.

use crate::rng::Rng;

/// The faults of the first lane, with their weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// `kill -9` of the coordinator's process while flights are in progress.
    KillCoordinator,
    /// `kill -9` of a process leading a flight (with joiners when possible).
    KillLeader,
    /// `kill -9` of a process that only joins.
    KillJoiner,
    /// `SIGSTOP` of a leader for less than the grace window.
    PauseLeaderShort,
    /// The same, while the coordinator is killed: the leader resumes within
    /// the next term's grace window and reasserts its flight.
    PauseLeaderShortFailover,
    /// `SIGSTOP` of a leader for more than the grace window; its flight and
    /// joiners wait for it.
    PauseLeaderLong,
    /// The same, while the coordinator is killed: the leader misses the
    /// grace window, a newer flight writes, and its late write is fenced.
    PauseLeaderLongFailover,
    /// `SIGSTOP` of the coordinator, briefly or past the calls' deadline.
    PauseCoordinator,
    /// A worker closes its `SingleFlight` with calls in progress and opens
    /// a new one: its connection drops.
    DropConnection,
    RemoveSocket,
    RenameSocket,
    /// A regular file renamed over `flight.sock`.
    ReplaceSocket,
    /// Stale `flight.epoch.tmp.*` and `flight.sock.tmp.*` files.
    LeftoverTemps,
    /// A damaged `flight.epoch`, in a directory of its own.
    CorruptEpoch,
}

const FAULTS: [(Fault, u64); 14] = [
    (Fault::KillCoordinator, 16),
    (Fault::KillLeader, 9),
    (Fault::KillJoiner, 7),
    (Fault::PauseLeaderShort, 7),
    (Fault::PauseLeaderShortFailover, 6),
    (Fault::PauseLeaderLong, 5),
    (Fault::PauseLeaderLongFailover, 10),
    (Fault::PauseCoordinator, 8),
    (Fault::DropConnection, 7),
    (Fault::RemoveSocket, 6),
    (Fault::RenameSocket, 5),
    (Fault::ReplaceSocket, 3),
    (Fault::LeftoverTemps, 5),
    (Fault::CorruptEpoch, 6),
];

/// The hostile clients of the second lane, with their weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hostile {
    /// A request line over `MAX_FRAME_BYTES`, after the hello.
    OversizeLine,
    /// A first line over `MAX_FRAME_BYTES`.
    OversizeHello,
    /// A request without its newline, then the end of the stream.
    NoNewline,
    InvalidUtf8,
    /// A request nested far deeper than 128 levels.
    DeepNesting,
    DeepHello,
    /// Hundreds to thousands of connections at once.
    Flood,
    /// Tens of thousands of requests whose answers it never reads.
    NoRead,
    /// Thousands of runs of a real key (joins) whose answers it never reads.
    NoReadJoins,
    UnknownOp,
    WrongProtocol,
    WrongVersion,
    /// Connects and says nothing.
    NoHello,
    GarbageHello,
    /// Runs a real key, then drops its connection mid-flight.
    DropMidFlight,
    /// `land` of a run it does not lead, `cancel` of an unknown id.
    LandWithoutLead,
    /// A second `run` with the id of an open party.
    DuplicateId,
    /// Cluster form only (SPEC.md §11.4, §14.5): a TLS client that presents
    /// no certificate.
    NoCertificate,
    /// A TLS client whose certificate another cluster's CA signed.
    OtherCaCertificate,
    /// A TLS client that presents the cluster's certificate but signs the
    /// handshake with another key.
    WrongKey,
    /// A TLS client whose certificate the cluster's CA signed and its CRL
    /// revokes (`--tls-crl`, SPEC.md §14.5).
    RevokedCertificate,
    /// A TLS client whose certificate the cluster's CA signed, expired.
    ExpiredCertificate,
    /// The protocol's hello in plain text to a TLS coordinator.
    PlainTcp,
    /// A TCP connection that never speaks TLS (`TLS_HANDSHAKE_TIMEOUT`).
    SilentTcp,
}

impl Hostile {
    /// The local form's clients (those that need a socket file's peer
    /// check or TLS are not among them).
    pub const ALL: [Hostile; 17] = [
        Hostile::OversizeLine,
        Hostile::OversizeHello,
        Hostile::NoNewline,
        Hostile::InvalidUtf8,
        Hostile::DeepNesting,
        Hostile::DeepHello,
        Hostile::Flood,
        Hostile::NoRead,
        Hostile::NoReadJoins,
        Hostile::UnknownOp,
        Hostile::WrongProtocol,
        Hostile::WrongVersion,
        Hostile::NoHello,
        Hostile::GarbageHello,
        Hostile::DropMidFlight,
        Hostile::LandWithoutLead,
        Hostile::DuplicateId,
    ];
}

const HOSTILES: [(Hostile, u64); 17] = [
    (Hostile::OversizeLine, 5),
    (Hostile::OversizeHello, 3),
    (Hostile::NoNewline, 7),
    (Hostile::InvalidUtf8, 8),
    (Hostile::DeepNesting, 7),
    (Hostile::DeepHello, 4),
    (Hostile::Flood, 4),
    (Hostile::NoRead, 4),
    (Hostile::NoReadJoins, 3),
    (Hostile::UnknownOp, 9),
    (Hostile::WrongProtocol, 6),
    (Hostile::WrongVersion, 6),
    (Hostile::NoHello, 5),
    (Hostile::GarbageHello, 5),
    (Hostile::DropMidFlight, 10),
    (Hostile::LandWithoutLead, 6),
    (Hostile::DuplicateId, 6),
];

/// The cluster form's hostile clients, over TCP with TLS: every client of
/// the local form, and those that the coordinator must refuse at the TLS
/// handshake.
pub const TLS_HOSTILES: [(Hostile, u64); 24] = [
    (Hostile::OversizeLine, 4),
    (Hostile::OversizeHello, 2),
    (Hostile::NoNewline, 5),
    (Hostile::InvalidUtf8, 5),
    (Hostile::DeepNesting, 4),
    (Hostile::DeepHello, 2),
    (Hostile::Flood, 2),
    (Hostile::NoRead, 2),
    (Hostile::NoReadJoins, 2),
    (Hostile::UnknownOp, 5),
    (Hostile::WrongProtocol, 4),
    (Hostile::WrongVersion, 4),
    (Hostile::NoHello, 3),
    (Hostile::GarbageHello, 4),
    (Hostile::DropMidFlight, 6),
    (Hostile::LandWithoutLead, 4),
    (Hostile::DuplicateId, 4),
    (Hostile::NoCertificate, 6),
    (Hostile::OtherCaCertificate, 6),
    (Hostile::WrongKey, 6),
    (Hostile::RevokedCertificate, 6),
    (Hostile::ExpiredCertificate, 6),
    (Hostile::PlainTcp, 3),
    (Hostile::SilentTcp, 3),
];

/// The faults of the cluster form's lane (`--cluster`), with their weights.
/// Durations are drawn against the lease TTL and the step-down margin:
/// "short" stays under what ends a term, "long" goes past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterFault {
    /// `kill -9` of the coordinator's process (its host lives).
    KillCoordinator,
    /// `kill -9` of a worker leading a flight.
    KillLeader,
    /// `kill -9` of a worker waiting on a key that another leads.
    KillJoiner,
    /// `SIGSTOP` of a leader for less than the grace window.
    PauseLeaderShort,
    /// A leader stopped while the coordinator is killed, past the TTL and
    /// the new term's grace window: a newer flight writes first, and its
    /// late write is refused by the fence.
    PauseLeaderLongFailover,
    /// `SIGSTOP` of the coordinator for less than the step-down margin.
    PauseCoordinatorShort,
    /// `SIGSTOP` of the coordinator for longer than the TTL: it resumes
    /// after another term serves and must answer nothing more.
    PauseCoordinatorLong,
    /// A host's link down for less than the TTL.
    PartitionShort,
    /// A host's link down for longer than the TTL.
    PartitionLong,
    /// A host cut from every etcd member, keeping the other hosts.
    PartitionFromEtcd,
    /// A host cut from the other worker hosts, keeping etcd.
    PartitionFromHosts,
    /// Every process of a host `kill -9`ed (its workers respawn there).
    KillHost,
    /// One etcd member (not the leader when it can tell) killed, then back.
    KillEtcdMember,
    /// etcd's leader killed, then back.
    KillEtcdLeader,
    /// Two etcd members killed (quorum lost), then back.
    KillEtcdQuorum,
    /// etcd's leader stopped (`SIGSTOP`), then resumed.
    StopEtcdLeader,
    /// A worker closes its `SingleFlight` with calls in progress and reopens.
    DropConnection,
}

const CLUSTER_FAULTS: [(ClusterFault, u64); 17] = [
    (ClusterFault::KillCoordinator, 8),
    (ClusterFault::KillLeader, 12),
    (ClusterFault::KillJoiner, 6),
    (ClusterFault::PauseLeaderShort, 6),
    (ClusterFault::PauseLeaderLongFailover, 3),
    (ClusterFault::PauseCoordinatorShort, 8),
    (ClusterFault::PauseCoordinatorLong, 3),
    (ClusterFault::PartitionShort, 6),
    (ClusterFault::PartitionLong, 3),
    (ClusterFault::PartitionFromEtcd, 4),
    (ClusterFault::PartitionFromHosts, 4),
    (ClusterFault::KillHost, 5),
    (ClusterFault::KillEtcdMember, 4),
    (ClusterFault::KillEtcdLeader, 4),
    (ClusterFault::KillEtcdQuorum, 3),
    (ClusterFault::StopEtcdLeader, 3),
    (ClusterFault::DropConnection, 6),
];

/// The pause before each fault of the cluster lane, in ms: shorter than the
/// local lane's, since many cluster faults last seconds themselves, and
/// much of the lane's time goes on waiting for a target through a
/// failover. (It was 30–250 ms; 20–120 ms fits about 6 % more faults in
/// the short form's 150 s, the same kinds in the same order.)
const CLUSTER_FAULT_GAP_MS: (u64, u64) = (20, 120);

/// The pause before each fault of the first lane, in ms: the lane also
/// waits for each fault's effect, so faults never pile up on each other.
const FAULT_GAP_MS: (u64, u64) = (50, 400);
/// The pause between two hostile clients, in ms.
const HOSTILE_GAP_MS: (u64, u64) = (80, 450);

/// The gaps of the cluster form's hostile clients: wider than the local
/// form's, since every one of them costs a TLS handshake on both sides,
/// and the cluster's six workers and three etcd members share two cores.
const TLS_HOSTILE_GAP_MS: (u64, u64) = (150, 700);

/// One planned fault: wait `gap_ms`, then inject `kind`, deciding its
/// details (durations, which candidate) from `draw`.
#[derive(Clone, Copy, Debug)]
pub struct Planned<K> {
    pub gap_ms: u64,
    pub kind: K,
    pub draw: u64,
}

#[derive(Clone, Debug)]
pub struct Schedule {
    seed: u64,
}

fn weighted<K: Copy>(rng: &mut Rng, table: &[(K, u64)]) -> K {
    let total: u64 = table.iter().map(|(_, w)| w).sum();
    let mut point = rng.below(total);
    for &(kind, weight) in table {
        if point < weight {
            return kind;
        }
        point -= weight;
    }
    table[0].0
}

impl Schedule {
    pub fn new(seed: u64) -> Schedule {
        Schedule { seed }
    }

    pub fn faults(&self) -> impl Iterator<Item = Planned<Fault>> + Send + use<> {
        let mut rng = Rng::fork(self.seed, 1);
        std::iter::repeat_with(move || Planned {
            gap_ms: rng.range(FAULT_GAP_MS.0, FAULT_GAP_MS.1),
            kind: weighted(&mut rng, &FAULTS),
            draw: rng.next_u64(),
        })
    }

    pub fn hostiles(&self) -> impl Iterator<Item = Planned<Hostile>> + Send + use<> {
        let mut rng = Rng::fork(self.seed, 2);
        std::iter::repeat_with(move || Planned {
            gap_ms: rng.range(HOSTILE_GAP_MS.0, HOSTILE_GAP_MS.1),
            kind: weighted(&mut rng, &HOSTILES),
            draw: rng.next_u64(),
        })
    }

    /// The cluster form's lane, from a stream of its own.
    pub fn cluster_faults(&self) -> impl Iterator<Item = Planned<ClusterFault>> + Send + use<> {
        let mut rng = Rng::fork(self.seed, 4);
        std::iter::repeat_with(move || Planned {
            gap_ms: rng.range(CLUSTER_FAULT_GAP_MS.0, CLUSTER_FAULT_GAP_MS.1),
            kind: weighted(&mut rng, &CLUSTER_FAULTS),
            draw: rng.next_u64(),
        })
    }

    /// A digest of the first thousand entries of the cluster lane.
    /// The cluster form's hostile clients over TLS (its second lane).
    pub fn tls_hostiles(&self) -> impl Iterator<Item = Planned<Hostile>> + Send + use<> {
        let mut rng = Rng::fork(self.seed, 5);
        std::iter::repeat_with(move || Planned {
            gap_ms: rng.range(TLS_HOSTILE_GAP_MS.0, TLS_HOSTILE_GAP_MS.1),
            kind: weighted(&mut rng, &TLS_HOSTILES),
            draw: rng.next_u64(),
        })
    }

    pub fn cluster_fingerprint(&self) -> String {
        let faults = self.cluster_faults().take(1000).map(|p| format!("{p:?}"));
        let hostiles = self.tls_hostiles().take(1000).map(|p| format!("{p:?}"));
        fnv(faults.chain(hostiles))
    }

    /// A digest of the first thousand entries of both lanes (FNV-1a), so
    /// that two runs can show they replayed the same schedule.
    pub fn fingerprint(&self) -> String {
        let faults = self.faults().take(1000).map(|p| format!("{p:?}"));
        let hostiles = self.hostiles().take(1000).map(|p| format!("{p:?}"));
        fnv(faults.chain(hostiles))
    }

    /// The first `count` entries of both lanes, for `--schedule`.
    pub fn describe(&self, count: usize) -> String {
        let mut text =
            String::from("lane 1 (processes and files), each after the previous one ends:\n");
        for planned in self.faults().take(count) {
            text.push_str(&format!(
                "  wait {:>4} ms, {:?}  draw {:016x}\n",
                planned.gap_ms, planned.kind, planned.draw
            ));
        }
        text.push_str("lane 2 (hostile clients), at times from the start:\n");
        let mut at = 0;
        for planned in self.hostiles().take(count) {
            at += planned.gap_ms;
            text.push_str(&format!(
                "  +{at:>6} ms  {:?}  draw {:016x}\n",
                planned.kind, planned.draw
            ));
        }
        text
    }
}

/// The names used in logs and reports.
pub fn fault_name(fault: Fault) -> String {
    snake(&format!("{fault:?}"))
}

pub fn cluster_fault_name(fault: ClusterFault) -> String {
    snake(&format!("{fault:?}"))
}

/// FNV-1a over texts.
fn fnv(texts: impl Iterator<Item = String>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for text in texts {
        for byte in text.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

pub fn hostile_name(hostile: Hostile) -> String {
    snake(&format!("{hostile:?}"))
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
