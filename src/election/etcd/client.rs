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
//! connection, TLS with a CA and a client identity through tonic's rustls),
//! and the election's retries across members stay in `super`.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::proto::etcdserverpb::{
    self as pb, compare, kv_client::KvClient, lease_client::LeaseClient,
    maintenance_client::MaintenanceClient, request_op, watch_client::WatchClient, watch_request,
};
use super::proto::v3lockpb::lock_client::LockClient;
#[cfg(feature = "_internal")]
use super::proto::v3lockpb;

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

/// The certificates for `https://` members: the CA that signed theirs, and
/// this process's certificate and key, all PEM.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

/// One connection pool to an etcd cluster: a channel balanced over every
/// member, which sends each request to a member it is connected to and
/// leaves out a member while it cannot connect. Cheap to clone; the clones
/// share the connections.
#[derive(Clone, Debug)]
pub struct Client {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    watch: WatchClient<Channel>,
    #[cfg_attr(not(feature = "_internal"), allow(dead_code))]
    lock: LockClient<Channel>,
    #[cfg_attr(not(feature = "_internal"), allow(dead_code))]
    maintenance: MaintenanceClient<Channel>,
}

impl Client {
    /// A client of the members at `endpoints` (`http://host:port` or
    /// `https://host:port`; TLS for the latter). Connects lazily: this fails
    /// only on an endpoint that is not a URL or on unusable certificates,
    /// and a member that cannot be reached fails the requests instead.
    /// `timeout` bounds each request and each connection attempt. Must be
    /// called within a tokio runtime, which runs the channel's connections
    /// from then on.
    pub fn connect(
        endpoints: &[String],
        tls: Option<&TlsFiles>,
        timeout: Duration,
    ) -> Result<Client, String> {
        if endpoints.is_empty() {
            return Err("no endpoint was given".to_owned());
        }
        let tls = tls.map(|files| {
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&files.ca))
                .identity(Identity::from_pem(&files.cert, &files.key))
        });
        let mut members = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|error| format!("{url:?} is not an etcd endpoint URL: {error}"))?
                .timeout(timeout)
                .connect_timeout(timeout);
            if url.starts_with("https://") {
                let Some(tls) = &tls else {
                    return Err(format!("{url} needs TLS certificates"));
                };
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|error| format!("cannot use the TLS files for {url}: {error}"))?;
            }
            members.push(endpoint);
        }
        let channel = Channel::balance_list(members.into_iter());
        Ok(Client {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel.clone()),
            watch: WatchClient::new(channel.clone()),
            lock: LockClient::new(channel.clone()),
            maintenance: MaintenanceClient::new(channel),
        })
    }

    /// The key's value and revisions, if it exists, in `kvs`.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<RangeResponse, Status> {
        let request = pb::RangeRequest {
            key: key.into(),
            ..Default::default()
        };
        Ok(self.kv.clone().range(request).await?.into_inner())
    }

    /// Every key that starts with `prefix`.
    pub async fn get_prefix(&self, prefix: impl Into<Vec<u8>>) -> Result<RangeResponse, Status> {
        let key = prefix.into();
        let request = pb::RangeRequest {
            range_end: prefix_end(&key),
            key,
            ..Default::default()
        };
        Ok(self.kv.clone().range(request).await?.into_inner())
    }

    /// Writes a key, under `lease` unless it is 0.
#[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<(), Status> {
        let request = pb::PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
            ..Default::default()
        };
        self.kv.clone().put(request).await?;
        Ok(())
    }

    /// A transaction: `success` if every comparison holds, else `failure`.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        Ok(self.kv.clone().txn(request).await?.into_inner())
    }

    /// A new lease of `ttl` seconds: its ID and the TTL etcd granted.
    pub async fn lease_grant(&self, ttl: i64) -> Result<(i64, i64), Status> {
        let request = pb::LeaseGrantRequest { ttl, id: 0 };
        let granted = self.lease.clone().lease_grant(request).await?.into_inner();
        if !granted.error.is_empty() {
            return Err(Status::unknown(granted.error));
        }
        Ok((granted.id, granted.ttl))
    }

    /// Ends a lease and removes every key written under it.
    pub async fn lease_revoke(&self, id: i64) -> Result<(), Status> {
        let request = pb::LeaseRevokeRequest { id };
        self.lease.clone().lease_revoke(request).await?;
        Ok(())
    }

    /// A stream of renewals of one lease ([`KeepAlive::renew`]), opened
    /// with a first renewal: etcd sends a stream's headers with its first
    /// answer, so the stream is not open until a request has gone out. With
    /// the TTL that first renewal got. Fails with `NOT_FOUND` when etcd says
    /// that the lease has expired.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<(KeepAlive, i64), Status> {
        let (requests, queue) = mpsc::channel(STREAM_QUEUE);
        // The queue is empty and its receiver alive: this cannot fail.
        let _ = requests.try_send(pb::LeaseKeepAliveRequest { id });
        let mut answers = self
            .lease
            .clone()
            .lease_keep_alive(ReceiverStream::new(queue))
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
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        start_revision: i64,
    ) -> Result<Watch, Status> {
        let (requests, queue) = mpsc::channel(STREAM_QUEUE);
        let create = pb::WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key: key.into(),
                    start_revision,
                    ..Default::default()
                },
            )),
        };
        // The queue is empty and its receiver alive: this cannot fail. Sent
        // before the stream opens, as etcd sends the headers with its first
        // answer.
        let _ = requests.try_send(create);
        let answers = self
            .watch
            .clone()
            .watch(ReceiverStream::new(queue))
            .await?
            .into_inner();
        Ok(Watch {
            _requests: requests,
            answers,
        })
    }

    /// etcd's own lock (its `v3lock` service): waits until this caller holds
    /// the lock `name` under `lease`, and returns the key to unlock it with.
#[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn lock(&self, name: impl Into<Vec<u8>>, lease: i64) -> Result<Vec<u8>, Status> {
        let request = v3lockpb::LockRequest {
            name: name.into(),
            lease,
        };
        Ok(self.lock.clone().lock(request).await?.into_inner().key)
    }

    /// Releases a lock that [`Client::lock`] took.
#[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn unlock(&self, key: Vec<u8>) -> Result<(), Status> {
        self.lock
            .clone()
            .unlock(v3lockpb::UnlockRequest { key })
            .await?;
        Ok(())
    }

    /// The answering member's status: its ID (in the header) and the
    /// leader's, as it knows them.
#[cfg(feature = "_internal")] // for the tests and harnesses only
    pub async fn status(&self) -> Result<StatusResponse, Status> {
        let request = pb::StatusRequest {};
        Ok(self.maintenance.clone().status(request).await?.into_inner())
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

/// The changes of a watched key. The watch lasts as long as this value:
/// dropping it ends the request stream, and etcd ends the watch.
#[derive(Debug)]
pub struct Watch {
    _requests: mpsc::Sender<pb::WatchRequest>,
    answers: tonic::Streaming<WatchResponse>,
}

impl Watch {
    /// The next batch of changes, or `None` when etcd ended the watch.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Status> {
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
}
