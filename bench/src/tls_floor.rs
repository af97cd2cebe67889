//! The floor of a cluster call: one small line each way between two hosts
//! over an established TCP connection with mutual TLS 1.3, with blocking
//! reads and writes and no parsing. The rustls configuration is the
//! library's own (TLS 1.3 only, ring, a client certificate required and
//! checked against the cluster's CA, the server's checked for its address,
//! no resumption), loaded from the same files by the same code, so that the
//! floor's TLS is exactly a cluster connection's and cannot drift from it.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;

use single_flight::_internal::TlsConfigs;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{
    ClientConfig, ClientConnection, ServerConfig, ServerConnection, StreamOwned,
};

use crate::floor::{ANSWER, REQUEST, Timed};
use crate::lab::Lab;
use crate::process::say;

/// Where the echo end listens on its host (a namespace of the lab's own,
/// so the port is free there).
const PORT: u16 = 7400;

/// The longest line either end reads: both lines are under 64 bytes.
const LINE_BYTES: usize = 128;

/// `pings` timed round trips from host 1 to host 0: their median, and the
/// CPU time per round trip of both ends (the hosts share this machine's
/// process ids, so the pinger reads the echo's CPU time itself).
pub fn measure(lab: &Lab, pings: usize) -> Timed {
    let address = SocketAddr::new(lab.address(0), PORT).to_string();
    let certs = lab.certs();
    let certs = certs.to_str().expect("a UTF-8 temp dir");
    let echo =
        crate::process::Worker::start(lab.command(0), &["tls-echo", &address, certs]).ready();
    let ping = crate::process::Worker::start(
        lab.command(1),
        &[
            "tls-ping",
            &address,
            certs,
            &pings.to_string(),
            &echo.pid().to_string(),
        ],
    );
    Timed::parse(&ping.expect("result"))
}

/// Both ends' configurations from the lab's files, as the library loads
/// them: each end presents the process certificate, as every process of a
/// cluster does.
fn configs(certs: &Path) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let configs = TlsConfigs::load(
        &certs.join("ca.pem"),
        &certs.join("server.pem"),
        &certs.join("server.key"),
    )
    .expect("the lab's certificates");
    (configs.server, configs.client)
}

/// Reads one line (up to its newline) into `line`; `false` at the end.
fn read_line(stream: &mut impl Read, line: &mut Vec<u8>) -> bool {
    line.clear();
    let mut buffer = [0u8; LINE_BYTES];
    while !line.ends_with(b"\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return false,
            Ok(read) => line.extend_from_slice(&buffer[..read]),
        }
        assert!(line.len() <= LINE_BYTES, "a line of the floor is short");
    }
    true
}

/// `worker tls-echo ADDRESS CERTS`: accepts one connection, completes the
/// handshake, and answers each line with one line until it closes.
pub fn echo(address: &str, certs: &str) {
    let (server, _) = configs(Path::new(certs));
    let listener = TcpListener::bind(address).expect("bind the floor's port");
    say("READY");
    let (socket, _) = listener.accept().expect("the pinger connects");
    socket.set_nodelay(true).expect("TCP_NODELAY");
    let connection = ServerConnection::new(server).expect("a TLS server connection");
    let mut stream = StreamOwned::new(connection, socket);
    let mut line = Vec::with_capacity(LINE_BYTES);
    while read_line(&mut stream, &mut line) {
        if stream
            .write_all(ANSWER)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
}

/// `worker tls-ping ADDRESS CERTS PINGS ECHO_PID`: connects, completes the
/// handshake, and prints `result MEDIAN_NS CPU_NS` of PINGS timed round
/// trips, the CPU time per round trip its own and the echo's.
pub fn ping(address: &str, certs: &str, pings: &str, echo: &str) {
    let pings: usize = pings.parse().expect("a number of pings");
    let echo: u32 = echo.parse().expect("the echo's process id");
    let (_, client) = configs(Path::new(certs));
    let target: SocketAddr = address.parse().expect("an address");
    let socket = TcpStream::connect(target).expect("connect to the echo");
    socket.set_nodelay(true).expect("TCP_NODELAY");
    let name = ServerName::IpAddress(match target.ip() {
        IpAddr::V4(ip) => ip.into(),
        IpAddr::V6(ip) => ip.into(),
    });
    let connection = ClientConnection::new(client, name).expect("a TLS client connection");
    let mut stream = StreamOwned::new(connection, socket);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("the TLS handshake");
    }
    let mut line = Vec::with_capacity(LINE_BYTES);
    let timed = crate::floor::timed(pings, Some(echo), || {
        stream
            .write_all(REQUEST)
            .and_then(|()| stream.flush())
            .expect("the echo reads");
        assert!(read_line(&mut stream, &mut line), "the echo answers");
        assert_eq!(line, ANSWER, "the echo's answer");
    });
    say(format!("result {}", timed.show()));
}

/// `worker tls-clients ADDRESS CERTS N`: opens N connections to the
/// coordinator at ADDRESS, each through the TLS handshake and the hello
/// (SPEC.md §4.2), says `READY`, and holds them idle until its stdin
/// closes (`crate::memory`).
pub fn clients(address: &str, certs: &str, count: &str) {
    let count: usize = count.parse().expect("a number of clients");
    if let Err(reason) = crate::memory::allow_descriptors(count) {
        panic!("{reason}");
    }
    let (_, client) = configs(Path::new(certs));
    let target: SocketAddr = address.parse().expect("an address");
    let name = ServerName::IpAddress(match target.ip() {
        IpAddr::V4(ip) => ip.into(),
        IpAddr::V6(ip) => ip.into(),
    });
    let streams: Vec<_> = (0..count)
        .map(|_| {
            let socket = TcpStream::connect(target).expect("connect to the coordinator");
            socket.set_nodelay(true).expect("TCP_NODELAY");
            let connection =
                ClientConnection::new(client.clone(), name.clone()).expect("a TLS connection");
            let mut stream = StreamOwned::new(connection, socket);
            stream
                .write_all(crate::memory::HELLO)
                .and_then(|()| stream.flush())
                .expect("the hello is sent");
            crate::memory::read_hello(&mut stream).expect("the coordinator's hello");
            stream
        })
        .collect();
    say("READY");
    let lines = crate::process::stdin_lines();
    while lines.recv().is_ok() {}
    drop(streams);
}
