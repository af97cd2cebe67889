//! A client's established connection as its process drives it (SPEC.md
//! §10.1): read and written by whoever holds the process's hub, the
//! single-flight thread or a caller, never waiting inside a read or a write.
//!
//! Who is woken when a line arrives is the cost of a call (BENCHMARKS.md,
//! "Design 4"): the single-flight thread reads every line by default, and a
//! transport that can [`lend`](Wire::lend) the connection lets the one call
//! that waits read its own answer on its own runtime instead, while the
//! thread is woken only by the connection's end. Which party reads changes
//! only who is woken: every read happens under the hub's lock, in order, so
//! a line is never read twice or lost whoever reads it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rustix::event::epoll;
use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// How often the single-flight thread looks at a connection that a call
/// reads (§10.1): it then reads what that call has left unread, and takes
/// the connection back. A caller reads what arrives within microseconds,
/// so this never finds anything unless the caller's runtime is not driven
/// (a current-thread runtime entered on a thread that does not run it) or
/// busy for this long: that is how late its answer, and another call's,
/// can be. Often enough not to be noticed as a hang, seldom enough that a
/// joiner waiting seconds for its flight costs nothing (20 wake-ups a
/// second).
pub const LEASE_CHECK: Duration = Duration::from_millis(50);

/// An established connection, driven without waiting (§10.1).
pub trait Wire: Send + 'static {
    /// Reads what has arrived. `Pending` registers `cx`, the single-flight
    /// thread's, to be woken when more arrives, when the connection ends,
    /// or when the socket takes bytes again after a `write` that could not
    /// finish.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;

    /// Writes what the socket takes now. A caller passes a waker that does
    /// nothing; only the single-flight thread's `poll_read` needs to be
    /// woken when the socket takes bytes again.
    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;

    /// Pushes out what `poll_write` took (a TLS writer's records).
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// A registration of this connection with the current runtime, through
    /// which a waiting call reads its own answer ([`Lent`]); `None` when the
    /// transport cannot lend it, and the single-flight thread reads for
    /// every call.
    fn lend(&mut self) -> Option<io::Result<Lent>> {
        None
    }

    /// Takes back what [`lend`](Wire::lend) gave, once the call stops
    /// reading, to lend it again without a new descriptor.
    fn give_back(&mut self, _lent: Lent) {}

    /// Who reads what arrives, and so what wakes the single-flight thread
    /// ([`Reader`]); a new connection starts with [`Reader::Thread`]. A
    /// wire that the thread alone reads ignores it.
    fn set_reader(&mut self, _reader: Reader) {}

    /// Who reads what arrives, as [`set_reader`](Wire::set_reader) last
    /// made it take effect: [`Reader::Thread`] always for a wire that the
    /// thread alone reads, whatever it was told.
    fn reader(&self) -> Reader {
        Reader::Thread
    }

    /// Reads what has arrived without registering anybody, for a caller:
    /// `WouldBlock` when nothing is there for it, which is always so on a
    /// wire that the thread alone reads.
    fn try_read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// Who reads a connection's arrivals (§10.1). The thread is always woken by
/// the connection's end, and while a write waits for room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The single-flight thread, woken by every arrival.
    Thread,
    /// A waiting call, through a [`Lent`] registration; the thread is also
    /// woken every [`LEASE_CHECK`], to read what the call leaves unread.
    Caller,
    /// Nobody waits for what may come (a land's `ack`): it stays in the
    /// socket until the connection is read next, and wakes nobody.
    Nobody,
}

/// Any reader and writer as a [`Wire`] that the single-flight thread alone
/// reads: the transports whose bytes are not a socket's (the simulation's,
/// a TLS stream's state).
pub struct Polled<R, W> {
    reader: R,
    writer: W,
}

impl<R, W> Polled<R, W> {
    pub fn new(reader: R, writer: W) -> Polled<R, W> {
        Polled { reader, writer }
    }
}

impl<R, W> Wire for Polled<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        Pin::new(&mut self.reader)
            .poll_read(cx, &mut buf)
            .map_ok(|()| buf.filled().len())
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.writer).poll_write(cx, buf)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_flush(cx)
    }
}

