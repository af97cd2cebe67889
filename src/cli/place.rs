//! Where the command's flights are (SPEC.md §13.1, §14.8): a flight
//! directory on this machine, or a cluster of machines that meet in etcd.
//! The one place of the command that tells the two apart; `run`, `serve`
//! and `status` ask it for a builder, a status or a description.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use single_flight::{Builder, SingleFlight, Status, StatusError};

/// Text shared by the help of every subcommand that takes `--dir`.
const DIRECTORY_HELP: &str = "The flight directory, shared by the processes that take part in the same flights. The default, which `--help` shows resolved for you, is $XDG_RUNTIME_DIR/single-flight when XDG_RUNTIME_DIR names a directory of yours with mode 0700, otherwise single-flight-<uid> in the temporary directory ($TMPDIR, or /tmp). It is created with mode 0700 when missing, and refused when it is a symbolic link, is not yours, lets group or others in, or is on a network file system. With --etcd, this host's processes meet in cluster-NAME inside it, and reach the cluster through the one of them that coordinates there (unless --direct)";

/// The cluster name when `--cluster` is not given: one etcd serves one
/// fleet in the common case, and a quickstart should not need a name.
/// Fleets that share an etcd give each its own (SPEC.md §14.1).
#[cfg(feature = "cluster")]
const DEFAULT_CLUSTER: &str = "default";

