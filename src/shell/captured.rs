//! The log lines of a test, as tracing's formatter writes them (no colours,
//! no time), for the tests that check what is logged and under which target
//! (SPEC.md §13.1).

use std::io;
use std::sync::{Arc, Mutex};

/// What a thread logged since [`Captured::start`].
#[derive(Clone, Default)]
pub(super) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Captures every event of this thread at debug and above until the
    /// guard drops: in a current-thread runtime, those of its tasks too.
    pub(super) fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// The lines written so far.
    pub(super) fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().expect("no test panicked while logging");
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The lines of `target` whose message starts with `message`.
    pub(super) fn count(&self, target: &str, message: &str) -> usize {
        let prefix = format!(" {target}: {message}");
        self.lines()
            .iter()
            .filter(|line| line.contains(&prefix))
            .count()
    }
}

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .expect("no test panicked while logging")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
