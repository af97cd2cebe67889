//! The Redis baseline: a lock with `SET key NX PX`, the leader `PUBLISH`es
//! the result, waiters `SUBSCRIBE` before they re-check. RESP2 spoken over a
//! plain TCP socket to a `redis-server` on loopback, which this module can
//! start itself.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::wall_nanos;

/// How long a leader's lock lives if the leader dies: far longer than any
/// work here, so that it expires only after a crash.
const LOCK_MILLISECONDS: &str = "10000";

/// How long a started `redis-server` may take to answer: it starts in
/// milliseconds; a loaded machine takes longer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a waiter listens for the result before it tries the lock again
/// (the leader may have died; its lock then expires).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Releases the lock only if it is still this caller's: the standard
/// pattern, so that a leader whose lock expired cannot release another's.
const UNLOCK_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// A reply of RESP2.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// One connection to Redis.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    out: Vec<u8>,
}

impl Connection {
    pub fn open(address: &str) -> io::Result<Connection> {
        let stream = TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            out: Vec::with_capacity(256),
        })
    }

    /// Queues one command (sent by [`flush`](Self::flush)).
    pub fn queue(&mut self, args: &[&[u8]]) {
        self.out
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            self.out
                .extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// One command and its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.queue(args);
        self.flush()?;
        self.reply()
    }

    pub fn reply(&mut self) -> io::Result<Reply> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if line.len() < 3 || !line.ends_with(b"\r\n") {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "Redis closed the connection",
            ));
        }
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let number = || {
            text.parse::<i64>()
                .map_err(|_| io::Error::other(format!("not a RESP number: {text:?}")))
        };
        Ok(match line[0] {
            b'+' => Reply::Simple(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Integer(number()?),
            b'$' => match number()? {
                -1 => Reply::Bulk(None),
                length => {
                    let mut data = vec![0; length as usize + 2];
                    io::Read::read_exact(&mut self.reader, &mut data)?;
                    data.truncate(length as usize);
                    Reply::Bulk(Some(data))
                }
            },
            b'*' => match number()? {
                -1 => Reply::Array(None),
                count => {
                    let mut items = Vec::with_capacity(count as usize);
                    for _ in 0..count {
                        items.push(self.reply()?);
                    }
                    Reply::Array(Some(items))
                }
            },
            other => {
                return Err(io::Error::other(format!(
                    "not a RESP reply: {:?}",
                    other as char
                )));
            }
        })
    }

    /// The next reply if one starts within `wait`.
    pub fn reply_within(&mut self, wait: Duration) -> io::Result<Option<Reply>> {
        if self.reader.buffer().is_empty() {
            self.writer.set_read_timeout(Some(wait))?;
            let filled = self.reader.fill_buf().map(|b| b.len());
            self.writer.set_read_timeout(None)?;
            match filled {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "Redis closed the connection",
                    ));
                }
                Ok(_) => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(error) => return Err(error),
            }
        }
        self.reply().map(Some)
    }
}

/// A caller of the Redis baseline for one key: a connection for commands
/// and one subscribed to the key's channel. The subscription is kept across
/// calls (subscribing before every re-check would cost a round trip more).
pub struct Caller {
    commands: Connection,
    subscription: Connection,
    lock: String,
    result: String,
    channel: String,
    owner: String,
}

impl Caller {
    pub fn new(address: &str, key: &str, owner: String) -> io::Result<Caller> {
        let commands = Connection::open(address)?;
        let mut subscription = Connection::open(address)?;
        let channel = format!("{key}:done");
        match subscription.command(&[b"SUBSCRIBE", channel.as_bytes()])? {
            Reply::Array(Some(items)) if items.len() == 3 => {}
            other => return Err(io::Error::other(format!("SUBSCRIBE answered {other:?}"))),
        }
        Ok(Caller {
            commands,
            subscription,
            lock: format!("{key}:lock"),
            result: format!("{key}:result"),
            channel,
            owner,
        })
    }