/// The flight directory or the cluster, as the command line gives them.
/// Every cluster option needs `--etcd`, and `--etcd` excludes `--dir`
/// (either from the environment too: two places are a usage error, not a
/// choice made silently).
#[derive(Clone, Debug, Args)]
pub struct PlaceArgs {
    #[arg(
        long,
        env = "SINGLE_FLIGHT_DIR",
        value_name = "DIR",
        default_value_os_t = single_flight::default_directory(),
        help = "The flight directory, shared by the processes that take part in the same flights",
        long_help = DIRECTORY_HELP
    )]
    dir: PathBuf,

    /// Cluster mode: the etcd where the processes of several machines meet
    /// (SPEC.md §14), as http:// or https:// URLs separated by commas.
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ETCD",
        value_name = "URL[,URL...]",
        value_delimiter = ',',
        help_heading = "Cluster mode"
    )]
    etcd: Vec<String>,

    /// The cluster's name: clusters sharing one etcd do not see each other
    /// [default: default].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_CLUSTER",
        value_name = "NAME",
        requires = "etcd",
        help_heading = "Cluster mode"
    )]
    cluster: Option<String>,

    /// Where this process listens when it coordinates, IP:PORT (port 0: a
    /// free one) [default: 127.0.0.1:0, reachable from this machine only].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_LISTEN",
        value_name = "ADDR",
        requires = "etcd",
        help_heading = "Cluster mode"
    )]
    listen: Option<SocketAddr>,

    /// The HOST:PORT other machines connect to when this process
    /// coordinates; its certificate must be valid for HOST [default: the
    /// listen address, with the port it got].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ADVERTISE",
        value_name = "ADDR",
        requires = "etcd",
        help_heading = "Cluster mode"
    )]
    advertise: Option<String>,

    /// The CA that signs every certificate of the cluster (PEM).
    #[arg(
        long,
        env = "SINGLE_FLIGHT_TLS_CA",
        value_name = "FILE",
        requires_all = ["etcd", "tls_cert", "tls_key"],
        help_heading = "Cluster mode"
    )]
    tls_ca: Option<PathBuf>,

    /// This process's certificate, signed by the CA (PEM).
    #[arg(
        long,
        env = "SINGLE_FLIGHT_TLS_CERT",
        value_name = "FILE",
        requires_all = ["etcd", "tls_ca", "tls_key"],
        help_heading = "Cluster mode"
    )]
    tls_cert: Option<PathBuf>,

    /// The key of this process's certificate (PEM).
    #[arg(
        long,
        env = "SINGLE_FLIGHT_TLS_KEY",
        value_name = "FILE",
        requires_all = ["etcd", "tls_ca", "tls_cert"],
        help_heading = "Cluster mode"
    )]
    tls_key: Option<PathBuf>,

    /// A PEM file of the CA's certificate revocation lists: a process whose
    /// certificate one lists is refused (may be given more than once; read
    /// again when it changes, as the other TLS files are).
    #[arg(
        long,
        env = "SINGLE_FLIGHT_TLS_CRL",
        value_name = "FILE",
        requires_all = ["etcd", "tls_ca", "tls_cert", "tls_key"],
        help_heading = "Cluster mode"
    )]
    tls_crl: Vec<PathBuf>,

    /// The CA that signed etcd's certificates, when it is not --tls-ca
    /// (PEM). Alone, this process presents no certificate to etcd, which
    /// then knows it by --etcd-user [default: --tls-ca].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ETCD_CA",
        value_name = "FILE",
        requires = "etcd",
        help_heading = "Cluster mode"
    )]
    etcd_ca: Option<PathBuf>,

    /// The certificate this process presents to etcd, when it is not
    /// --tls-cert (PEM); with authentication on, etcd takes its common
    /// name for the user [default: --tls-cert].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ETCD_CERT",
        value_name = "FILE",
        requires_all = ["etcd", "etcd_ca", "etcd_key"],
        help_heading = "Cluster mode"
    )]
    etcd_cert: Option<PathBuf>,

    /// The key of --etcd-cert (PEM) [default: --tls-key].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ETCD_KEY",
        value_name = "FILE",
        requires_all = ["etcd", "etcd_ca", "etcd_cert"],
        help_heading = "Cluster mode"
    )]
    etcd_key: Option<PathBuf>,

    /// The etcd user to authenticate as, when etcd has authentication on
    /// (SPEC.md §14.9); its password is read from --etcd-password-file.
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ETCD_USER",
        value_name = "NAME",
        requires_all = ["etcd", "etcd_password_file"],
        help_heading = "Cluster mode"
    )]
    etcd_user: Option<String>,

    /// The file that holds the password of --etcd-user (never the
    /// password itself on the command line, where `ps` shows it); one
    /// trailing newline is ignored.
    #[arg(
        long,
        env = "SINGLE_FLIGHT_ETCD_PASSWORD_FILE",
        value_name = "FILE",
        requires_all = ["etcd", "etcd_user"],
        help_heading = "Cluster mode"
    )]
    etcd_password_file: Option<PathBuf>,

    /// The id under which this host's coordinator relays for it, different
    /// on every host of the cluster (SPEC.md §18.6) [default: this host's
    /// name and 64 random bits, kept in its host directory].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_HOST_ID",
        value_name = "ID",
        requires = "etcd",
        conflicts_with = "direct",
        help_heading = "Cluster mode"
    )]
    host_id: Option<String>,

    /// Reach the cluster directly, as its own client of etcd and of the
    /// cluster's coordinator, instead of through this host's coordinator
    /// in the host directory (SPEC.md §18.6).
    #[arg(long, requires = "etcd", help_heading = "Cluster mode")]
    direct: bool,

    /// Plain TCP without certificates, refused unless every address is
    /// loopback (one machine, for trying cluster mode out).
    #[arg(
        long,
        requires = "etcd",
        conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"],
        help_heading = "Cluster mode"
    )]
    insecure: bool,

    /// The etcd lease's time to live, in seconds: a coordinator whose host
    /// dies is replaced about this long later [default: 5].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_TTL",
        value_name = "SECS",
        requires = "etcd",
        value_parser = parse_ttl,
        help_heading = "Cluster mode"
    )]
    ttl: Option<u64>,

    /// The number of shards the cluster's keys are split over, each with a
    /// coordinator of its own (SPEC.md §19), 1 to 64; fixed when the
    /// cluster is first used, and every process must give the same
    /// [default: 1].
    #[arg(
        long,
        env = "SINGLE_FLIGHT_SHARDS",
        value_name = "S",
        requires = "etcd",
        value_parser = parse_shards,
        help_heading = "Cluster mode"
    )]
    shards: Option<u32>,
}

