//! How a host coordinator reaches the cluster's coordinator (SPEC.md
//! §18.1, §18.3): one connection at a time, opened with the relay hello,
//! whose lines the server reports to its relay. The greeting is the
//! client's (§4.2), shared with the driver (`super::driver`).

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use super::lines::{LineError, Lines};
use super::options::{HANDSHAKE_TIMEOUT, Options};
use super::outage::Outage;
use super::server::{self, Lifetime, RELAY_LOG_TARGET, Serving};
use super::unanswered::{Gone, Unanswered};
use crate::backend::{Backend, BackendError, Upper};
use crate::election::{Election, Term};
use crate::protocol::{ClientHello, CoordinatorHello, HandshakeError, decode_coordinator_hello};
use crate::transport::{ConnectError, Connection, Listener, Transport};

/// The pause before a host coordinator tries again to open the cluster
/// (its certificates, its etcd client) after it failed: a file being
/// renewed is fixed within seconds, a wrong setting not at all, and either
/// way one attempt and one line of log every 2 s is enough.
const REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// How this process serves a term it wins (SPEC.md §18.1): with the
/// coordinator, or, in a host directory, with the relay that reaches the
/// place above it for its host.
pub(super) struct Serves<U> {
    upper: Option<Upper<U>>,
}

/// The place a host coordinator reaches for its host (SPEC.md §18.1): what
/// [`Opening`] opens each time its process becomes the host's coordinator,
/// so that only the host coordinator holds a client of the place above.
/// Every [`Backend`] is one (a cluster's, for the real tier); the
/// simulation (sim/, SPEC.md §12.7) brings its own cluster through
/// `open_tiered_on` (`super::thread`), so that the driver, server, relay
/// and [`Reaching`] it runs are the shipped ones.
pub(crate) trait Above: Clone + Send + Sync + 'static {
    /// Who coordinates the place above.
    type Election: Election<Address = <Self::Transport as Transport>::Address>;
    /// How a host coordinator reaches it.
    type Transport: Transport;

    /// The time between attempts to reach or elect its coordinator
    /// (§14.3).
    fn poll_interval(&self) -> Duration;

    /// A fresh election and transport of the place above, as a process of
    /// it opens them.
    fn open_above(
        &self,
        poll_interval: Duration,
    ) -> impl Future<Output = Result<(Self::Election, Self::Transport), BackendError>> + Send;

    /// What to call the place above in messages.
    fn describe_above(&self) -> String;
}

impl<B: Backend + Clone> Above for B {
    type Election = B::Election;
    type Transport = B::Transport;

    fn poll_interval(&self) -> Duration {
        B::POLL_INTERVAL
    }

    fn open_above(
        &self,
        poll_interval: Duration,
    ) -> impl Future<Output = Result<(B::Election, B::Transport), BackendError>> + Send {
        self.open(poll_interval)
    }

    fn describe_above(&self) -> String {
        self.describe()
    }
}

impl<U: Above> Serves<U> {
    pub(super) fn new(upper: Option<Upper<U>>) -> Serves<U> {
        Serves { upper }
    }

    /// Serves `term` on `listener` for `lifetime`.
    pub(super) fn start<T: Term, L: Listener>(
        &self,
        term: T,
        listener: L,
        options: &Options,
        lifetime: Lifetime,
    ) -> Serving {
        let Some(upper) = &self.upper else {
            return server::start_for(term, listener, options, lifetime);
        };
        // The place above paces its own attempts (§14.3); its terms open
        // the grace window this process was given (§14.4), and their relay
        // windows last as long (§18.2).
        let above = Options {
            poll_interval: upper.backend.poll_interval(),
            ..options.clone()
        };
        let upstream = Opening {
            backend: upper.backend.clone(),
            hello: ClientHello::relaying(upper.host.clone()),
            options: above,
            reaching: None,
        };
        server::start_relay_for(
            Some(upper.host.clone()),
            term,
            listener,
            options,
            lifetime,
            upstream,
        )
    }
}

/// The upstream of a host term before and after it opened the place above
/// (SPEC.md §18.1): only the host coordinator opens it, so that the host's
/// other processes hold no client of the cluster's election and no
/// certificate.
pub(super) struct Opening<B: Above> {
    backend: B,
    hello: ClientHello,
    options: Options,
    reaching: Option<Reaching<B::Election, B::Transport>>,
}

