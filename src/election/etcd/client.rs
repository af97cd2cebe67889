//! A client of etcd's v3 gRPC API: the few requests the election makes
//! (SPEC.md §14.1–§14.3), over the code generated from `proto/` and checked
//! in, so that no build needs `protoc`.
//!
//! Not part of the library's API (hidden from its docs): the tests, the
//! benchmarks and the chaos harness use it to read, write and watch etcd's
//! keys as the election sees them.
//!
//! Why our own client rather than the `etcd-client` crate: that crate
//! generates its code from etcd's `.proto` files in a build script, which
//! needs `protoc` on every machine that builds it, and it compiles tonic's
//! server router (axum) that nothing here uses. The election needs a dozen
//! requests: this module does for them what etcd-client does (one
//! channel balanced over every member, a deadline on every request and
//! connection, TLS with a CA and a client identity through tonic's rustls,
//! a user's token on every request, SPEC.md §14.9), and the election's
//! retries across members stay in `super`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use tracing::{debug, error, info};

use super::EtcdTls;
#[cfg(feature = "_internal")]
use super::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use super::proto::etcdserverpb::{
    self as pb, auth_client::AuthClient, compare, kv_client::KvClient, lease_client::LeaseClient,
    request_op, watch_client::WatchClient, watch_request,
};
#[cfg(feature = "_internal")]
use super::proto::v3lockpb;
#[cfg(feature = "_internal")]
use super::proto::v3lockpb::lock_client::LockClient;
use super::tls::{self, Contents, EtcdTlsError};
use crate::reload::{Decision, Reload, Schedule};

pub use super::proto::etcdserverpb::{
    Compare, LeaseKeepAliveResponse, RangeResponse, RequestOp, TxnRequest, TxnResponse,
    WatchResponse, event::EventType, response_op,
};
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use super::proto::etcdserverpb::{Event, KeyValue, ResponseOp, StatusResponse};

/// Requests queued for one bidirectional stream (a watch, a lease's
/// renewals) before the sender waits: a watch carries one request, and the
/// renewals at most one a tick (`RENEWALS_PER_TTL` per TTL in flight), which
/// the stream sends on as they come; a full queue means a stuck stream.
const STREAM_QUEUE: usize = 8;

/// The gRPC metadata key that carries a user's token to etcd (etcd's
/// `rpctypes.TokenFieldNameGRPC`).
const TOKEN_METADATA: &str = "token";

/// A user of an etcd with authentication on, and its password (SPEC.md
/// §14.9). Its `Debug` shows the user only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// A token etcd gave for the credentials, and how many came before it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    /// `None` when etcd has authentication off: requests go without one.
    value: Option<AsciiMetadataValue>,
    generation: u64,
}

/// The credentials and the token of a client and its clones (SPEC.md
/// §14.9).
#[derive(Debug)]
struct Authentication {
    credentials: Credentials,
    /// The token in use; `None` until the first request asks for one.
    token: Mutex<Option<Token>>,
    /// Held while a token is asked for, so that the requests refused for
    /// one token together get one new token, not one each.
    asking: tokio::sync::Mutex<()>,
}

/// Whether etcd refused a request for its token, so that a new token may
/// get it through (SPEC.md §14.9): a token that expired or that etcd does
/// not know (`Unauthenticated`, "etcdserver: invalid auth token"; simple
/// tokens expire after `--auth-token-ttl` unused, and each member forgets
/// them when it restarts), one older than a change of users or roles
/// ("revision of auth store is old"), and none at all where etcd has
/// authentication on ("user name is empty": it was off when this client
/// last asked).
pub(super) fn token_refused(status: &Status) -> bool {
    status.code() == Code::Unauthenticated
        || (status.code() == Code::InvalidArgument
            && (status.message().contains("revision of auth store is old")
                || status.message().contains("user name is empty")))
}

