//! Micro-benchmarks of the pure coordinator (BENCHMARKS.md, item 1).
//!
//! - `step/*`: `Coordinator::step` alone on pre-built event traces, reported
//!   by criterion as events per CPU-second of the benchmark's thread (see
//!   [`ThreadCpuTime`]: the machine is shared, and wall time would measure
//!   the neighbours too).
//! - `wire/*`: the same traces as request lines: decode, step, encode every
//!   response, which is all the CPU the coordinator spends per message apart
//!   from the socket calls.
//! - Before criterion starts, a table of memory: bytes per in-flight flight,
//!   per joiner and per connection in the core, and per connection in the
//!   shell's coordinator, counted by a global allocator that tallies live
//!   bytes; and the allocations `step` makes per event.
//!
//! `cargo bench -p single-flight-bench --bench core` measures; `cargo test
//! -p single-flight-bench --bench core` runs each benchmark once and the
//! memory table on small sizes (the CI smoke run).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BatchSize, Criterion, Throughput};
use single_flight::{Epoch, SingleFlight};
use single_flight_core::coordinator::{ConnectionId, Coordinator, Effect, Event, Term};
use single_flight_core::protocol::{
    Incoming, Key, LineEncoder, Outcome, Request, RequestId, Response, decode_request, encode,
};

// ------------------------------------------------------------ allocations

/// The system allocator, counting live bytes and allocation calls while
/// [`COUNTING`] is set, so that the memory table can read what the
/// coordinator keeps. The timed benchmarks run with it unset, at the cost of
/// one relaxed load per allocation.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn count(bytes: i64, calls: u64) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(calls, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64, 1);
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64, 1);
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64), 0);
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64, 1);
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

// ------------------------------------------------------------ CPU time

/// Criterion's measurement as the CPU time of the benchmark's own thread,
/// read from `/proc/thread-self/schedstat` (its first field is the
/// nanoseconds the thread has run). On a shared two-core machine wall time
/// also counts the time the thread waited for a core; CPU time is what one
/// core needs for the work.
struct ThreadCpuTime;