/// The bytes of a non-blocking socket as a [`SocketWire`] reads and writes
/// them: the socket's own, or a TLS session's over it.
pub trait Socket: AsFd + Send + 'static {
    /// What has arrived: `Ok(0)` at the end, `WouldBlock` when nothing is
    /// there.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// What the socket takes now (or the session keeps for `flush`).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Pushes out what `write` kept; `WouldBlock` while the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Whether `read` has something without the socket (a TLS session's
    /// records, decrypted by an earlier read and not yet taken): no watch
    /// of the socket sees it.
    fn buffered(&mut self) -> bool {
        false
    }
}

impl Socket for std::os::unix::net::UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        io::Read::read(self, buf)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(self, buf)
    }
}

impl Socket for std::net::TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        io::Read::read(self, buf)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(self, buf)
    }
}

/// A non-blocking [`Socket`] as a [`Wire`] that lends: the single-flight
/// thread watches it through an epoll instance of its own (`Watch`),
/// whose interest this wire sets, and a waiting call reads it through a
/// registration with its own runtime.
pub struct SocketWire<S> {
    socket: S,
    watch: Watch,
    /// The second descriptor of the socket that the last loan registered,
    /// to register again at the next.
    spare: Option<OwnedFd>,
    /// The thread's last read found nothing, and its waker is registered
    /// with the watch: it reads again once the watch says that something
    /// came, not at every poll. The driver polls the connection after each
    /// of its wake-ups, and a read that finds nothing is a system call for
    /// nothing (two of them after every line the thread read). A change of
    /// the watch's interest clears it, so that the thread's first read
    /// after a loan looks for itself.
    parked: bool,
}

impl<S: Socket> SocketWire<S> {
    /// `socket` must be non-blocking. Registers the watch with the current
    /// runtime, the single-flight thread's.
    pub fn new(socket: S) -> io::Result<SocketWire<S>> {
        let watch = Watch::new(socket.as_fd())?;
        Ok(SocketWire {
            socket,
            watch,
            spare: None,
            parked: false,
        })
    }

    /// `Pending` once the thread's watch is set to wake it when the socket
    /// takes bytes again; its `poll_read` registers its waker.
    fn wait_for_room(&mut self) -> Poll<io::Result<()>> {
        self.parked = false;
        let reader = self.watch.reader;
        match self.watch.set(self.socket.as_fd(), reader, true) {
            Ok(_) => Poll::Pending,
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    /// The socket took everything: the thread need not hear of room.
    fn roomy(&mut self) -> io::Result<()> {
        self.parked = false;
        let reader = self.watch.reader;
        self.watch.set(self.socket.as_fd(), reader, false).map(drop)
    }
}

/// Whether `error` is only an interrupted system call, to be made again.
fn retry(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Interrupted
}

impl<S: Socket> Wire for SocketWire<S> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.watch.lent_no_more();
        loop {
            if self.parked {
                // Cleared before the next read: whatever arrives after it
                // sets the readiness again.
                match self.watch.registered.poll_read_ready(cx) {
                    Poll::Ready(Ok(mut ready)) => {
                        ready.clear_ready();
                        drop(ready);
                        self.watch.checked();
                        self.parked = false;
                    }
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            match self.socket.read(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => self.parked = true,
                Err(error) if retry(&error) => {}
                done => return Poll::Ready(done),
            }
        }
    }

    fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            match self.socket.write(buf) {
                // A TLS session that keeps as much as it may: push it out
                // first.
                Ok(0) if !buf.is_empty() => match self.socket.flush() {
                    Ok(()) => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        return self.wait_for_room().map_ok(|()| 0);
                    }
                    Err(error) if retry(&error) => {}
                    Err(error) => return Poll::Ready(Err(error)),
                },
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return self.wait_for_room().map_ok(|()| 0);
                }
                Err(error) if retry(&error) => {}
                done => {
                    self.roomy()?;
                    return Poll::Ready(done);
                }
            }
        }
    }

    fn poll_flush(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.socket.flush() {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return self.wait_for_room();
                }
                Err(error) if retry(&error) => {}
                done => {
                    self.roomy()?;
                    return Poll::Ready(done);
                }
            }
        }
    }

    fn lend(&mut self) -> Option<io::Result<Lent>> {
        let fd = match self.spare.take() {
            Some(fd) => fd,
            None => match self.socket.as_fd().try_clone_to_owned() {
                Ok(fd) => fd,
                Err(error) => return Some(Err(error)),
            },
        };
        Some(register(fd, Interest::READABLE).map(Lent))
    }

    fn give_back(&mut self, lent: Lent) {
        self.spare = Some(lent.0.into_inner());
    }

    fn set_reader(&mut self, reader: Reader) {
        self.parked = false;
        let writes = self.watch.writes;
        let set = match self.watch.set(self.socket.as_fd(), reader, writes) {
            // What the socket holds wakes the thread once it reads again
            // (`Watch::set`); what an earlier read took from it and left
            // unread does not.
            Ok(Registered::Anew) if self.socket.buffered() => self.watch.nudge(),
            set => set.map(drop),
        };
        if let Err(error) = set {
            // Cannot happen on a valid epoll instance or timer; if it did,
            // the thread would keep its previous interest: with arrivals,
            // it reads as it always may; without, the caller reads, and the
            // thread at every check or its next wake-up.
            tracing::warn!(%error, "cannot change what wakes the single-flight thread");
        }
    }

    fn reader(&self) -> Reader {
        self.watch.reader
    }

    fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.socket.read(buf) {
                Err(error) if retry(&error) => {}
                done => return done,
            }
        }
    }
}