/// Whether a request refused with the token of `generation` needs a new
/// token, given the token now in use: not when another request has
/// already got one since.
fn stale(current: Option<&Token>, generation: Option<u64>) -> bool {
    match (current, generation) {
        (None, _) => true,
        (Some(current), Some(sent)) => current.generation <= sent,
        (Some(_), None) => false,
    }
}

/// A request with the token, if any, in its metadata.
fn request<M>(message: M, token: Option<&Token>) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = token.and_then(|token| token.value.clone()) {
        request.metadata_mut().insert(TOKEN_METADATA, value);
    }
    request
}

/// One connection pool to an etcd cluster: a channel balanced over every
/// member, which sends each request to a member it is connected to and
/// leaves out a member while it cannot connect. Cheap to clone; the clones
/// share the connections, and etcd's TLS files (SPEC.md §14.5).
#[derive(Clone, Debug)]
pub struct Client {
    /// `None` without credentials: etcd knows this client by its
    /// certificate's common name, or has authentication off.
    authentication: Option<Arc<Authentication>>,
    connection: Arc<Connection>,
}

/// Why a client cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// An endpoint that is not a URL, or none at all.
    #[error("{0}")]
    Endpoints(String),
    /// One of etcd's TLS files cannot be used.
    #[error(transparent)]
    Tls(#[from] EtcdTlsError),
}

/// The channel to etcd's members and what it is made of: the members, and
/// etcd's TLS files, read again before a request once they are
/// `TLS_RELOAD_INTERVAL` old (SPEC.md §14.5). A set of files that changed
/// and loads makes a new channel, which connects when its first request
/// goes out: new connections use the new files. The old channel is
/// dropped, but the connections of the streams and requests open on it
/// (a watch, a lease's renewals) live until they end.
#[derive(Debug)]
struct Connection {
    endpoints: Vec<String>,
    timeout: Duration,
    /// `None` when no member is reached over TLS: nothing to read again.
    files: Option<EtcdTls>,
    state: Mutex<ConnectionState>,
}

#[derive(Debug)]
struct ConnectionState {
    channel: Channel,
    /// When the files are read again, and what the channel's set was
    /// loaded from; `None` without TLS files.
    reload: Option<(Schedule, Reload<Contents>)>,
}

/// The members at `endpoints`, each with `timeout` for its requests and
/// its connections, and with `tls` for those reached over `https://`.
fn members(
    endpoints: &[String],
    tls: Option<&ClientTlsConfig>,
    timeout: Duration,
) -> Result<Vec<Endpoint>, String> {
    let mut members = Vec::with_capacity(endpoints.len());
    for url in endpoints {
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|error| format!("{url:?} is not an etcd endpoint URL: {error}"))?
            .timeout(timeout)
            .connect_timeout(timeout);
        if url.starts_with("https://") {
            let Some(tls) = tls else {
                return Err(format!("{url} needs TLS certificates"));
            };
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|error| format!("cannot use the TLS files for {url}: {error}"))?;
        }
        members.push(endpoint);
    }
    Ok(members)
}

impl Connection {
    /// The channel for a request: the one in use, or a new one when
    /// etcd's TLS files are due to be read and changed and load. A set
    /// that does not load is logged once per change of the files, and the
    /// channel in use stays (SPEC.md §14.5).
    fn channel(&self, now: Instant) -> Channel {
        // A panic while the lock was held cannot leave the state half
        // changed: each field is replaced whole.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ConnectionState { channel, reload } = &mut *state;
        if let (Some(files), Some((schedule, reload))) = (&self.files, reload)
            && schedule.due(now)
        {
            let decision = reload.decide(Contents::read(files), |read| {
                let config = tls::load(files, read).map_err(|error| error.to_string())?;
                members(&self.endpoints, Some(&config), self.timeout)
            });
            match decision {
                Decision::Replace(members) => {
                    info!(
                        ca = %files.ca.display(),
                        "etcd's TLS files changed; new connections to etcd use them (SPEC.md §14.5)"
                    );
                    *channel = Channel::balance_list(members.into_iter());
                }
                Decision::Report(problem) => {
                    error!(
                        "{problem}. The etcd TLS files in use before stay in use until the files load (SPEC.md §14.5)"
                    );
                }
                Decision::Unchanged | Decision::Reported => {}
            }
        }
        channel.clone()
    }
}