impl<B: Above> Upstream for Opening<B> {
    type Reader = <B::Transport as Transport>::Reader;
    type Writer = <B::Transport as Transport>::Writer;

    async fn reach(&mut self) -> Result<Reached<Self::Reader, Self::Writer>, Unreached> {
        let reaching = match &mut self.reaching {
            Some(reaching) => reaching,
            None => match self.backend.open_above(self.options.poll_interval).await {
                Ok((election, transport)) => self.reaching.insert(Reaching::new(
                    election,
                    transport,
                    self.hello.clone(),
                    self.options.clone(),
                )),
                Err(error) => {
                    warn!(target: RELAY_LOG_TARGET, %error, "cannot open {} for this host's relay; trying again (SPEC.md §18.1)", self.backend.describe_above());
                    return Err(Unreached::failed(REOPEN_PAUSE, &error));
                }
            },
        };
        reaching.reach().await
    }

    async fn close(self) {
        if let Some(reaching) = self.reaching {
            reaching.close().await;
        }
    }
}

/// A connection to the cluster's coordinator whose relay hello was answered.
pub(super) struct Reached<R, W> {
    pub(super) lines: Lines<R>,
    pub(super) writer: W,
    pub(super) hello: CoordinatorHello,
    pub(super) gone: Gone,
}

/// Reaches the cluster's coordinator for a host's relay, again after each
/// loss: the server runs one attempt at a time, and the next only after the
/// connection it made is gone.
pub(super) trait Upstream: Send + 'static {
    type Reader: AsyncRead + Unpin + Send + 'static;
    type Writer: AsyncWrite + Unpin + Send + 'static;

    /// One attempt: the connection, greeted with the relay hello, or why
    /// not and the pause before the next attempt.
    fn reach(
        &mut self,
    ) -> impl Future<Output = Result<Reached<Self::Reader, Self::Writer>, Unreached>> + Send;

    /// Ends what this upstream holds when its host term ends: the cluster's
    /// term it serves, if it won one, ends as a stopped term does (§10.4),
    /// its last answers written and its end recorded, before the process
    /// that serves it can exit.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Why an attempt did not reach the cluster's coordinator, and the pause
/// before the next.
pub(super) struct Unreached {
    pub(super) pause: Duration,
    /// The error that ends the host's calls that wait to be sent
    /// (SPEC.md §18.3, "Unavailable"), as a direct process's waiting calls
    /// end when an attempt fails (§14.6); `None` when the attempt found
    /// nobody to reach, whom the next one may find.
    pub(super) error: Option<String>,
}

impl Unreached {
    /// Nobody to reach this time.
    pub(super) fn missed(pause: Duration) -> Unreached {
        Unreached { pause, error: None }
    }

    /// The attempt failed with `error`.
    pub(super) fn failed(pause: Duration, error: impl std::fmt::Display) -> Unreached {
        Unreached {
            pause,
            error: Some(error.to_string()),
        }
    }
}

/// The upstream of a term that does not relay: the coordinator's. It has
/// no value, so the server never runs one.
pub(super) enum NoUpstream {}

impl Upstream for NoUpstream {
    type Reader = tokio::io::Empty;
    type Writer = tokio::io::Sink;

    async fn reach(&mut self) -> Result<Reached<Self::Reader, Self::Writer>, Unreached> {
        match *self {}
    }

    async fn close(self) {
        match self {}
    }
}

/// The upstream of a host coordinator: the cluster's election and transport
/// (SPEC.md §14), as a process of the cluster uses them, but with the relay
/// hello (§18.1). The host coordinator is its host's only candidate for the
/// cluster's term: when nobody coordinates the cluster it campaigns, and
/// when it wins it serves the cluster's coordinator too and reaches it like
/// any other host (§18.4, "a host coordinator that is also the cluster's
/// coordinator").
pub(super) struct Reaching<E, T> {
    election: E,
    transport: T,
    /// The relay hello, naming the host (§18.1).
    hello: ClientHello,
    /// The cluster's options: its grace window and poll interval (§14.3,
    /// §14.4), for the cluster's term if this process wins it.
    options: Options,
    /// The cluster's term this process serves, if it won one.
    serving: Option<Serving>,
    /// Whether the cluster's election is out, for one line of log per
    /// outage and the pauses between attempts through it (§18.5).
    outage: Outage,
    /// The refusals between this host coordinator and the cluster's
    /// coordinator since one last accepted the other (§14.5).
    refusals: Outage,
    /// The waits while the cluster's coordinator that the election names
    /// does not answer (§14.3).
    unanswered: Unanswered,
}