/// A number of shards for `--shards`: 1 to `MAX_SHARDS` (SPEC.md §19.1).
fn parse_shards(text: &str) -> Result<u32, String> {
    let most = single_flight::MAX_SHARDS;
    match text.parse::<u32>() {
        Ok(count @ 1..) if count <= most => Ok(count),
        _ => Err(format!(
            "{text:?} is not a number of shards: a cluster has 1 to {most} (SPEC.md §19.1)"
        )),
    }
}

/// A whole number of seconds for `--ttl`, at least the shortest lease etcd
/// keeps as asked (SPEC.md §14.2): the library would raise a shorter one,
/// and the command says so instead of running with another TTL than given.
fn parse_ttl(text: &str) -> Result<u64, String> {
    let seconds: u64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of seconds (for example 5)"))?;
    #[cfg(feature = "cluster")]
    {
        let least = single_flight::Cluster::MIN_TTL.as_secs();
        if seconds < least {
            return Err(format!(
                "the lease TTL must be at least {least} seconds: etcd raises shorter leases (SPEC.md §14.2)"
            ));
        }
    }
    Ok(seconds)
}

/// Where the flights are: the library's [`Builder`] for the directory or
/// the cluster that the arguments name, which alone tells the two apart.
#[derive(Clone, Debug)]
pub struct Place {
    builder: Builder,
}

impl From<Builder> for Place {
    fn from(builder: Builder) -> Place {
        Place { builder }
    }
}

impl PlaceArgs {
    /// The place these arguments name; an error when they name a cluster
    /// and this build has no cluster mode.
    pub fn place(&self) -> Result<Place, String> {
        if self.etcd.is_empty() {
            return Ok(SingleFlight::builder(&self.dir).into());
        }
        self.cluster()
    }

    #[cfg(feature = "cluster")]
    fn cluster(&self) -> Result<Place, String> {
        let name = self.cluster.as_deref().unwrap_or(DEFAULT_CLUSTER);
        let mut cluster = single_flight::Cluster::etcd(self.etcd.iter().cloned(), name);
        if let Some(listen) = self.listen {
            cluster = cluster.listen(listen);
        }
        if let Some(advertise) = &self.advertise {
            cluster = cluster.advertise(advertise.clone());
        }
        if let (Some(ca), Some(certificate), Some(key)) =
            (&self.tls_ca, &self.tls_cert, &self.tls_key)
        {
            cluster = cluster.tls(ca, certificate, key);
        }
        for crl in &self.tls_crl {
            cluster = cluster.crl(crl);
        }
        if self.insecure {
            cluster = cluster.insecure();
        }
        match (&self.etcd_ca, &self.etcd_cert, &self.etcd_key) {
            (Some(ca), Some(certificate), Some(key)) => {
                cluster = cluster.etcd_tls(ca, certificate, key);
            }
            (Some(ca), _, _) => cluster = cluster.etcd_ca(ca),
            _ => {}
        }
        if let (Some(user), Some(password_file)) = (&self.etcd_user, &self.etcd_password_file) {
            cluster = cluster.etcd_user(user, password_file);
        }
        if let Some(ttl) = self.ttl {
            cluster = cluster.ttl(Duration::from_secs(ttl));
        }
        if let Some(shards) = self.shards {
            cluster = cluster.shards(shards);
        }
        cluster = cluster.directory(&self.dir);
        if let Some(id) = &self.host_id {
            cluster = cluster.host_id(id);
        }
        if self.direct {
            cluster = cluster.direct();
        }
        Ok(SingleFlight::cluster(cluster).into())
    }

    #[cfg(not(feature = "cluster"))]
    fn cluster(&self) -> Result<Place, String> {
        Err("--etcd needs cluster mode, which this single-flight was built without (the `cluster` feature); install a build with it, or use a flight directory (--dir)".into())
    }
}