impl Client {
    /// A client of the members at `endpoints` (`http://host:port` or
    /// `https://host:port`), without TLS files: for members reached over
    /// `http://`. See [`Client::connect_with`].
    pub fn connect(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
        timeout: Duration,
    ) -> Result<Client, String> {
        Client::connect_with(endpoints, tls, timeout).map_err(|error| error.to_string())
    }

    /// A client of the members at `endpoints` (`http://host:port` or
    /// `https://host:port`; TLS with the files `tls` for the latter, read
    /// now and again while the client lives, SPEC.md §14.5). Connects
    /// lazily: this fails only on an endpoint that is not a URL or on
    /// unusable certificates, and a member that cannot be reached fails the
    /// requests instead. `timeout` bounds each request and each connection
    /// attempt. Must be called within a tokio runtime, which runs the
    /// channel's connections from then on; a channel made again for new
    /// files runs on the runtime of the request that made it.
    pub fn connect_with(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
        timeout: Duration,
    ) -> Result<Client, ConnectError> {
        if endpoints.is_empty() {
            return Err(ConnectError::Endpoints("no endpoint was given".to_owned()));
        }
        let files = tls
            .filter(|_| endpoints.iter().any(|url| url.starts_with("https://")))
            .cloned();
        let (config, reload) = match &files {
            Some(files) => {
                let contents = Contents::read(files);
                let config = tls::load(files, &contents)?;
                let reload = (Schedule::new(Instant::now()), Reload::new(contents));
                (Some(config), Some(reload))
            }
            None => (None, None),
        };
        let members =
            members(endpoints, config.as_ref(), timeout).map_err(ConnectError::Endpoints)?;
        Ok(Client {
            authentication: None,
            connection: Arc::new(Connection {
                endpoints: endpoints.to_vec(),
                timeout,
                files,
                state: Mutex::new(ConnectionState {
                    channel: Channel::balance_list(members.into_iter()),
                    reload,
                }),
            }),
        })
    }

    /// The channel for a request (SPEC.md §14.5: etcd's TLS files are read
    /// again here when they are due).
    fn channel(&self) -> Channel {
        self.connection.channel(Instant::now())
    }

    /// This client authenticates as `credentials`' user, and sends its
    /// token with every request from now on (SPEC.md §14.9).
    pub fn authenticated_as(mut self, credentials: Credentials) -> Client {
        self.authentication = Some(Arc::new(Authentication {
            credentials,
            token: Mutex::new(None),
            asking: tokio::sync::Mutex::new(()),
        }));
        self
    }

    /// Asks etcd for a token now, rather than at the first request: a
    /// wrong password fails here. Nothing to do without credentials.
    pub async fn authenticate(&self) -> Result<(), Status> {
        self.token().await.map(drop)
    }

    /// The token to send: the one in use, or a new one when there is none
    /// yet; `None` without credentials.
    async fn token(&self) -> Result<Option<Token>, Status> {
        let Some(authentication) = &self.authentication else {
            return Ok(None);
        };
        let current = authentication.token.lock().expect("never poisoned").clone();
        match current {
            Some(token) => Ok(Some(token)),
            None => self.new_token(None).await.map(Some),
        }
    }