/// The single-flight thread's watch of one socket: an epoll instance of
/// its own with only that socket in it, itself registered with the
/// thread's runtime. Its interest is what this process's arrangement
/// needs: arrivals (`EPOLLIN`) while the thread reads them ([`Reader`]), the socket
/// taking bytes again (`EPOLLOUT`) only while a write waits for it, and
/// always the end (`EPOLLRDHUP`; hang-ups and errors are reported
/// whatever the interest). A registration of the socket itself with the
/// runtime could not say that: tokio registers every socket for arrivals
/// and for writability, and the kernel wakes every epoll instance that has
/// a socket registered for the event at hand whether or not anybody reads
/// it (BENCHMARKS.md, "Design 4's caveat, priced").
struct Watch {
    registered: AsyncFd<Instance>,
    /// Fires every [`LEASE_CHECK`] while the connection is lent (a
    /// `timerfd` in the instance, so that arming it wakes nobody). Armed
    /// by a loan, unless still armed; disarmed when nobody is to read
    /// ([`Reader::Nobody`], after most calls: a leader's land waits for
    /// its `ack`), and else by the thread the next time it reads with
    /// nothing lent. Calls one after another by one caller arm it at each
    /// loan and disarm it as the loan ends: two changes of a kernel timer
    /// per call, about a microsecond here, where the thread's interest in
    /// arrivals changed twice before, for half that; the price of a call
    /// now and then that wakes no thread for its `ack` (BENCHMARKS.md,
    /// "Calls now and then").
    check: OwnedFd,
    armed: bool,
    reader: Reader,
    writes: bool,
}

/// An epoll instance, owned.
struct Instance(OwnedFd);