    /// One call: lead if the lock is free (work, store the result with its
    /// time, publish it, unlock), else wait for a result that finished at or
    /// after this call started. Returns the value and whether this call led.
    pub fn call(&mut self, work: impl FnOnce() -> String) -> io::Result<(String, bool)> {
        let started = wall_nanos();
        let mut work = Some(work);
        loop {
            let set = self.commands.command(&[
                b"SET",
                self.lock.as_bytes(),
                self.owner.as_bytes(),
                b"NX",
                b"PX",
                LOCK_MILLISECONDS.as_bytes(),
            ])?;
            if set == Reply::Simple("OK".into()) {
                let value = (work.take().expect("the work runs once"))();
                let payload = format!("{} {value}", wall_nanos());
                // One round trip for the three: store, publish, unlock.
                self.commands
                    .queue(&[b"SET", self.result.as_bytes(), payload.as_bytes()]);
                self.commands
                    .queue(&[b"PUBLISH", self.channel.as_bytes(), payload.as_bytes()]);
                self.commands.queue(&[
                    b"EVAL",
                    UNLOCK_SCRIPT.as_bytes(),
                    b"1",
                    self.lock.as_bytes(),
                    self.owner.as_bytes(),
                ]);
                self.commands.flush()?;
                for _ in 0..3 {
                    if let Reply::Error(error) = self.commands.reply()? {
                        return Err(io::Error::other(error));
                    }
                }
                return Ok((value, true));
            }
            // Subscribed already; now re-check, so that a result published
            // between the failed SET and now is not missed.
            if let Reply::Bulk(Some(payload)) =
                self.commands.command(&[b"GET", self.result.as_bytes()])?
                && let Some(value) = fresh(&payload, started)
            {
                return Ok((value, false));
            }
            let deadline = Instant::now() + WAIT_SLICE;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                let Some(reply) = self.subscription.reply_within(left)? else {
                    break;
                };
                if let Reply::Array(Some(items)) = reply
                    && let [_, _, Reply::Bulk(Some(payload))] = items.as_slice()
                    && let Some(value) = fresh(payload, started)
                {
                    return Ok((value, false));
                }
            }
        }
    }
}

/// The value of a `time value` payload whose time is at or after `since`.
fn fresh(payload: &[u8], since: u64) -> Option<String> {
    let text = std::str::from_utf8(payload).ok()?;
    let (finished, value) = text.split_once(' ')?;
    (finished.parse::<u64>().ok()? >= since).then(|| value.to_owned())
}

/// A `redis-server` this run started, stopped when dropped.
pub struct Server {
    child: Child,
    pub address: String,
}

impl Server {
    /// Starts `redis-server` on a free loopback port without persistence,
    /// or says why it cannot.
    pub fn start() -> Result<Server, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|error| format!("no free port: {error}"))?
            .port();
        Server::start_with(
            Command::new("redis-server"),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
        )
    }

    /// Starts `redis-server` with `command` (the program, or a command
    /// that runs it elsewhere, such as `ip netns exec HOST redis-server`)
    /// on `ip:port`, without persistence, and waits until it answers.
    pub fn start_with(mut command: Command, ip: IpAddr, port: u16) -> Result<Server, String> {
        let child = command
            .args(["--port", &port.to_string(), "--bind", &ip.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // Off the loopback, protected mode would refuse every client of
            // a server without a password; it is reached only through the
            // benchmark's own namespaces.
            .args(["--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| {
                format!(
                    "redis-server is not installed ({error}); `bash bench/run` installs it with apt-get as root"
                )
            })?;
        let mut server = Server {
            child,
            address: SocketAddr::new(ip, port).to_string(),
        };
        let start = Instant::now();
        loop {
            if let Ok(mut connection) = Connection::open(&server.address)
                && matches!(connection.command(&[b"PING"]), Ok(Reply::Simple(_)))
            {
                return Ok(server);
            }
            if start.elapsed() > START_TIMEOUT {
                server.stop();
                return Err(format!(
                    "redis-server did not answer within {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