impl<E, T> Reaching<E, T>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    pub(super) fn new(election: E, transport: T, hello: ClientHello, options: Options) -> Self {
        Reaching {
            outage: Outage::new(options.poll_interval),
            refusals: Outage::new(options.poll_interval),
            unanswered: Unanswered::new(options.poll_interval),
            election,
            transport,
            hello,
            options,
            serving: None,
        }
    }

    /// The cluster's election answered: says so when it was out (§18.5).
    fn answered(&mut self) {
        if let Some(after) = self.outage.answered(Instant::now()) {
            info!(target: RELAY_LOG_TARGET, ?after, "the cluster's election answers again; relaying as before (SPEC.md §18.5)");
        }
    }

    /// The cluster's election is out (§14.6) while this process `tried`:
    /// a warning when the outage begins, not at every attempt (§18.5). The
    /// pause before the next attempt.
    fn out(&mut self, tried: &str, error: &E::Error) -> Duration {
        if self.outage.failed(Instant::now()) {
            warn!(target: RELAY_LOG_TARGET, %error, "{tried}; trying again until the cluster's election answers (SPEC.md §18.5)");
        } else {
            debug!(target: RELAY_LOG_TARGET, %error, "the cluster's election is still out");
        }
        self.outage.pause()
    }

    /// The cluster's coordinator and this host coordinator did not accept
    /// each other (§14.5, §4.2): said when it begins, as an outage is
    /// (§18.5), with pauses that double to 2 s, so that a host coordinator
    /// whose certificate the cluster refuses, and which may serve the
    /// cluster's term itself, tries every 2 s rather than ten times a
    /// second with a warning at each. Its host's waiting calls are told
    /// each time (§18.3, "Unavailable").
    fn refused(&mut self, error: impl std::fmt::Display) -> Unreached {
        if self.refusals.failed(Instant::now()) {
            warn!(target: RELAY_LOG_TARGET, %error, "the cluster's coordinator and this host coordinator do not accept each other; trying again");
        } else {
            debug!(target: RELAY_LOG_TARGET, %error, "still not accepted by the cluster's coordinator");
        }
        Unreached::failed(self.refusals.pause(), error)
    }

    /// Connects to the coordinator the election names and greets it with the
    /// relay hello: `Ok(Err(gone))` when nobody answers there (§10.1), with
    /// the watch of its key.
    async fn connect(
        &mut self,
        address: E::Address,
    ) -> Result<Result<Reached<T::Reader, T::Writer>, Gone>, Unreached> {
        // §14.3: a coordinator whose key goes while the connection is made
        // is no longer the one to reach; look again at once.
        let mut gone: Gone = Box::pin(self.election.coordinator_gone());
        let connected = tokio::select! {
            connected = self.transport.connect(&address) => connected,
            () = &mut gone => return Err(Unreached::missed(Duration::ZERO)),
        };
        let connection = match connected {
            Ok(connection) => connection,
            Err(ConnectError::Unreachable(error)) => {
                debug!(target: RELAY_LOG_TARGET, %error, "no coordinator of the cluster answers");
                return Ok(Err(gone));
            }
            Err(error) => {
                return Err(self.refused(format_args!(
                    "refusing the cluster's coordinator (SPEC.md §11.2, §14.5): {error}"
                )));
            }
        };
        match greet(connection, &self.hello).await {
            Greeted::Answered {
                lines,
                writer,
                hello,
            } => {
                if let Some(after) = self.refusals.answered(Instant::now()) {
                    info!(target: RELAY_LOG_TARGET, ?after, "the cluster's coordinator and this host coordinator accept each other again");
                }
                Ok(Ok(Reached {
                    lines,
                    writer,
                    hello,
                    gone,
                }))
            }
            Greeted::Nobody => Ok(Err(gone)),
            // Said by `greet`; a coordinator of another version or one that
            // refuses this process is asked again after a pause.
            Greeted::Rejected(error) => Err(self.refused(error)),
            Greeted::Unusable(error) => Err(self.refused(error)),
        }
    }
}