impl AsRawFd for Instance {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Watch {
    fn new(socket: std::os::fd::BorrowedFd<'_>) -> io::Result<Watch> {
        let instance = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &instance,
            socket,
            epoll::EventData::new_u64(0),
            interest(Reader::Thread, false),
        )?;
        let check = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )?;
        epoll::add(
            &instance,
            &check,
            epoll::EventData::new_u64(1),
            epoll::EventFlags::IN,
        )?;
        Ok(Watch {
            registered: register(Instance(instance), Interest::READABLE)?,
            check,
            armed: false,
            reader: Reader::Thread,
            writes: false,
        })
    }

    /// Takes the check's expirations while it is armed, so that it is not
    /// ready until the next.
    fn checked(&mut self) {
        if self.armed {
            let mut expirations = [0; 8];
            let _ = rustix::io::read(&self.check, &mut expirations);
        }
    }

    /// Disarms the check if nothing is lent any more: the thread is awake
    /// and reading anyway, and a check left armed would wake it once more
    /// after the last call of a burst. Disarming also drops expirations
    /// not yet taken.
    fn lent_no_more(&mut self) {
        if self.reader != Reader::Caller {
            self.disarm();
        }
    }

    fn disarm(&mut self) {
        if self.armed && self.arm(Duration::ZERO).is_ok() {
            self.armed = false;
        }
    }

    /// Sets the check to fire every `every`; zero disarms it.
    fn arm(&self, every: Duration) -> io::Result<()> {
        let every = Timespec::try_from(every).expect("a short period");
        self.schedule(every, every)
    }

    /// Wakes the thread now, once, through the check: it fires at once
    /// and not again. Armed as far as the thread can tell, so that its
    /// next read takes the expiration and disarms it.
    fn nudge(&mut self) -> io::Result<()> {
        const NOW: Timespec = Timespec {
            tv_sec: 0,
            tv_nsec: 1,
        };
        const NEVER_AGAIN: Timespec = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        self.schedule(NOW, NEVER_AGAIN)?;
        self.armed = true;
        Ok(())
    }

    /// Sets the check to fire `first` from now, then every `every` (zero:
    /// once; both zero: never).
    fn schedule(&self, first: Timespec, every: Timespec) -> io::Result<()> {
        timerfd_settime(
            &self.check,
            TimerfdTimerFlags::empty(),
            &Itimerspec {
                it_interval: every,
                it_value: first,
            },
        )?;
        Ok(())
    }

    /// Sets the interest in `socket`, the one this watch was made for, and
    /// says how.
    fn set(
        &mut self,
        socket: std::os::fd::BorrowedFd<'_>,
        reader: Reader,
        writes: bool,
    ) -> io::Result<Registered> {
        let instance = &self.registered.get_ref().0;
        let data = epoll::EventData::new_u64(0);
        let mut registered = Registered::AsBefore;
        if reader == Reader::Thread && self.reader != Reader::Thread {
            // Registered anew, not modified: the instance may still list
            // the socket as ready from an arrival the thread has read
            // since (nobody waits on this instance, which would drop the
            // entry), and a modification reports a socket that is ready
            // only when it is not listed. What came while the thread did
            // not read would then wake it with the next arrival alone.
            epoll::delete(instance, socket)?;
            epoll::add(instance, socket, data, interest(reader, writes))?;
            registered = Registered::Anew;
        } else if interest(reader, writes) != interest(self.reader, self.writes) {
            epoll::modify(instance, socket, data, interest(reader, writes))?;
        }
        match reader {
            Reader::Caller if !self.armed => {
                self.arm(LEASE_CHECK)?;
                self.armed = true;
            }
            Reader::Nobody => self.disarm(),
            Reader::Caller | Reader::Thread => {}
        }
        self.reader = reader;
        self.writes = writes;
        Ok(registered)
    }
}

/// How [`Watch::set`] changed the socket's registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Registered {
    /// Registered anew, for the thread to read again: what the socket
    /// holds wakes it.
    Anew,
    /// Modified, or left as it was.
    AsBefore,
}

fn interest(reader: Reader, writes: bool) -> epoll::EventFlags {
    let mut flags = epoll::EventFlags::RDHUP;
    if reader == Reader::Thread {
        flags |= epoll::EventFlags::IN;
    }
    if writes {
        flags |= epoll::EventFlags::OUT;
    }
    flags
}

/// A waiting call's registration of the connection with its own runtime
/// (§10.1): a second descriptor of the socket, registered for arrivals
/// only, unregistered when the call stops reading (and given back, or
/// closed if the connection is gone).
pub struct Lent(AsyncFd<OwnedFd>);

impl Lent {
    /// Waits until something may have arrived; `clear` after reading what
    /// did.
    pub async fn readable(&self) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, OwnedFd>> {
        self.0.readable().await
    }
}

