//! How a leader's error crosses to its joiners (SPEC.md §3.4): as a
//! [`Failure`] with a name, a message and an optional code.

use std::any::Any;
use std::error::Error;
use std::io;

use crate::protocol::{Failure, FailureCode};

/// The parts of an error that cross to the joiners. Implemented for every
/// `std::error::Error`; an [`io::Error`] keeps its OS error number as the
/// code, and a [`Failure`] crosses as it is.
pub trait IntoFailure {
    fn to_failure(&self) -> Failure;
}

impl<E: Error + 'static> IntoFailure for E {
    fn to_failure(&self) -> Failure {
        let error: &(dyn Error + 'static) = self;
        if let Some(failure) = error.downcast_ref::<Failure>() {
            return failure.clone();
        }
        let code = error
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
            .map(|errno| FailureCode::Number(i64::from(errno)));
        Failure {
            name: short_type_name::<E>().to_owned(),
            message: self.to_string(),
            code,
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

/// `std::io::Error` → `Error`: the last path segment, without generics.
fn short_type_name<E>() -> &'static str {
    let full = std::any::type_name::<E>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_their_errno() {
        let failure = io::Error::from_raw_os_error(28).to_failure();
        assert_eq!(failure.name, "Error");
        assert_eq!(failure.code, Some(FailureCode::Number(28)));
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
    }
}
