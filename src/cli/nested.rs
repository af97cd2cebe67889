//! A `run` made by the COMMAND of another flight names that flight as its
//! parent (SPEC.md §17.3), so that the coordinator refuses it at once when
//! it would wait for a flight that waits for its parent.
//!
//! The leader gives COMMAND `SINGLE_FLIGHT_TOKEN` (§13.1) and
//! `SINGLE_FLIGHT_PLACE`, the directory or cluster of the flight. A token is
//! unique within its directory or cluster only (every directory's epochs
//! start at 1): a run of another place takes no parent, rather than let its
//! coordinator take the token for one of its own flights.

use single_flight::FencingToken;

use super::place::Place;

/// The variable that names the flight's directory or cluster to COMMAND.
pub const PLACE_VARIABLE: &str = "SINGLE_FLIGHT_PLACE";

/// The variable that holds the flight's token (SPEC.md §13.1).
const TOKEN_VARIABLE: &str = "SINGLE_FLIGHT_TOKEN";

/// How `SINGLE_FLIGHT_PLACE` names `place` for a run of `key`: the
/// directory's absolute path with every symbolic link resolved (another run
/// may name it by another path), or the cluster's name and its sorted etcd
/// endpoints, with `key`'s shard when it has several (SPEC.md §19.5): a
/// token names a flight of its shard only, so a run of a key of another
/// shard takes no parent.
pub fn identity(place: &Place, key: &str) -> String {
    if let Some((name, endpoints)) = place.cluster() {
        let mut endpoints = endpoints.to_vec();
        endpoints.sort();
        let count = place.shard_count();
        if count.get() > 1 {
            let shard = count.of_bytes(key.as_bytes());
            return format!("cluster {name} {shard} at {}", endpoints.join(","));
        }
        return format!("cluster {name} at {}", endpoints.join(","));
    }
    match place.directory() {
        Some(directory) => std::fs::canonicalize(directory)
            .unwrap_or_else(|_| directory.to_owned())
            .display()
            .to_string(),
        None => place.describe(),
    }
}

/// The parent of a run of the place `identity`: the flight whose COMMAND
/// this process is part of, when the environment names one of that place.
/// A token that does not parse is no parent: the run behaves as one made
/// outside any flight.
pub fn parent_of(identity: &str) -> Option<FencingToken> {
    let place = std::env::var(PLACE_VARIABLE).ok()?;
    if place != identity {
        return None;
    }
    std::env::var(TOKEN_VARIABLE).ok()?.parse().ok()
}