    /// A new token in place of the one of `generation` that etcd refused
    /// (`None`: none was sent), unless another request has got one since.
    async fn new_token(&self, generation: Option<u64>) -> Result<Token, Status> {
        let authentication = self
            .authentication
            .as_ref()
            .expect("only a client with credentials asks for a token");
        let _asking = authentication.asking.lock().await;
        let current = authentication.token.lock().expect("never poisoned").clone();
        if let Some(current) = current
            .as_ref()
            .filter(|current| !stale(Some(current), generation))
        {
            return Ok(current.clone());
        }
        let credentials = &authentication.credentials;
        let asked = pb::AuthenticateRequest {
            name: credentials.user.clone(),
            password: credentials.password.clone(),
        };
        let value = match AuthClient::new(self.channel()).authenticate(asked).await {
            Ok(answer) => {
                let token = answer.into_inner().token;
                Some(MetadataValue::try_from(token.as_str()).map_err(|_| {
                    Status::internal("etcd answered a token that is not printable ASCII")
                })?)
            }
            // As etcd's own client does: a user given to an etcd without
            // authentication is not an error, so that clients can be given
            // their users before `etcdctl auth enable`; once it is on, the
            // requests are refused ("user name is empty") and a token is
            // asked for again.
            Err(status)
                if status.code() == Code::FailedPrecondition
                    && status.message().contains("authentication is not enabled") =>
            {
                info!(user = %credentials.user, "etcd has authentication off; sending requests without a token until it is on");
                None
            }
            Err(status) => return Err(status),
        };
        let generation = current.map_or(1, |current| current.generation + 1);
        debug!(user = %credentials.user, generation, "etcd gave a token");
        let token = Token { value, generation };
        *authentication.token.lock().expect("never poisoned") = Some(token.clone());
        Ok(token)
    }

    /// Makes a request with the token, and once more with a new token
    /// when etcd refuses that one (SPEC.md §14.9): an expired token
    /// fails no request.
    async fn with_token<T, F, Fut>(&self, attempt: F) -> Result<T, Status>
    where
        F: Fn(Option<Token>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let token = self.token().await?;
        match attempt(token.clone()).await {
            Err(status) if self.authentication.is_some() && token_refused(&status) => {
                debug!(error = %describe(&status), "etcd refused the token; asking for a new one");
                let token = self.new_token(token.map(|token| token.generation)).await?;
                attempt(Some(token)).await
            }
            other => other,
        }
    }

