//! The fenced resource (SPEC.md §6): an SQLite table keyed by flight key
//! that stores the highest token that wrote, and refuses a write whose token
//! is not higher, in the same transaction as the check. This is how a real
//! user's storage would use the token.
//!
//! Every attempt, accepted or refused, is also recorded in `writes`, whose
//! row ids give the commit order: the checker reads the resource itself, not
//! only the workers' logs, which a `kill -9` may cut short.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::records::now_us;

/// How long a write waits for another process's transaction. Transactions
/// last about a hundred microseconds; the wait is only long when the
/// nemesis stopped a process inside one, and then the work fails rather
/// than hang. The write blocks its worker's thread meanwhile (and so does
/// a commit's checkpoint on a slow disk): the worker logs how long each
/// write held its thread, and the checker does not count that time against
/// the deadlines of the calls that waited behind it.
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(250);

pub struct Fence {
    connection: Connection,
}

/// What the resource said to one write.
pub enum WriteResult {
    Accepted { previous: Option<u64> },
    Refused { highest: u64 },
    Failed(String),
}

/// One write as its worker saw it.
pub struct Written {
    pub result: WriteResult,
    /// When the write lock was taken (the order of accepted writes).
    pub t: u64,
    /// When the call began and ended: the worker's thread was blocked in
    /// between.
    pub began: u64,
    pub ended: u64,
}

/// One attempt, as the resource recorded it.
pub struct WriteRow {
    pub sequence: i64,
    pub key: String,
    pub token: u64,
    pub worker: u32,
    pub call: u64,
    pub t: u64,
    pub accepted: bool,
}

/// Creates the database before any worker opens it: WAL mode is a property
/// of the file, set once.
pub fn create(path: &Path) -> rusqlite::Result<()> {
    let connection = Connection::open(path)?;
    connection.pragma_update(None, "journal_mode", "wal")?;
    connection.execute_batch(
        "CREATE TABLE IF NOT EXISTS fence (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS writes (
             sequence INTEGER PRIMARY KEY AUTOINCREMENT,
             key TEXT NOT NULL, token INTEGER NOT NULL, worker INTEGER NOT NULL,
             call INTEGER NOT NULL, t INTEGER NOT NULL, accepted INTEGER NOT NULL,
             highest INTEGER);",
    )
}

impl Fence {
    pub fn open(path: &Path) -> rusqlite::Result<Fence> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        // NORMAL in WAL mode survives the death of a process (only a power
        // loss could lose the last commits), which is all a kill -9 tests.
        connection.pragma_update(None, "synchronous", "normal")?;
        Ok(Fence { connection })
    }

    /// Writes `token` for `key` if it is higher than every token that wrote
    /// before: check and write in one `BEGIN IMMEDIATE` transaction. Says
    /// also when the write took the lock, and when it began and ended on
    /// this thread.
    pub fn write(&mut self, key: &str, token: u64, worker: u32, call: u64) -> Written {
        let began = now_us();
        let mut t = began;
        let result = (|| -> rusqlite::Result<WriteResult> {
            let transaction = self
                .connection
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Read the time while holding the write lock: the times of
            // accepted writes are then in commit order.
            t = now_us();
            let highest: Option<i64> = transaction
                .query_row("SELECT token FROM fence WHERE key = ?1", [key], |row| {
                    row.get(0)
                })
                .optional()?;
            let highest = highest.map(|h| h as u64);
            let accepted = highest.is_none_or(|h| token > h);
            if accepted {
                transaction.execute(
                    "INSERT INTO fence (key, token) VALUES (?1, ?2)
                     ON CONFLICT (key) DO UPDATE SET token = excluded.token",
                    params![key, token as i64],
                )?;
            }
            transaction.execute(
                "INSERT INTO writes (key, token, worker, call, t, accepted, highest)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    key,
                    token as i64,
                    worker,
                    call as i64,
                    t as i64,
                    accepted,
                    highest.map(|h| h as i64)
                ],
            )?;
            transaction.commit()?;
            Ok(match highest {
                Some(highest) if !accepted => WriteResult::Refused { highest },
                previous => WriteResult::Accepted { previous },
            })
        })();
        Written {
            result: result.unwrap_or_else(|error| WriteResult::Failed(error.to_string())),
            t,
            began,
            ended: now_us(),
        }
    }
}

/// Every attempt, in commit order.
pub fn read_writes(path: &Path) -> rusqlite::Result<Vec<WriteRow>> {
    let connection = Connection::open(path)?;
    let mut statement = connection.prepare(
        "SELECT sequence, key, token, worker, call, t, accepted FROM writes ORDER BY sequence",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(WriteRow {
            sequence: row.get(0)?,
            key: row.get(1)?,
            token: row.get::<_, i64>(2)? as u64,
            worker: row.get(3)?,
            call: row.get::<_, i64>(4)? as u64,
            t: row.get::<_, i64>(5)? as u64,
            accepted: row.get(6)?,
        })
    })?;
    rows.collect()
}