impl<E, T> Upstream for Reaching<E, T>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    type Reader = T::Reader;
    type Writer = T::Writer;

    async fn reach(&mut self) -> Result<Reached<T::Reader, T::Writer>, Unreached> {
        let poll = self.options.poll_interval;
        if self
            .serving
            .as_ref()
            .is_some_and(|serving| serving.done.is_finished())
        {
            info!(target: RELAY_LOG_TARGET, "this host's term of the cluster is over; campaigning again");
            self.serving = None;
        }
        // The watch of a key whose coordinator did not answer, kept for
        // the wait below.
        let mut silent: Option<Gone> = None;
        match self.election.coordinator().await {
            Ok(Some(address)) => {
                self.answered();
                match self.connect(address).await? {
                    Ok(reached) => {
                        self.unanswered.reset();
                        return Ok(reached);
                    }
                    Err(gone) => silent = Some(gone),
                }
            }
            Ok(None) => {
                self.answered();
                self.unanswered.reset();
                debug!(target: RELAY_LOG_TARGET, "no coordinator of the cluster serves");
            }
            Err(error) if E::is_outage(&error) => {
                let pause = self.out("cannot find the cluster's coordinator", &error);
                return Err(Unreached::failed(pause, &error));
            }
            Err(error) => {
                warn!(target: RELAY_LOG_TARGET, %error, "cannot find the cluster's coordinator");
                return Err(Unreached::failed(poll, &error));
            }
        }
        // §7.2 item 3: a process that holds a term never campaigns again; it
        // waits to reach its own listener.
        if self.serving.is_some() {
            return Err(Unreached::missed(poll));
        }
        let campaign = self.election.campaign().await;
        if campaign.is_ok() {
            self.answered();
        }
        if matches!(campaign, Ok(Some(_))) {
            self.unanswered.reset();
        }
        match campaign {
            Ok(Some(term)) => match self.transport.listen() {
                Ok(listener) => {
                    self.serving = Some(server::start(term, listener, &self.options));
                    // It reaches itself at once, as any host does.
                    Err(Unreached::missed(Duration::ZERO))
                }
                Err(error) => {
                    warn!(target: RELAY_LOG_TARGET, epoch = %term.epoch(), %error, "won the cluster's election but cannot serve; resigning");
                    term.resign(false).await;
                    Err(Unreached::missed(poll))
                }
            },
            // §14.3: a key whose coordinator is silent (killed, or not yet
            // listening) is waited out, not asked of etcd every poll.
            Ok(None) => Err(Unreached::missed(
                self.unanswered.wait_out(silent, E::TELLS_GONE, poll).await,
            )),
            Err(error) if E::is_outage(&error) => {
                let pause = self.out("cannot elect the cluster's coordinator", &error);
                Err(Unreached::failed(pause, &error))
            }
            Err(error) => {
                warn!(target: RELAY_LOG_TARGET, %error, "cannot elect the cluster's coordinator");
                Err(Unreached::failed(poll, &error))
            }
        }
    }

    async fn close(self) {
        if let Some(serving) = self.serving {
            let _ = serving.stop.send(());
            let _ = serving.done.await;
        }
    }
}

/// What a greeting came to (SPEC.md §4.2).
pub(super) enum Greeted<R, W> {
    /// The coordinator answered with a hello this process accepts.
    Answered {
        lines: Lines<R>,
        writer: W,
        hello: CoordinatorHello,
    },
    /// Nobody answered, or the connection closed: try again.
    Nobody,
    /// The coordinator refused this process's certificate (SPEC.md §14.5);
    /// waiting would not change that.
    Rejected(io::Error),
    /// The coordinator's hello cannot be used: another version, or not a
    /// hello.
    Unusable(HandshakeError),
}