fn thread_cpu_nanos() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("Linux reports a thread's run time in /proc/thread-self/schedstat");
    text.split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .expect("schedstat starts with a number of nanoseconds")
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }

    fn end(&self, start: u64) -> u64 {
        thread_cpu_nanos().saturating_sub(start)
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = match typical {
            t if t < 1e3 => (1.0, "ns cpu"),
            t if t < 1e6 => (1e-3, "µs cpu"),
            t if t < 1e9 => (1e-6, "ms cpu"),
            _ => (1e-9, "s cpu"),
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iteration = match throughput {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => {
                *n as f64
            }
            _ => 1.0,
        };
        let (factor, unit) = if per_iteration * 1e9 / typical >= 1e6 {
            (1e-6, "M/cpu-s")
        } else {
            (1e-3, "K/cpu-s")
        };
        values
            .iter_mut()
            .for_each(|v| *v = per_iteration * 1e9 / *v * factor);
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

// ------------------------------------------------------------ events

fn connection(n: u64) -> ConnectionId {
    ConnectionId(n)
}

/// A key as callers write them: a kind and a path-like name, 18 to 20 bytes.
fn key(n: u64) -> Key {
    Key::new(format!("build:app/{n:08}")).expect("a short key")
}

/// Ids are decimal call numbers, as the shell's client writes them (§3.1).
fn id(n: u64) -> RequestId {
    RequestId::new(n.to_string()).expect("a short id")
}

fn request(connection_number: u64, request: Request) -> Event {
    Event::RequestReceived {
        connection: connection(connection_number),
        request: Incoming::Request(request),
    }
}

fn run(connection_number: u64, call: u64, key_number: u64) -> Event {
    request(
        connection_number,
        Request::Run {
            id: id(call),
            key: key(key_number),
            flight: None,
            reuse: None,
            parent: None,
        },
    )
}

fn land(connection_number: u64, call: u64, value: &str) -> Event {
    request(
        connection_number,
        Request::Land {
            id: id(call),
            outcome: Outcome::Value(value.to_owned()),
        },
    )
}

fn cancel(connection_number: u64, call: u64) -> Event {
    request(connection_number, Request::Cancel { id: id(call) })
}

/// A value as the JSON codec writes it: 64 bytes of JSON text.
fn small_value() -> String {
    format!(
        "{{\"path\":\"/var/cache/app/{}\",\"ok\":true}}",
        "x".repeat(29)
    )
}

/// A trace: the connections to open first, then the events to time.
#[derive(Clone)]
struct Trace {
    connections: u64,
    events: Vec<Event>,
}

impl Trace {
    /// A coordinator with the trace's connections open, ready for `events`.
    fn coordinator(&self) -> Coordinator {
        let mut coordinator = Coordinator::new(Epoch::FIRST, Term::First);
        for n in 0..self.connections {
            coordinator.step(Event::ConnectionOpened {
                connection: connection(n),
                relay: None,
            });
        }
        coordinator
    }
}

/// Uncontended calls: each run leads a fresh key and lands at once, spread
/// over 64 connections (two events per flight).
fn lead_land(flights: u64) -> Trace {
    let value = small_value();
    let connections = 64;
    let mut events = Vec::new();
    for n in 0..flights {
        let on = n % connections;
        events.push(run(on, n, n));
        events.push(land(on, n, &value));
    }
    Trace {
        connections,
        events,
    }
}

/// One leader and `joiners` joiners per flight, each on its own connection,
/// then the land (`joiners + 2` events per flight, `joiners + 2` responses).
fn fan_out(flights: u64, joiners: u64, value: &str) -> Trace {
    let connections = joiners + 1;
    let mut events = Vec::new();
    for n in 0..flights {
        for on in 0..connections {
            events.push(run(on, n, n));
        }
        events.push(land(0, n, value));
    }
    Trace {
        connections,
        events,
    }
}

/// A small deterministic generator (xorshift64*), so that every run of the
/// benchmark replays the same trace without a dependency.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, per_thousand: u64) -> bool {
        self.below(1000) < per_thousand
    }
}

/// A realistic mix over 256 connections and 1024 keys: 80% of the runs go
/// to the 64 hottest keys (so most of them join), leaders land 1 to 200
/// events after they lead, 1% of events cancel a recent call, 0.1% close a
/// connection (withdrawing its parties) and open a new one.
///
/// The trace is recorded by driving a coordinator and reacting to its
/// answers (a `lead` schedules that party's `land`), so every land is one
/// the replay will accept.
fn mixed(length: usize) -> Trace {
    const CONNECTIONS: u64 = 256;
    const KEYS: u64 = 1024;
    const HOT_KEYS: u64 = 64;
    let value = small_value();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut recorder = Trace {
        connections: CONNECTIONS,
        events: Vec::new(),
    }
    .coordinator();
    // The open connections (their numbers), and each one's next call number.
    let mut open: Vec<u64> = (0..CONNECTIONS).collect();
    let mut next_call = vec![0u64; CONNECTIONS as usize];
    let mut next_connection = CONNECTIONS;
    // Lands to send: (due at event index, connection, call).
    let mut lands: Vec<(usize, u64, u64)> = Vec::new();
    let mut events = Vec::with_capacity(length);
    while events.len() < length {
        let now = events.len();
        let event = if let Some(at) = lands.iter().position(|&(due, ..)| due <= now) {
            let (_, on, call) = lands.swap_remove(at);
            land(on, call, &value)
        } else if random.chance(1) {
            let at = random.below(open.len() as u64) as usize;
            let closed = open[at];
            lands.retain(|&(_, on, _)| on != closed);
            open[at] = next_connection;
            next_call.push(0);
            next_connection += 1;
            // The close now, the opening as the next event.
            let opened = Event::ConnectionOpened {
                connection: connection(open[at]),
                relay: None,
            };
            recorder.step(Event::ConnectionClosed {
                connection: connection(closed),
            });
            events.push(Event::ConnectionClosed {
                connection: connection(closed),
            });
            opened
        } else if random.chance(10) {
            let on = open[random.below(open.len() as u64) as usize];
            let calls = next_call[on as usize];
            cancel(on, calls.saturating_sub(1 + random.below(4)))
        } else {
            let on = open[random.below(open.len() as u64) as usize];
            let call = next_call[on as usize];
            next_call[on as usize] += 1;
            let key_number = if random.chance(800) {
                random.below(HOT_KEYS)
            } else {
                random.below(KEYS)
            };
            run(on, call, key_number)
        };
        for effect in recorder.step(event.clone()) {
            if let Effect::Send {
                connection,
                response: Response::Lead { id, .. },
            } = effect
            {
                let call = id.as_str().parse().expect("ids are numbers");
                lands.push((now + 1 + random.below(200) as usize, connection.0, call));
            }
        }
        events.push(event);
    }
    Trace {
        connections: CONNECTIONS,
        events,
    }
}

