//! How a leader's error crosses to its joiners (SPEC.md §3.4): as a
//! [`Failure`] with a name, a message and an optional code.

use std::any::Any;
use std::error::Error;
use std::fmt;
use std::io;

use crate::protocol::{Failure, FailureCode};

/// The parts of an error that cross to the joiners (SPEC.md §3.4).
///
/// Implemented for every error a work is likely to return: any
/// [`std::error::Error`], `anyhow::Error`, `Box<dyn Error + Send + Sync>`,
/// a `String` — anything that implements [`Display`](fmt::Display). The
/// name is [`ERROR_NAME`] and the message the error's text, except:
///
/// - a [`Failure`] crosses as it is: return one to choose the name and the
///   code yourself;
/// - an [`io::Error`] keeps its OS error number as the code, and so does
///   a boxed one;
/// - a boxed [`Failure`] crosses as it is too.
///
/// A work that fails with `anyhow::Error` (no `map_err` needed):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("sf-doc-anyhow-{}", std::process::id()));
/// let flights = single_flight::SingleFlight::open(&dir).await?;
/// let result = flights
///     .run("config", |_token| async {
///         let text: String = std::fs::read_to_string("/nonexistent/config")?;
///         Ok::<_, anyhow::Error>(text)
///     })
///     .await;
/// assert!(matches!(result, Err(single_flight::RunError::Work(_))));
/// # flights.close().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
///
/// And with `Box<dyn Error + Send + Sync>`, whose OS error number crosses
/// as the code:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("sf-doc-box-{}", std::process::id()));
/// use single_flight::{FailureCode, IntoFailure, RunError};
///
/// let flights = single_flight::SingleFlight::open(&dir).await?;
/// let result = flights
///     .run("disk", |_token| async {
///         let full = std::io::Error::from_raw_os_error(28);
///         Err::<(), Box<dyn std::error::Error + Send + Sync>>(full.into())
///     })
///     .await;
/// let Err(RunError::Work(error)) = result else { panic!("the work failed") };
/// let failure = error.to_failure(); // what its joiners received
/// assert_eq!(failure.name, single_flight::ERROR_NAME);
/// assert_eq!(failure.code, Some(FailureCode::Number(28)));
/// # flights.close().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub trait IntoFailure {
    /// What crosses to the joiners of the flight this error ends.
    fn to_failure(&self) -> Failure;
}

/// The name of a failure made from an error that is not a [`Failure`]
/// (SPEC.md §3.4). Fixed, because Rust has no stable name for a type: the
/// standard library says that `std::any::type_name`'s output may change
/// between compilers, and for most error types it is just `Error` anyway.
pub const ERROR_NAME: &str = "Error";

impl<E: fmt::Display + 'static> IntoFailure for E {
    fn to_failure(&self) -> Failure {
        let any: &dyn Any = self;
        if let Some(failure) = any.downcast_ref::<Failure>() {
            return failure.clone();
        }
        // A boxed error is looked into; any other is only what `Display`
        // and its own type say.
        let inner: Option<&(dyn Error + 'static)> =
            if let Some(boxed) = any.downcast_ref::<Box<dyn Error + Send + Sync>>() {
                Some(&**boxed)
            } else if let Some(boxed) = any.downcast_ref::<Box<dyn Error + Send>>() {
                Some(&**boxed)
            } else if let Some(boxed) = any.downcast_ref::<Box<dyn Error>>() {
                Some(&**boxed)
            } else {
                None
            };
        if let Some(failure) = inner.and_then(|inner| inner.downcast_ref::<Failure>()) {
            return failure.clone();
        }
        let io = any
            .downcast_ref::<io::Error>()
            .or_else(|| inner.and_then(|inner| inner.downcast_ref::<io::Error>()));
        Failure {
            name: ERROR_NAME.to_owned(),
            message: self.to_string(),
            code: io
                .and_then(io::Error::raw_os_error)
                .map(|errno| FailureCode::Number(i64::from(errno))),
        }
    }
}

/// The name of the failure a leader's panic lands as (SPEC.md §9.6).
const PANIC_NAME: &str = "Panic";

/// The message of a panic whose payload is not a string (`panic_any` with
/// another type): nothing says how to show it, and a type name would tell
/// the joiners little more than this.
const NOT_A_STRING: &str = "the work panicked with a payload that is not a string";

/// The failure that a panic with `payload` lands as (SPEC.md §9.6). Pass
/// the payload itself (`&*boxed`), not its box, which is an `Any` too.
pub(crate) fn panic_failure(payload: &(dyn Any + Send)) -> Failure {
    let message = match payload.downcast_ref::<&'static str>() {
        Some(text) => (*text).to_owned(),
        None => match payload.downcast_ref::<String>() {
            Some(text) => text.clone(),
            None => NOT_A_STRING.to_owned(),
        },
    };
    Failure {
        name: PANIC_NAME.to_owned(),
        message,
        code: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_their_errno() {
        let failure = io::Error::from_raw_os_error(28).to_failure();
        assert_eq!(failure.name, ERROR_NAME);
        assert_eq!(failure.code, Some(FailureCode::Number(28)));
        assert_eq!(
            failure.message,
            io::Error::from_raw_os_error(28).to_string()
        );
    }

    /// §9.6: `panic!` makes a `&str` payload without arguments and a
    /// `String` with them; any other payload gets the fixed text.
    #[test]
    fn panics_cross_with_their_message() {
        let payload = |panic: fn()| std::panic::catch_unwind(panic).unwrap_err();
        let literal = payload(|| panic!("no cat"));
        let formatted = payload(|| panic!("no cat at index {}", 7));
        let number = payload(|| std::panic::panic_any(7_u32));
        for (payload, message) in [
            (literal, "no cat"),
            (formatted, "no cat at index 7"),
            (number, NOT_A_STRING),
        ] {
            let failure = panic_failure(&*payload);
            assert_eq!(failure.name, "Panic");
            assert_eq!(failure.message, message);
            assert_eq!(failure.code, None);
        }
    }

    #[test]
    fn failures_cross_unchanged() {
        let failure = Failure {
            name: "Busy".into(),
            message: "try later".into(),
            code: Some(FailureCode::Text("EBUSY".into())),
        };
        assert_eq!(failure.to_failure(), failure);
        assert_eq!(failure.to_string(), "Busy: try later (EBUSY)");
        let boxed: Box<dyn Error + Send + Sync> = Box::new(failure.clone());
        assert_eq!(boxed.to_failure(), failure);
    }

    /// §3.4: every other error crosses as `Error` with its text, whatever
    /// its type (the name must not depend on the compiler).
    #[test]
    fn other_errors_cross_with_the_fixed_name() {
        #[derive(Debug)]
        struct Quota;
        impl fmt::Display for Quota {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("over quota")
            }
        }
        impl Error for Quota {}
        let boxed: Box<dyn Error + Send + Sync> = "no cat".into();
        for (failure, message) in [
            (Quota.to_failure(), "over quota"),
            (boxed.to_failure(), "no cat"),
            (String::from("plain text").to_failure(), "plain text"),
        ] {
            assert_eq!(failure.name, ERROR_NAME);
            assert_eq!(failure.message, message);
            assert_eq!(failure.code, None);
        }
    }
}