/// Sends `hello` on `connection` and reads the coordinator's (SPEC.md §4.2).
pub(super) async fn greet<R, W>(connection: Connection<R, W>, hello: &ClientHello) -> Greeted<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Connection {
        reader: read,
        writer: mut write,
    } = connection;
    let mut line = serde_json::to_vec(hello).expect("a hello serializes");
    line.push(b'\n');
    if write.write_all(&line).await.is_err() || write.flush().await.is_err() {
        return Greeted::Nobody;
    }
    let mut lines = Lines::new(read);
    let answer = match tokio::time::timeout(HANDSHAKE_TIMEOUT, lines.next()).await {
        Ok(Ok(line)) => line,
        Ok(Err(LineError::Io(error))) if error.kind() == io::ErrorKind::PermissionDenied => {
            warn!(%error, "the coordinator refused this process");
            return Greeted::Rejected(error);
        }
        Ok(Err(error)) => {
            debug!(%error, "the coordinator closed during the handshake");
            return Greeted::Nobody;
        }
        Err(_) => {
            warn!("the coordinator did not answer the handshake in time; is its process stopped?");
            return Greeted::Nobody;
        }
    };
    match decode_coordinator_hello(&answer) {
        Ok(hello) => Greeted::Answered {
            lines,
            writer: write,
            hello,
        },
        Err(error) => {
            warn!(%error, "cannot use the coordinator");
            Greeted::Unusable(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::AsyncWriteExt;

    use crate::backend::Backend;
    use crate::backend::local::Directory;
    use crate::protocol::{HostId, Response, decode_response};
    use crate::shell::clock::Clock;
    use crate::shell::mutant::Seeded;
    use crate::transport::unix::UnixTransport;

    /// A flight directory of this test, removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path =
                std::env::temp_dir().join(format!("sf-upstream-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A process's connection to a directory's coordinator, greeted.
    struct Client {
        lines: Lines<<UnixTransport as Transport>::Reader>,
        writer: <UnixTransport as Transport>::Writer,
    }

    impl Client {
        async fn connect(transport: &UnixTransport) -> Client {
            loop {
                let connection = match transport.connect(&()).await {
                    Ok(connection) => connection,
                    Err(_) => {
                        // The socket is bound once the term serves.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if let Greeted::Answered { lines, writer, .. } =
                    greet(connection, &ClientHello::current()).await
                {
                    return Client { lines, writer };
                }
            }
        }

        async fn send(&mut self, line: &str) {
            self.writer.write_all(line.as_bytes()).await.unwrap();
            self.writer.write_all(b"\n").await.unwrap();
        }

        async fn response(&mut self) -> Response {
            let line = self.lines.next().await.expect("a response");
            decode_response(&line).expect("a response")
        }
    }

    impl crate::shell::scenarios::Caller for Client {
        async fn send(&mut self, line: &str) {
            Client::send(self, line).await;
        }

        async fn response(&mut self) -> Response {
            Client::response(self).await
        }
    }

    fn options() -> Options {
        Options {
            grace_window: Duration::from_secs(1),
            poll_interval: Duration::from_millis(10),
            seeded: Seeded::NONE,
            clock: Clock::System,
        }
    }

    /// An outage of etcd as the cluster's election reports it (§14.6).
    #[derive(Debug)]
    struct EtcdOut;

    impl std::fmt::Display for EtcdOut {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("no etcd member answers")
        }
    }

    impl std::error::Error for EtcdOut {}

    /// A cluster's election that answers as it is told, one answer per ask,
    /// and in which another process always holds the term.
    struct Scripted {
        /// `true`: the next ask is answered (nobody serves, or another
        /// process won); `false`: etcd is out.
        answers: std::collections::VecDeque<bool>,
    }

    impl Scripted {
        fn answer(&mut self) -> Result<(), EtcdOut> {
            match self.answers.pop_front() {
                Some(true) => Ok(()),
                Some(false) => Err(EtcdOut),
                None => panic!("asked more than the script says"),
            }
        }
    }

    impl Election for Scripted {
        type Address = ();
        type Term = <crate::election::local::LocalElection as Election>::Term;
        type Error = EtcdOut;

        async fn coordinator(&mut self) -> Result<Option<()>, EtcdOut> {
            self.answer().map(|()| None)
        }

        async fn campaign(&mut self) -> Result<Option<Self::Term>, EtcdOut> {
            self.answer().map(|()| None)
        }

        fn is_outage(_error: &EtcdOut) -> bool {
            true
        }
    }

    /// §18.5: a host coordinator whose cluster's election is out warns once
    /// when an outage begins and says once when it is over, however many
    /// attempts it makes meanwhile; its pauses double from the poll
    /// interval as `serve`'s do (§13.5), and start again from it once the
    /// election answers. An outage that begins at the campaign, after the
    /// look for the coordinator was answered, is an outage as well. Before,
    /// every attempt logged a warning and paused one poll interval.
    #[tokio::test]
    async fn s18_5_a_host_coordinator_logs_one_line_per_outage_of_the_clusters_election() {
        use crate::shell::captured::Captured;
        let (captured, _guard) = Captured::start();
        let scratch = Scratch::new("outage");
        std::fs::create_dir_all(&scratch.0).unwrap();
        let options = options();
        let poll = options.poll_interval;
        // Each attempt asks for the coordinator, and, when that is
        // answered, campaigns.
        let script = [
            false, // outage 1 begins
            false, false, true, // outage 1 over
            true, false, // outage 2 begins
            true,  // outage 2 over
            false, // outage 3 begins, at the campaign
            true,  // outage 3 over
            true,
        ];
        let mut reaching = Reaching::new(
            Scripted {
                answers: script.into_iter().collect(),
            },
            UnixTransport::new(&scratch.0).unwrap(),
            ClientHello::relaying(HostId::new("build-7").unwrap()),
            options,
        );
        let mut pauses = Vec::new();
        for _ in 0..7 {
            match reaching.reach().await {
                Ok(_) => panic!("nobody serves the cluster"),
                Err(unreached) => pauses.push(unreached.pause),
            }
        }
        assert_eq!(
            pauses,
            [poll * 2, poll * 4, poll * 8, poll, poll * 2, poll * 2, poll]
        );
        assert_eq!(
            captured.count(RELAY_LOG_TARGET, "cannot find the cluster's coordinator;"),
            2,
            "{:#?}",
            captured.lines()
        );
        assert_eq!(
            captured.count(RELAY_LOG_TARGET, "cannot elect the cluster's coordinator;"),
            1
        );
        assert_eq!(
            captured.count(RELAY_LOG_TARGET, "the cluster's election answers again"),
            3
        );
        assert_eq!(
            captured.count(RELAY_LOG_TARGET, "the cluster's election is still out"),
            2
        );
    }

    /// §18.3, §18.4: the host coordinator of a directory finds no
    /// coordinator of the cluster (here a second directory stands for the
    /// cluster's election and transport), campaigns as its host's only
    /// candidate, serves the cluster's term and relays to it over the
    /// cluster's transport with the relay hello. Two processes of the host
    /// that call one key are one party at the cluster: the first leads under
    /// the cluster's token, the second joins, and a caller of another host,
    /// a client of the cluster, joins the same flight and receives its
    /// outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn s18_3_a_host_coordinator_that_wins_the_cluster_relays_to_itself() {
        let host = Scratch::new("host");
        let cluster = Scratch::new("cluster");
        let options = options();
        let (mut host_election, host_transport) = Directory::new(&host.0)
            .open(options.poll_interval)
            .await
            .unwrap();
        let host_term = host_election.campaign().await.unwrap().expect("won");
        let listener = host_transport.listen().unwrap();
        let (cluster_election, cluster_transport) = Directory::new(&cluster.0)
            .open(options.poll_interval)
            .await
            .unwrap();
        let upstream = Reaching::new(
            cluster_election,
            cluster_transport,
            ClientHello::relaying(HostId::new("build-7").unwrap()),
            options.clone(),
        );
        let serving = server::start_relay(
            host_term,
            listener,
            &options,
            Lifetime::UntilStopped,
            upstream,
        );

        let mut first = Client::connect(&host_transport).await;
        let mut second = Client::connect(&host_transport).await;
        let other_transport = UnixTransport::new(&cluster.0).unwrap();
        let mut other_host = Client::connect(&other_transport).await;
        crate::shell::scenarios::a_hosts_two_calls_are_one_party(
            &mut first,
            &mut second,
            &mut other_host,
        )
        .await;
        drop(serving.stop);
        serving.done.await.unwrap();
        // §18.5: the host term's end ended the cluster's term its process
        // served, as a stopped term (§10.4), before it returned.
        assert!(
            cluster.0.join(crate::election::local::CLEAN_FILE).exists(),
            "the cluster's term ended cleanly with the host's"
        );
    }
}