/// The shortest `--grace` a cluster accepts, in milliseconds (SPEC.md
/// §14.4): a leader reasserts only after it has left the old coordinator
/// (up to `DRAIN_IDLE`, 500 ms, of reading what it still sends, §14.3),
/// read the new address, and made a TCP and a TLS handshake with the new
/// one; 500 ms more cover those on a loaded host. Shorter windows close
/// before the leaders of the old term are back (with `--grace 500`, leaders
/// reconnected 11 to 100 ms before the window closed), and their joiners
/// exit 75 although the command ran; so they are refused, not warned of.
pub const MIN_CLUSTER_GRACE_MS: u64 = 1000;

impl Place {
    /// A builder for this place with the library's defaults and the grace
    /// window `grace` (milliseconds, `--grace`), if given; an error for a
    /// window too short for the place.
    pub fn builder_with_grace(&self, grace: Option<u64>) -> Result<Builder, String> {
        let Some(grace) = grace else {
            return Ok(self.builder());
        };
        if self.cluster().is_some() && grace < MIN_CLUSTER_GRACE_MS {
            return Err(format!(
                "--grace {grace} is too short for a cluster: a leader needs up to 500 ms to leave a coordinator that is gone and more to reach the next one before the window closes, or its joiners lose its output; give at least {MIN_CLUSTER_GRACE_MS} (SPEC.md §14.4)"
            ));
        }
        Ok(self.builder().grace_window(Duration::from_millis(grace)))
    }

    /// A builder for this place with the library's defaults.
    pub fn builder(&self) -> Builder {
        self.builder.clone()
    }

    /// The flight directory; `None` for a cluster, which has none to share
    /// files through (SPEC.md §14.8): its host directory is its host's
    /// alone.
    pub fn directory(&self) -> Option<&Path> {
        match self.cluster() {
            Some(_) => None,
            None => self.builder.directory(),
        }
    }

    /// Each certificate file the cluster's options name and when it
    /// expires (SPEC.md §13.5); empty for a directory or without TLS.
    pub fn certificate_expiries(&self) -> Vec<(PathBuf, Result<String, String>)> {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.builder.cluster() {
            return cluster
                .certificate_expiries()
                .into_iter()
                .map(|(file, expiry)| (file, expiry.map_err(|error| error.to_string())))
                .collect();
        }
        Vec::new()
    }

    /// The cluster's name and etcd endpoints; `None` for a directory.
    pub fn cluster(&self) -> Option<(&str, &[String])> {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.builder.cluster() {
            return Some((cluster.name(), cluster.endpoints()));
        }
        None
    }

    /// The cluster's number of shards (SPEC.md §19.1); one for a
    /// directory, and for a count out of range, which opening refuses.
    pub fn shard_count(&self) -> single_flight::ShardCount {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.builder.cluster() {
            return cluster
                .shard_count()
                .unwrap_or(single_flight::ShardCount::ONE);
        }
        single_flight::ShardCount::ONE
    }

    /// What to call it in messages.
    pub fn describe(&self) -> String {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.builder.cluster() {
            return cluster.to_string();
        }
        match self.directory() {
            Some(directory) => directory.display().to_string(),
            None => unreachable!("a place is a directory or a cluster"),
        }
    }

    /// One look at its coordinator (SPEC.md §3.5).
    pub async fn status(&self) -> Result<Status, StatusError> {
        self.builder.status().await
    }

    /// One look at each shard's coordinator, in shard order (SPEC.md
    /// §19.6).
    pub async fn shard_statuses(&self) -> Vec<Result<Status, StatusError>> {
        self.builder.shard_statuses().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        place: PlaceArgs,
    }

    fn parse(arguments: &[&str]) -> Result<PlaceArgs, clap::Error> {
        Command::try_parse_from(std::iter::once("test").chain(arguments.iter().copied()))
            .map(|command| command.place)
    }