/// The request lines of a trace's events, as a client writes them; events
/// that are no request (opens and closes) stay events.
enum Wire {
    Line(ConnectionId, Vec<u8>),
    Other(Event),
}

fn wire(trace: &Trace) -> Vec<Wire> {
    trace
        .events
        .iter()
        .map(|event| match event {
            Event::RequestReceived {
                connection,
                request: Incoming::Request(request),
            } => Wire::Line(*connection, encode(request).into_bytes()),
            other => Wire::Other(other.clone()),
        })
        .collect()
}

/// What the coordinator's shell does per message, without the socket:
/// decode the line, step, encode each response with its newline.
fn serve_lines(coordinator: &mut Coordinator, lines: &[Wire]) -> usize {
    let mut written = 0;
    let mut effects = Vec::new();
    for item in lines {
        let event = match item {
            Wire::Line(connection, line) => Event::RequestReceived {
                connection: *connection,
                request: decode_request(line).expect("the trace's lines decode"),
            },
            Wire::Other(event) => event.clone(),
        };
        let mut encoder = LineEncoder::default();
        coordinator.step_into(event, &mut effects);
        for effect in effects.drain(..) {
            if let Effect::Send { response, .. } = effect {
                written += encoder.line(&response).len();
            }
        }
    }
    written
}

// ------------------------------------------------------------ criterion

/// Whether criterion runs each benchmark once (`cargo test ... --bench core`, or
/// `-- --test`): then the memory table uses small sizes too.
fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test")
}