/// Registers `fd` with the current runtime for `interest` alone.
pub(crate) fn register<T: AsRawFd>(fd: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // Sound: every `T` here owns its descriptor, which stays open as long
    // as the registration, the I/O safety whose lack in general the
    // deprecation of this safe constructor is about.
    #[allow(deprecated)]
    AsyncFd::with_interest(fd, interest)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::task::Waker;

    use super::*;

    fn check_armed<S>(wire: &SocketWire<S>) -> bool {
        let set = rustix::time::timerfd_gettime(&wire.watch.check).expect("a timerfd");
        (set.it_value.tv_sec, set.it_value.tv_nsec) != (0, 0)
    }

    /// §10.1: a loan arms the thread's check, and a loan that ends with
    /// the thread to read leaves it armed; the thread's next read with
    /// nothing lent disarms it, so that it does not wake the thread once
    /// more after the call.
    #[tokio::test]
    async fn the_thread_disarms_the_check_of_a_loan_when_it_reads_with_nothing_lent() {
        let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        let mut wire = SocketWire::new(ours).expect("a wire");
        assert!(!check_armed(&wire), "nothing lent yet");
        let lent = wire.lend().expect("a socket lends").expect("registered");
        wire.set_reader(Reader::Caller);
        assert!(check_armed(&wire), "a loan arms the check");
        wire.give_back(lent);
        wire.set_reader(Reader::Thread);
        assert!(check_armed(&wire), "the loan's end leaves it to the thread");
        theirs.write_all(b"{\"op\":\"ack\"}\n").expect("written");
        let mut buf = [0; 64];
        let read = wire.poll_read(&mut Context::from_waker(Waker::noop()), &mut buf);
        assert!(matches!(read, Poll::Ready(Ok(13))), "{read:?}");
        assert!(!check_armed(&wire), "the thread's read disarmed it");
    }

    /// Whether the thread's watch would wake it now, once the runtime has
    /// turned: what has happened to the socket is in the kernel's epoll
    /// instance at once, and the turn (a sleep parks the runtime in
    /// `epoll_wait`) hands it to the registration.
    async fn wakes_the_thread<S: Socket>(wire: &mut SocketWire<S>) -> bool {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut cx = Context::from_waker(Waker::noop());
        match wire.watch.registered.poll_read_ready(&mut cx) {
            Poll::Ready(ready) => {
                ready.expect("a watch").clear_ready();
                true
            }
            Poll::Pending => false,
        }
    }

    /// §10.1: when nobody waits for what comes (a leader's land waits for
    /// its `ack`), a loan's end disarms the check, and an arrival wakes
    /// nobody; it is read when someone must read again, whose interest
    /// makes the watch report it.
    #[tokio::test]
    async fn an_arrival_that_nobody_waits_for_wakes_nobody() {
        let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        let mut wire = SocketWire::new(ours).expect("a wire");
        let mut buf = [0; 64];
        let read = wire.poll_read(&mut Context::from_waker(Waker::noop()), &mut buf);
        assert!(read.is_pending(), "nothing came");
        assert!(!wakes_the_thread(&mut wire).await, "nothing came");
        let lent = wire.lend().expect("a socket lends").expect("registered");
        wire.set_reader(Reader::Caller);
        assert!(check_armed(&wire), "a loan arms the check");
        wire.give_back(lent);
        wire.set_reader(Reader::Nobody);
        assert!(!check_armed(&wire), "nobody to read: no check");
        theirs.write_all(b"{\"op\":\"ack\"}\n").expect("written");
        assert!(!wakes_the_thread(&mut wire).await, "the ack wakes nobody");
        let lent = wire.lend().expect("a socket lends").expect("registered");
        wire.set_reader(Reader::Caller);
        assert!(!wakes_the_thread(&mut wire).await, "a caller reads it");
        assert!(
            matches!(wire.try_read(&mut buf), Ok(13)),
            "the caller's read"
        );
        wire.give_back(lent);
        // The thread's turn once it is to read again:
        // `what_came_while_the_thread_did_not_read_wakes_it_when_it_is_to`.
    }

    /// §10.1: what came while the thread did not read (nobody did, or a
    /// call that left it unread) wakes the thread once it is to read, even
    /// when the watch's instance still lists the socket as ready from an
    /// earlier arrival that the thread has read since (an epoll instance
    /// that nobody waits on keeps such an entry, and a change of interest
    /// alone reports nothing for a listed socket).
    #[tokio::test]
    async fn what_came_while_the_thread_did_not_read_wakes_it_when_it_is_to() {
        for meanwhile in [Reader::Nobody, Reader::Caller] {
            let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
            ours.set_nonblocking(true).expect("non-blocking");
            let mut wire = SocketWire::new(ours).expect("a wire");
            let mut buf = [0; 64];
            let mut poll = |wire: &mut SocketWire<UnixStream>| {
                wire.poll_read(&mut Context::from_waker(Waker::noop()), &mut buf)
            };
            theirs.write_all(b"{\"op\":\"lead\"}\n").expect("written");
            assert!(wakes_the_thread(&mut wire).await, "the thread reads");
            assert!(matches!(poll(&mut wire), Poll::Ready(Ok(14))));
            assert!(poll(&mut wire).is_pending(), "all read");
            wire.set_reader(meanwhile);
            theirs.write_all(b"{\"op\":\"ack\"}\n").expect("written");
            assert!(!wakes_the_thread(&mut wire).await, "{meanwhile:?}");
            wire.set_reader(Reader::Thread);
            assert!(wakes_the_thread(&mut wire).await, "{meanwhile:?}");
            assert!(matches!(poll(&mut wire), Poll::Ready(Ok(13))));
        }
    }

    /// A socket with bytes of its own beside the kernel's, as a TLS
    /// session holds the records that a read decrypted and left.
    struct Holding {
        socket: UnixStream,
        held: Vec<u8>,
    }

    impl AsFd for Holding {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.socket.as_fd()
        }
    }

    impl Socket for Holding {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.held.is_empty() {
                return io::Read::read(&mut self.socket, buf);
            }
            let read = self.held.len().min(buf.len());
            buf[..read].copy_from_slice(&self.held[..read]);
            self.held.drain(..read);
            Ok(read)
        }

        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            io::Write::write(&mut self.socket, buf)
        }

        fn buffered(&mut self) -> bool {
            !self.held.is_empty()
        }
    }

    /// §10.1: what an earlier read took from the socket and left unread (a
    /// TLS session's decrypted records) wakes the thread once it is to read
    /// again, though the socket holds nothing that its watch could see.
    #[tokio::test]
    async fn what_a_read_left_unread_wakes_the_thread_when_it_is_to() {
        for meanwhile in [Reader::Nobody, Reader::Caller] {
            let (ours, _theirs) = UnixStream::pair().expect("a socket pair");
            ours.set_nonblocking(true).expect("non-blocking");
            let mut wire = SocketWire::new(Holding {
                socket: ours,
                held: Vec::new(),
            })
            .expect("a wire");
            wire.set_reader(meanwhile);
            wire.socket.held.extend_from_slice(b"{\"op\":\"ack\"}\n");
            assert!(!wakes_the_thread(&mut wire).await, "{meanwhile:?}");
            wire.set_reader(Reader::Thread);
            assert!(wakes_the_thread(&mut wire).await, "{meanwhile:?}");
            let mut buf = [0; 64];
            let read = wire.poll_read(&mut Context::from_waker(Waker::noop()), &mut buf);
            assert!(
                matches!(read, Poll::Ready(Ok(13))),
                "{meanwhile:?}: {read:?}"
            );
            assert!(!check_armed(&wire), "{meanwhile:?}: the read disarmed it");
            assert!(!wakes_the_thread(&mut wire).await, "{meanwhile:?}: once");
        }
    }

    /// A socket that counts its reads.
    struct Counted {
        socket: UnixStream,
        reads: usize,
    }

    impl AsFd for Counted {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.socket.as_fd()
        }
    }

    impl Socket for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            io::Read::read(&mut self.socket, buf)
        }

        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            io::Write::write(&mut self.socket, buf)
        }
    }

    /// The thread reads what arrives, and after a read that found nothing
    /// it reads again only once something came: polled meanwhile (the
    /// driver polls after every wake-up), it makes no system call.
    #[tokio::test]
    async fn the_thread_reads_again_only_once_something_came() {
        let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        let mut wire = SocketWire::new(Counted {
            socket: ours,
            reads: 0,
        })
        .expect("a wire");
        let mut buf = [0; 64];
        let poll = |wire: &mut SocketWire<Counted>, buf: &mut [u8]| {
            wire.poll_read(&mut Context::from_waker(Waker::noop()), buf)
        };
        assert!(poll(&mut wire, &mut buf).is_pending(), "nothing came");
        let found_nothing = wire.socket.reads;
        assert!(poll(&mut wire, &mut buf).is_pending(), "still nothing");
        assert!(poll(&mut wire, &mut buf).is_pending(), "still nothing");
        assert_eq!(wire.socket.reads, found_nothing, "no read for nothing");
        theirs.write_all(b"{\"op\":\"ack\"}\n").expect("written");
        let read = std::future::poll_fn(|cx| wire.poll_read(cx, &mut buf)).await;
        assert!(matches!(read, Ok(13)), "{read:?}");
        // A change of interest (a loan's end) reads first, whatever the
        // watch says.
        wire.set_reader(Reader::Thread);
        theirs.write_all(b"{\"op\":\"ack\"}\n").expect("written");
        let read = poll(&mut wire, &mut buf);
        assert!(matches!(read, Poll::Ready(Ok(13))), "{read:?}");
    }
}