    /// §14.8: every cluster option requires `--etcd`; §18.6: `--dir`
    /// holds the host directory, and `--host-id` and `--direct` exclude
    /// each other.
    #[test]
    fn every_cluster_option_needs_etcd() {
        assert!(parse(&["--dir", "/d", "--etcd", "http://e:2379"]).is_ok());
        assert!(
            parse(&["--etcd", "http://e:2379", "--direct", "--host-id", "h"]).is_err(),
            "a host id is for the host tier"
        );
        for alone in [
            &["--host-id", "h"][..],
            &["--direct"],
            &["--cluster", "c"],
            &["--listen", "10.0.0.1:0"],
            &["--advertise", "h:1"],
            &["--insecure"],
            &["--ttl", "5"],
            &["--shards", "2"],
            &["--tls-ca", "a", "--tls-cert", "b", "--tls-key", "c"],
            &["--tls-crl", "d"],
            &["--etcd-ca", "a"],
            &["--etcd-user", "u", "--etcd-password-file", "p"],
        ] {
            assert!(parse(alone).is_err(), "{alone:?} without --etcd");
        }
        assert!(parse(&["--etcd", "http://e:2379", "--tls-ca", "a"]).is_err());
        assert!(
            parse(&["--etcd", "http://e:2379", "--tls-crl", "d"]).is_err(),
            "a CRL needs the TLS files"
        );
        assert!(
            parse(&["--etcd", "http://e:2379", "--insecure", "--tls-ca", "a"]).is_err(),
            "plain TCP or certificates, not both"
        );
        assert!(parse(&["--etcd", "http://e:2379", "--ttl", "1"]).is_err());
        for shards in ["0", "65", "-1", "x"] {
            assert!(parse(&["--etcd", "http://e:2379", "--shards", shards]).is_err());
        }
    }

    /// §14.9: a user needs its password file and the reverse; etcd's
    /// certificate and key need each other and its CA, which may come
    /// alone.
    #[test]
    fn etcd_credentials_come_in_their_pairs() {
        let etcd = ["--etcd", "http://e:2379"];
        let with = |more: &[&str]| parse(&[&etcd[..], more].concat());
        assert!(with(&["--etcd-user", "u"]).is_err());
        assert!(with(&["--etcd-password-file", "p"]).is_err());
        assert!(with(&["--etcd-user", "u", "--etcd-password-file", "p"]).is_ok());
        assert!(with(&["--etcd-cert", "c", "--etcd-key", "k"]).is_err());
        assert!(with(&["--etcd-ca", "a", "--etcd-cert", "c"]).is_err());
        assert!(with(&["--etcd-ca", "a"]).is_ok());
        assert!(with(&["--etcd-ca", "a", "--etcd-cert", "c", "--etcd-key", "k"]).is_ok());
    }

    #[test]
    fn the_place_is_the_directory_or_the_cluster() {
        let directory = parse(&["--dir", "/d"]).unwrap().place().unwrap();
        assert_eq!(directory.directory(), Some(Path::new("/d")));
        assert!(directory.cluster().is_none());
        let cluster = parse(&["--etcd", "http://a:2379,http://b:2379", "--insecure"])
            .unwrap()
            .place();
        #[cfg(feature = "cluster")]
        {
            let cluster = cluster.unwrap();
            assert_eq!(cluster.directory(), None, "no spill files in a cluster");
            assert_eq!(
                cluster.builder().cluster().unwrap().host_directory(),
                Some(single_flight::default_directory().join("cluster-default"))
            );
            let named = parse(&["--etcd", "http://a:2379", "--dir", "/d", "--cluster", "c"]);
            let named = named.unwrap().place().unwrap();
            assert_eq!(
                named.builder().cluster().unwrap().host_directory(),
                Some(PathBuf::from("/d/cluster-c"))
            );
            let direct = parse(&["--etcd", "http://a:2379", "--direct"]);
            let direct = direct.unwrap().place().unwrap();
            assert_eq!(direct.builder().cluster().unwrap().host_directory(), None);
            let (name, etcd) = cluster.cluster().unwrap();
            assert_eq!(name, DEFAULT_CLUSTER);
            assert_eq!(etcd, ["http://a:2379", "http://b:2379"]);
            assert_eq!(
                cluster.describe(),
                "the cluster \"default\" at http://a:2379,http://b:2379"
            );
        }
        #[cfg(not(feature = "cluster"))]
        assert!(cluster.unwrap_err().contains("`cluster` feature"));
    }
}
