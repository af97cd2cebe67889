//! Who coordinates (SPEC.md §7): the SQLite claim on `flight.lock`, the
//! durable epoch in `flight.epoch`, and the checks on the directory.