    /// The key's value and revisions, if it exists, in `kvs`.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<RangeResponse, Status> {
        self.range(key.into(), Vec::new()).await
    }

    /// Every key that starts with `prefix`.
    pub async fn get_prefix(&self, prefix: impl Into<Vec<u8>>) -> Result<RangeResponse, Status> {
        let key = prefix.into();
        let range_end = prefix_end(&key);
        self.range(key, range_end).await
    }

    /// The keys from `key` up to `range_end`, which is not one of them;
    /// `key` alone when `range_end` is empty (etcd's convention).
    async fn range(&self, key: Vec<u8>, range_end: Vec<u8>) -> Result<RangeResponse, Status> {
        let message = pb::RangeRequest {
            key,
            range_end,
            ..Default::default()
        };
        self.with_token(|token| {
            let mut kv = KvClient::new(self.channel());
            let request = request(message.clone(), token.as_ref());
            async move { Ok(kv.range(request).await?.into_inner()) }
        })
        .await
    }

    /// Writes a key, under `lease` unless it is 0.
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<(), Status> {
        let message = pb::PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
            ..Default::default()
        };
        self.with_token(|token| {
            let mut kv = KvClient::new(self.channel());
            let request = request(message.clone(), token.as_ref());
            async move { kv.put(request).await.map(drop) }
        })
        .await
    }

    /// A transaction: `success` if every comparison holds, else `failure`.
    pub async fn txn(&self, message: TxnRequest) -> Result<TxnResponse, Status> {
        self.with_token(|token| {
            let mut kv = KvClient::new(self.channel());
            let request = request(message.clone(), token.as_ref());
            async move { Ok(kv.txn(request).await?.into_inner()) }
        })
        .await
    }

    /// A new lease of `ttl` seconds: its ID and the TTL etcd granted.
    pub async fn lease_grant(&self, ttl: i64) -> Result<(i64, i64), Status> {
        let message = pb::LeaseGrantRequest { ttl, id: 0 };
        let granted = self
            .with_token(|token| {
                let mut lease = LeaseClient::new(self.channel());
                let request = request(message, token.as_ref());
                async move { Ok(lease.lease_grant(request).await?.into_inner()) }
            })
            .await?;
        if !granted.error.is_empty() {
            return Err(Status::unknown(granted.error));
        }
        Ok((granted.id, granted.ttl))
    }

    /// Ends a lease and removes every key written under it.
    pub async fn lease_revoke(&self, id: i64) -> Result<(), Status> {
        let message = pb::LeaseRevokeRequest { id };
        self.with_token(|token| {
            let mut lease = LeaseClient::new(self.channel());
            let request = request(message, token.as_ref());
            async move { lease.lease_revoke(request).await.map(drop) }
        })
        .await
    }

    /// A stream of renewals of one lease ([`KeepAlive::renew`]), opened
    /// with a first renewal: etcd sends a stream's headers with its first
    /// answer, so the stream is not open until a request has gone out. With
    /// the TTL that first renewal got. Fails with `NOT_FOUND` when etcd says
    /// that the lease has expired.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<(KeepAlive, i64), Status> {
        self.with_token(|token| self.open_keep_alive(id, token))
            .await
    }

    async fn open_keep_alive(
        &self,
        id: i64,
        token: Option<Token>,
    ) -> Result<(KeepAlive, i64), Status> {
        let (requests, queue) = mpsc::channel(STREAM_QUEUE);
        // The queue is empty and its receiver alive: this cannot fail.
        let _ = requests.try_send(pb::LeaseKeepAliveRequest { id });
        let mut answers = LeaseClient::new(self.channel())
            .lease_keep_alive(request(ReceiverStream::new(queue), token.as_ref()))
            .await?
            .into_inner();
        match answers.message().await? {
            Some(first) if first.ttl > 0 => Ok((
                KeepAlive {
                    id,
                    requests,
                    answers,
                },
                first.ttl,
            )),
            Some(_) => Err(Status::not_found("etcd says the lease has expired")),
            None => Err(Status::unavailable("etcd ended the renewals' stream")),
        }
    }

    /// Watches one key's changes from `start_revision` on (0: from now).
    /// Waits for etcd to say that the watch is created, so that a watch
    /// refused for its token is made again with a new one (SPEC.md §14.9).
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        start_revision: i64,
    ) -> Result<Watch, Status> {
        let key = key.into();
        let token = self.token().await?;
        let opened = self.open_watch(&key, start_revision, token.as_ref()).await;
        let refused = match opened {
            Ok(Opened::Watching(watch)) => return Ok(*watch),
            Ok(Opened::Canceled(status))
                if self.authentication.is_some() && token_refused(&status) =>
            {
                describe(&status)
            }
            Ok(Opened::Canceled(status)) => return Err(status),
            Err(status) if self.authentication.is_some() && token_refused(&status) => {
                describe(&status)
            }
            Err(status) => return Err(status),
        };
        debug!(reason = %refused, "etcd refused a watch; asking for a new token");
        let token = self.new_token(token.map(|token| token.generation)).await?;
        match self.open_watch(&key, start_revision, Some(&token)).await? {
            Opened::Watching(watch) => Ok(*watch),
            Opened::Canceled(status) => Err(status),
        }
    }

    async fn open_watch(
        &self,
        key: &[u8],
        start_revision: i64,
        token: Option<&Token>,
    ) -> Result<Opened, Status> {
        let (requests, queue) = mpsc::channel(STREAM_QUEUE);
        let create = pb::WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key: key.to_vec(),
                    start_revision,
                    ..Default::default()
                },
            )),
        };
        // The queue is empty and its receiver alive: this cannot fail. Sent
        // before the stream opens, as etcd sends the headers with its first
        // answer.
        let _ = requests.try_send(create);
        let mut answers = WatchClient::new(self.channel())
            .watch(request(ReceiverStream::new(queue), token))
            .await?
            .into_inner();
        let first = answers.message().await?;
        let first = match first {
            Some(first) if first.created && first.canceled => {
                if let Some(status) = refusal_of_watch(&first.cancel_reason) {
                    return Ok(Opened::Canceled(status));
                }
                Some(first)
            }
            // The creation's own answer carries no change: it is not kept.
            Some(first) if first.created && !first.canceled && first.events.is_empty() => None,
            // A cancellation for another reason (a compacted revision), or
            // changes: the caller reads them first.
            Some(first) => Some(first),
            None => return Err(Status::unavailable("etcd ended the watch's stream")),
        };
        Ok(Opened::Watching(Box::new(Watch {
            _requests: requests,
            first,
            answers,
        })))
    }

    /// etcd's own lock (its `v3lock` service): waits until this caller holds
    /// the lock `name` under `lease`, and returns the key to unlock it with.
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn lock(&self, name: impl Into<Vec<u8>>, lease: i64) -> Result<Vec<u8>, Status> {
        let request = v3lockpb::LockRequest {
            name: name.into(),
            lease,
        };
        Ok(LockClient::new(self.channel())
            .lock(request)
            .await?
            .into_inner()
            .key)
    }

    /// Releases a lock that [`Client::lock`] took.
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn unlock(&self, key: Vec<u8>) -> Result<(), Status> {
        LockClient::new(self.channel())
            .unlock(v3lockpb::UnlockRequest { key })
            .await?;
        Ok(())
    }

    /// The answering member's status: its ID (in the header) and the
    /// leader's, as it knows them.
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn status(&self) -> Result<StatusResponse, Status> {
        let request = pb::StatusRequest {};
        Ok(MaintenanceClient::new(self.channel())
            .status(request)
            .await?
            .into_inner())
    }
}

