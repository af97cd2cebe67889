//! A damaged `flight.epoch` (SPEC.md §7.3 item 2.3): the election must fail
//! closed, with an error naming the file, and leave the file as it is.
//! Each check runs in a directory of its own, so that it cannot end the
//! main run: a directory that served one term, then has its epoch file
//! damaged, then sees a call and a `serve` campaign in it.

use std::path::Path;
use std::time::Duration;

use single_flight::{Role, RunError, SingleFlight};

use crate::common::Shared;
use crate::records::Verdict;

/// The damages, each a way real files get broken: truncated by a crash of
/// a tool that rewrote it in place, overwritten by a person, replaced.
const VARIANTS: [&str; 8] = [
    "empty",
    "garbage",
    "zero",
    "too_large",
    "negative",
    "binary",
    "exhausted",
    "directory",
];

/// How long a campaign may take to report the damage. A campaign is one
/// attempt every 10 ms; this is hundreds of them.
const CAMPAIGN_PATIENCE: Duration = Duration::from_secs(3);

/// Runs one check; returns the variant, the verdict and what was seen.
pub async fn check(shared: &Shared, draw: u64, number: u64) -> (String, Verdict, String) {
    let variant = VARIANTS[(draw % VARIANTS.len() as u64) as usize].to_owned();
    let dir = shared.paths.epochs.join(format!("e{number}"));
    let (verdict, detail) = check_in(&dir, &variant).await;
    let _ = std::fs::remove_dir_all(&dir);
    (variant, verdict, detail)
}

async fn check_in(dir: &Path, variant: &str) -> (Verdict, String) {
    // A directory that has served a term, as a real one would have.
    let flights = match SingleFlight::open(dir).await {
        Ok(flights) => flights,
        Err(error) => {
            return (
                Verdict::Violation,
                format!("cannot open a fresh directory: {error}"),
            );
        }
    };
    let first = flights
        .call("first")
        .deadline(CAMPAIGN_PATIENCE)
        .run(|_| async { Ok::<_, std::io::Error>(1) })
        .await;
    flights.close().await;
    match first {
        Ok(landed) if landed.role == Role::Led => {}
        other => {
            return (
                Verdict::Violation,
                format!("the first term of a fresh directory did not lead: {other:?}"),
            );
        }
    }
    let epoch_file = dir.join("flight.epoch");
    if let Err(error) = damage(&epoch_file, variant) {
        return (
            Verdict::Inconclusive,
            format!("cannot damage the file: {error}"),
        );
    }
    let before = snapshot(&epoch_file);
    let named = epoch_file.display().to_string();

    // A call campaigns and must be told why no coordinator can be elected.
    let flights = match SingleFlight::open(dir).await {
        Ok(flights) => flights,
        Err(error) => {
            return (
                Verdict::Violation,
                format!("open refused the directory: {error}"),
            );
        }
    };
    let call = flights
        .call("after")
        .deadline(CAMPAIGN_PATIENCE)
        .run(|_| async { Ok::<_, std::io::Error>(2) })
        .await;
    flights.close().await;
    let call_text = match &call {
        Ok(landed) => format!("a term started and the call got {landed:?}"),
        Err(error) => error.to_string(),
    };
    let call_ok = matches!(&call, Err(RunError::Unavailable(_))) && call_text.contains(&named);

    // `serve` campaigns too and must return the error.
    let serving = SingleFlight::builder(dir).serve(tokio::time::sleep(CAMPAIGN_PATIENCE));
    let served = tokio::time::timeout(CAMPAIGN_PATIENCE * 2, serving).await;
    let serve_text = match &served {
        Ok(Ok(())) => "serve ran for its whole time without an error".to_owned(),
        Ok(Err(error)) => error.to_string(),
        Err(_) => "serve did not return".to_owned(),
    };
    let serve_ok = matches!(&served, Ok(Err(_))) && serve_text.contains(&named);

    let unchanged = snapshot(&epoch_file) == before;
    let detail = format!(
        "call: {}; serve: {}; file {}",
        shorten(&call_text),
        shorten(&serve_text),
        if unchanged { "unchanged" } else { "CHANGED" }
    );
    let verdict = if call_ok && serve_ok && unchanged {
        Verdict::AsSpecified
    } else {
        Verdict::Violation
    };
    (verdict, detail)
}

fn damage(path: &Path, variant: &str) -> std::io::Result<()> {
    let bytes: &[u8] = match variant {
        "empty" => b"",
        "garbage" => b"forty-two\n",
        "zero" => b"0\n",
        "too_large" => b"99999999999\n",
        "negative" => b"-3\n",
        "binary" => b"\xff\xfe\x00\x01",
        "exhausted" => b"2147483647\n",
        _ => {
            std::fs::remove_file(path)?;
            return std::fs::create_dir(path);
        }
    };
    std::fs::write(path, bytes)
}

/// The file's bytes, or a marker for a directory or a missing file.
fn snapshot(path: &Path) -> Vec<u8> {
    if path.is_dir() {
        return b"<directory>".to_vec();
    }
    std::fs::read(path).unwrap_or_else(|_| b"<missing>".to_vec())
}

fn shorten(text: &str) -> String {
    const SHOWN: usize = 240;
    if text.len() <= SHOWN {
        return text.to_owned();
    }
    let mut end = SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