/// The traces of the `step` group.
fn step_traces(scale: u64) -> [(&'static str, Trace); 3] {
    [
        ("lead_land", lead_land(5_000 * scale)),
        ("fan_out_64", fan_out(150 * scale, 64, &small_value())),
        ("mixed", mixed(10_000 * scale as usize)),
    ]
}

/// The traces of the `wire` group: the fan-out carries a 1 KiB value, since
/// a `landed` line is encoded once per joiner.
fn wire_traces(scale: u64) -> [(&'static str, Trace); 3] {
    let kilobyte_value = format!("\"{}\"", "v".repeat(1022));
    [
        ("lead_land", lead_land(5_000 * scale)),
        (
            "fan_out_64_value_1k",
            fan_out(150 * scale, 64, &kilobyte_value),
        ),
        ("mixed", mixed(10_000 * scale as usize)),
    ]
}

fn benchmarks(criterion: &mut Criterion<ThreadCpuTime>, scale: u64) {
    let mut group = criterion.benchmark_group("step");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(4));
    for (name, trace) in &step_traces(scale) {
        group.throughput(Throughput::Elements(trace.events.len() as u64));
        group.bench_function(*name, |bencher| {
            bencher.iter_batched(
                || (trace.coordinator(), trace.events.clone()),
                |(mut coordinator, events)| {
                    let mut effects = Vec::new();
                    for event in events {
                        coordinator.step_into(event, &mut effects);
                        black_box(&effects);
                        effects.clear();
                    }
                    coordinator
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();

    let mut group = criterion.benchmark_group("wire");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(4));
    for (name, trace) in &wire_traces(scale) {
        let lines = wire(trace);
        group.throughput(Throughput::Elements(trace.events.len() as u64));
        group.bench_function(*name, |bencher| {
            bencher.iter_batched(
                || trace.coordinator(),
                |mut coordinator| black_box(serve_lines(&mut coordinator, &lines)),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// The figures of BENCHMARKS.md in its format: for each benchmark, the
/// median of `repeats` runs of the whole trace, in events per CPU-second of
/// this thread, with the lowest and highest run. (Criterion's lines above
/// give the mean with its confidence interval.)
fn summary(scale: u64, repeats: usize) {
    println!("events per CPU-second: median of {repeats} runs (lowest–highest)");
    let report = |group: &str, name: &str, events: usize, mut rates: Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        println!(
            "  {group}/{name:<20} {:>6.2} M/s ({:.2}–{:.2})  [{events} events a run]",
            rates[rates.len() / 2] / 1e6,
            rates[0] / 1e6,
            rates[rates.len() - 1] / 1e6,
        );
    };
    for (name, trace) in &step_traces(scale) {
        let rates = (0..repeats)
            .map(|_| {
                let mut coordinator = trace.coordinator();
                let events = trace.events.clone();
                let start = thread_cpu_nanos();
                let mut effects = Vec::new();
                for event in events {
                    coordinator.step_into(event, &mut effects);
                    black_box(&effects);
                    effects.clear();
                }
                trace.events.len() as f64 * 1e9 / (thread_cpu_nanos() - start).max(1) as f64
            })
            .collect();
        report("step", name, trace.events.len(), rates);
    }
    for (name, trace) in &wire_traces(scale) {
        let lines = wire(trace);
        let rates = (0..repeats)
            .map(|_| {
                let mut coordinator = trace.coordinator();
                let start = thread_cpu_nanos();
                black_box(serve_lines(&mut coordinator, &lines));
                trace.events.len() as f64 * 1e9 / (thread_cpu_nanos() - start).max(1) as f64
            })
            .collect();
        report("wire", name, trace.events.len(), rates);
    }
}

// ------------------------------------------------------------ memory

/// Live bytes the coordinator gains while it takes `events`, built one at a
/// time so that only what it keeps (and not the trace) is counted.
fn kept_bytes(coordinator: &mut Coordinator, events: impl Iterator<Item = Event>) -> i64 {
    let before = live_bytes();
    for event in events {
        drop(coordinator.step(event));
    }
    live_bytes() - before
}

/// Allocations per event of `step` in steady state, the trace built
/// beforehand (decoding allocates the key and id; that is not `step`'s),
/// into one buffer of effects as the shell keeps (`step_into`).
fn allocations_per_event(trace: &Trace) -> f64 {
    let mut coordinator = trace.coordinator();
    let events = trace.events.clone();
    let count = events.len();
    let mut effects = Vec::new();
    let before = allocations();
    for event in events {
        coordinator.step_into(event, &mut effects);
        effects.clear();
    }
    (allocations() - before) as f64 / count as f64
}

fn memory_table(flights: u64, shell_connections: usize) {
    COUNTING.store(true, Ordering::Relaxed);
    let value = small_value();
    let connections = 64;

    let mut coordinator = Trace {
        connections,
        events: Vec::new(),
    }
    .coordinator();
    let per_flight = kept_bytes(
        &mut coordinator,
        (0..flights).map(|n| run(n % connections, n, n)),
    ) as f64
        / flights as f64;
    // The same flights gain one joiner each, from the next connection.
    let per_joiner = kept_bytes(
        &mut coordinator,
        (0..flights).map(|n| run((n + 1) % connections, flights + n, n)),
    ) as f64
        / flights as f64;
    let in_flight = coordinator.flights().count();
    assert_eq!(in_flight as u64, flights, "every run led its own flight");
    // Landing them all gives the memory back.
    let after_land = kept_bytes(
        &mut coordinator,
        (0..flights).map(|n| land(n % connections, n, &value)),
    );
    drop(coordinator);

    let opened = flights.min(10_000);
    let mut coordinator = Coordinator::new(Epoch::FIRST, Term::First);
    let per_connection = kept_bytes(
        &mut coordinator,
        (0..opened).map(|n| Event::ConnectionOpened {
            connection: connection(n),
            relay: None,
        }),
    ) as f64
        / opened as f64;

    let shell = shell_bytes_per_connection(shell_connections);

    println!("memory (live heap bytes, counted by the bench's global allocator)");
    println!(
        "  core  per in-flight flight (leader party, key, flight) {per_flight:>8.0} B  ({flights} flights, 64 connections)"
    );
    println!("  core  per joiner of a flight                          {per_joiner:>8.0} B");
    println!("  core  per open connection                             {per_connection:>8.0} B");
    let residue = after_land as f64 + (per_flight + per_joiner) * flights as f64;
    println!("  core  left after every flight landed                  {residue:>8.0} B in all");
    match shell {
        Ok(bytes) => println!(
            "  shell coordinator side, per connected client          {bytes:>8.0} B  ({shell_connections} clients)"
        ),
        Err(error) => println!("  shell per connection not measured: {error}"),
    }
    println!("allocations per event in `step` (steady state, trace built beforehand)");
    for (name, trace) in [
        ("lead_land", lead_land(flights.min(20_000))),
        ("fan_out_64", fan_out(flights.min(20_000) / 64, 64, &value)),
        ("mixed", mixed(flights.min(20_000) as usize)),
    ] {
        println!("  {name:<12} {:.2}", allocations_per_event(&trace));
    }
    println!();
    COUNTING.store(false, Ordering::Relaxed);
}

/// Heap the shell's coordinator (a `serve` in this process) holds per
/// connected client: `clients` raw sockets finish the handshake, and the live
/// bytes before and after are compared. Kernel socket buffers are not heap
/// and not counted.
fn shell_bytes_per_connection(clients: usize) -> Result<f64, String> {
    let root = std::env::temp_dir().join(format!("sf-bench-core-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("flights");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = runtime.spawn(SingleFlight::builder(&dir).serve(async {
        let _ = stopped.await;
    }));
    let socket = dir.join("flight.sock");
    let connect = || -> std::io::Result<std::os::unix::net::UnixStream> {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"{\"protocol\":\"single-flight\",\"version\":1}\n")?;
        // The coordinator's hello, read without a buffer of ours.
        let mut byte = [0u8; 1];
        loop {
            stream.read_exact(&mut byte)?;
            if byte[0] == b'\n' {
                return Ok(stream);
            }
        }
    };
    let mut waited = 0;
    let first = loop {
        match connect() {
            Ok(stream) => break stream,
            Err(_) if waited < 500 => {
                waited += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => return Err(format!("no coordinator answered: {error}")),
        }
    };
    let settle = || std::thread::sleep(Duration::from_millis(300));
    settle();
    let before = live_bytes();
    let mut streams = Vec::with_capacity(clients);
    for _ in 0..clients {
        streams.push(connect().map_err(|e| e.to_string())?);
    }
    settle();
    let after = live_bytes();
    drop(streams);
    drop(first);
    let _ = stop.send(());
    let _ = runtime.block_on(serving);
    drop(runtime);
    let _ = std::fs::remove_dir_all(&root);
    Ok((after - before) as f64 / clients as f64)
}

fn main() {
    let quick = quick();
    if quick {
        memory_table(2_000, 16);
    } else {
        memory_table(100_000, 256);
    }
    let mut criterion = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .configure_from_args();
    let scale = if quick { 1 } else { 4 };
    benchmarks(&mut criterion, scale);
    criterion.final_summary();
    summary(scale, if quick { 1 } else { 21 });
}