/// A failed request in words for a person: what gRPC's code means, and
/// etcd's or the transport's message ("The service is currently
/// unavailable: tcp connect error: Connection refused").
pub fn describe(status: &Status) -> String {
    let meaning = status.code().description();
    match status.message() {
        "" => meaning.to_owned(),
        message => format!("{meaning}: {message}"),
    }
}

/// The end of the range of every key that starts with `prefix`: the prefix
/// with its last byte below 0xff raised by one (etcd's convention; `\0`,
/// every key, for a prefix of 0xff bytes only).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The renewals of one lease over one stream.
#[derive(Debug)]
pub struct KeepAlive {
    id: i64,
    requests: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    answers: tonic::Streaming<LeaseKeepAliveResponse>,
}

impl KeepAlive {
    /// Sends a renewal without waiting for its answer; false when the
    /// stream's queue is full or the stream is gone.
    pub fn send(&self) -> bool {
        self.requests
            .try_send(pb::LeaseKeepAliveRequest { id: self.id })
            .is_ok()
    }

    /// The next answer, in the order of the renewals: a TTL of 0 or less
    /// once the lease has expired; `None` when etcd ended the stream.
    pub async fn answer(&mut self) -> Result<Option<LeaseKeepAliveResponse>, Status> {
        self.answers.message().await
    }
}

/// The refusal of a watch that etcd canceled at its creation, in the
/// words of its reason: etcd 3.4 cancels a watch whose stream's token has
/// expired with "rpc error: code = Unauthenticated desc = etcdserver:
/// invalid auth token", and one the user may not read with "etcdserver:
/// permission denied" (SPEC.md §14.9). `None` for another reason (a
/// compacted revision), which the watch's reader sees.
fn refusal_of_watch(cancel_reason: &str) -> Option<Status> {
    if cancel_reason.contains("invalid auth token") {
        Some(Status::unauthenticated(cancel_reason))
    } else if cancel_reason.contains("permission denied") {
        Some(Status::permission_denied(cancel_reason))
    } else {
        None
    }
}

/// What etcd said of a watch's creation.
enum Opened {
    Watching(Box<Watch>),
    /// Canceled at once: refused for its token or its permission.
    Canceled(Status),
}

/// The changes of a watched key. The watch lasts as long as this value:
/// dropping it ends the request stream, and etcd ends the watch.
#[derive(Debug)]
pub struct Watch {
    _requests: mpsc::Sender<pb::WatchRequest>,
    /// An answer that came with the creation's and is still to be read.
    first: Option<WatchResponse>,
    answers: tonic::Streaming<WatchResponse>,
}

impl Watch {
    /// The next batch of changes, or `None` when etcd ended the watch.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Status> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        self.answers.message().await
    }
}

/// A comparison of a key's create revision (0: the key does not exist).
pub fn create_revision_is(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal.into(),
        target: compare::CompareTarget::Create.into(),
        key: key.into(),
        target_union: Some(compare::TargetUnion::CreateRevision(revision)),
    }
}

/// A comparison of a key's last modification's revision (0: it does not
/// exist).
pub fn mod_revision_is(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal.into(),
        target: compare::CompareTarget::Mod.into(),
        key: key.into(),
        target_union: Some(compare::TargetUnion::ModRevision(revision)),
    }
}

/// A put in a transaction, under `lease` unless it is 0.
pub fn put_op(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(pb::PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
            ..Default::default()
        })),
    }
}

/// A read of one key in a transaction.
pub fn range_op(key: impl Into<Vec<u8>>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(pb::RangeRequest {
            key: key.into(),
            ..Default::default()
        })),
    }
}

/// A delete of one key in a transaction, whose answer says whether the key
/// existed.
pub fn delete_op(key: impl Into<Vec<u8>>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestDeleteRange(
            pb::DeleteRangeRequest {
                key: key.into(),
                ..Default::default()
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_last_byte_below_ff_is_raised() {
        assert_eq!(prefix_end(b"a/b"), b"a/c");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    /// §14.9: what etcd 3.4 answers for an expired or unknown token, a
    /// token older than a change of roles, and a missing one ask for a new
    /// token; a wrong password or a missing permission do not.
    #[test]
    fn a_new_token_is_asked_for_only_when_etcd_refused_the_token() {
        for refused in [
            Status::unauthenticated("etcdserver: invalid auth token"),
            Status::invalid_argument("etcdserver: revision of auth store is old"),
            Status::invalid_argument("etcdserver: user name is empty"),
        ] {
            assert!(token_refused(&refused), "{refused:?}");
        }
        for other in [
            Status::invalid_argument(
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            Status::permission_denied("etcdserver: permission denied"),
            Status::unavailable("etcdserver: request timed out"),
            Status::invalid_argument("etcdserver: key is not provided"),
        ] {
            assert!(!token_refused(&other), "{other:?}");
        }
    }

    /// §14.9: of the requests refused for one token, the first gets a new
    /// token and the others use it.
    #[test]
    fn one_refused_token_is_replaced_once() {
        let token = |generation| Token {
            value: None,
            generation,
        };
        assert!(stale(None, None), "no token yet");
        assert!(stale(None, Some(3)), "no token yet");
        assert!(
            stale(Some(&token(3)), Some(3)),
            "the refused token is in use"
        );
        assert!(
            !stale(Some(&token(4)), Some(3)),
            "another request replaced it"
        );
        assert!(
            !stale(Some(&token(1)), None),
            "a first token came meanwhile"
        );
    }

    /// §14.9: the reasons etcd 3.4 gives for canceling a watch at its
    /// creation, as seen: an expired token asks for a new one; a missing
    /// permission is refused; a compacted revision is the reader's.
    #[test]
    fn a_watch_canceled_for_its_token_asks_for_a_new_one() {
        let expired = refusal_of_watch(
            "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token",
        )
        .unwrap();
        assert!(token_refused(&expired));
        let denied = refusal_of_watch("etcdserver: permission denied").unwrap();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert!(!token_refused(&denied));
        assert!(refusal_of_watch("mvcc: required revision has been compacted").is_none());
    }

    /// The password never shows in a log of the credentials.
    #[test]
    fn credentials_show_their_user_only() {
        let credentials = Credentials {
            user: "alice".to_owned(),
            password: "s3cret".to_owned(),
        };
        let shown = format!("{credentials:?}");
        assert!(
            shown.contains("alice") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
