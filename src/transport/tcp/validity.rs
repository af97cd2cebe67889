//! When a certificate expires, and times written for people: a walk of a
//! certificate's DER to its validity's notAfter (rustls and webpki check
//! the dates but do not expose them), and RFC 3339 in UTC for messages.
//!
//! Written here rather than taken from an X.509 crate: the one field needed
//! lies on a fixed path (TBSCertificate → validity → notAfter), and a parser
//! crate would bring a tree of dependencies into every cluster build for
//! it. The walk is bounds-checked at every step and returns `None` on any
//! byte it does not expect, so a damaged file gives no expiry and no panic
//! (tested on every truncation and every single-byte change).

use std::time::Duration;

use tokio_rustls::rustls::pki_types::UnixTime;

/// One DER element at the start of `input`: its tag, its contents and what
/// follows it; `None` when the bytes are not DER of a kind a certificate's
/// path to its validity uses (a tag of one byte, a definite length of at
/// most four bytes).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (length, rest) = rest.split_at(count);
        let length = length
            .iter()
            .fold(0u64, |length, byte| (length << 8) | u64::from(*byte));
        (usize::try_from(length).ok()?, rest)
    };
    if rest.len() < length {
        return None;
    }
    let (contents, after) = rest.split_at(length);
    Some((tag, contents, after))
}

const DER_SEQUENCE: u8 = 0x30;
const DER_INTEGER: u8 = 0x02;
const DER_VERSION: u8 = 0xa0;
const DER_UTC_TIME: u8 = 0x17;
const DER_GENERALIZED_TIME: u8 = 0x18;

/// When a certificate expires: its notAfter (RFC 5280 §4.1.2.5).
///
/// A walk of a few DER elements (Certificate → TBSCertificate → version,
/// serialNumber, signature, issuer → validity → notAfter) rather than a
/// crate: no crate in the build exposes it (rustls-webpki reads it but
/// keeps it to itself), and a general X.509 parser would add several crates
/// for one date. Every step checks its bounds and gives up with `None` on
/// anything unexpected, so no bytes can make it panic.
pub(super) fn not_after(certificate: &[u8]) -> Option<UnixTime> {
    let (DER_SEQUENCE, certificate, _) = der_element(certificate)? else {
        return None;
    };
    let (DER_SEQUENCE, mut fields, _) = der_element(certificate)? else {
        return None;
    };
    if let (DER_VERSION, _, after) = der_element(fields)? {
        fields = after;
    }
    for expected in [DER_INTEGER, DER_SEQUENCE, DER_SEQUENCE] {
        let (tag, _, after) = der_element(fields)?;
        if tag != expected {
            return None;
        }
        fields = after;
    }
    let (DER_SEQUENCE, validity, _) = der_element(fields)? else {
        return None;
    };
    let (_, _, after_not_before) = der_element(validity)?;
    let seconds = match der_element(after_not_before)? {
        (DER_UTC_TIME, time, _) => {
            // RFC 5280 §4.1.2.5.1: YYMMDDHHMMSSZ, years 50–99 are 19YY.
            let (year, rest) = digits(time, 2)?;
            let year = if year >= 50 { 1900 + year } else { 2000 + year };
            time_of(year, rest)?
        }
        (DER_GENERALIZED_TIME, time, _) => {
            let (year, rest) = digits(time, 4)?;
            time_of(year, rest)?
        }
        _ => return None,
    };
    Some(UnixTime::since_unix_epoch(Duration::from_secs(seconds)))
}

/// The number written in the first `count` ASCII digits of `text`, and the
/// rest.
fn digits(text: &[u8], count: usize) -> Option<(u64, &[u8])> {
    if text.len() < count {
        return None;
    }
    let (number, rest) = text.split_at(count);
    let mut value = 0;
    for digit in number {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(digit - b'0');
    }
    Some((value, rest))
}

/// Seconds since the epoch of `year` and the rest of a time,
/// MMDDHHMMSSZ, as RFC 5280 writes both forms (in UTC, with seconds).
fn time_of(year: u64, rest: &[u8]) -> Option<u64> {
    let (month, rest) = digits(rest, 2)?;
    let (day, rest) = digits(rest, 2)?;
    let (hour, rest) = digits(rest, 2)?;
    let (minute, rest) = digits(rest, 2)?;
    let (second, rest) = digits(rest, 2)?;
    if rest != b"Z"
        || year < 1970
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar, from
/// 1970 on (Howard Hinnant's `days_from_civil`, for unsigned years).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A time in seconds since the epoch as RFC 3339 in UTC
/// (`2026-03-01T12:00:00Z`), for messages: small enough to write rather
/// than to take a date crate for (Hinnant's `civil_from_days`).
pub fn rfc3339(seconds: u64) -> String {
    let days = seconds / 86_400;
    let second_of_day = seconds % 86_400;
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3_600,
        second_of_day % 3_600 / 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;

    use super::*;

    /// Certificates made with `openssl ca -startdate/-enddate` (see
    /// tests/support/make-certs.sh): a version 1 certificate whose
    /// notAfter, 2036-02-29T12:34:56Z, is a UTCTime; one whose notAfter,
    /// 2061-03-01T00:00:00Z, is a GeneralizedTime (from 2050 on, RFC 5280);
    /// a version 3 one (with extensions) that expired on
    /// 1999-12-31T23:59:59Z, a UTCTime of the 1900s.
    const UTC_TIME: &str = include_str!("testdata/utc-time.pem");
    const GENERALIZED_TIME: &str = "-----BEGIN CERTIFICATE-----
MIIBKTCBzwIUQLEHiIMh8PMHwpBFwZM9SOs8i/owCgYIKoZIzj0EAwIwIDEeMBwG
A1UEAwwVc2luZ2xlLWZsaWdodCB0ZXN0IENBMCAXDTI0MDEwMTAwMDAwMFoYDzIw
NjEwMzAxMDAwMDAwWjAMMQowCAYDVQQDDAF0MFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEaf2JItfB+02P078EeQgQ0dsgmKsBGLEDluif9YdkYTMjv+eVFac1jx8n
6esmGY8MsBtpu4D6gvdT8/dDjbVDVTAKBggqhkjOPQQDAgNJADBGAiEApou546mi
h2unUWpg6hF5NSNKrVZtclOVshuq9OPEkpsCIQCnyX4vjDBYWJIntt1BnB1G8dtd
mspOzYWLZNririZQOA==
-----END CERTIFICATE-----
";
    const VERSION_3: &str = "-----BEGIN CERTIFICATE-----
MIIBfTCCASSgAwIBAgIUK7GzUCDGKNXA1n6xLVNRwMVO5p8wCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVc2luZ2xlLWZsaWdodCB0ZXN0IENBMB4XDTI0MDEwMTAwMDAw
MFoXDTk5MTIzMTIzNTk1OVowDDEKMAgGA1UEAwwBdDBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABGn9iSLXwftNj9O/BHkIENHbIJirARixA5bon/WHZGEzI7/nlRWn
NY8fJ+nrJhmPDLAbabuA+oL3U/P3Q421Q1WjUDBOMAwGA1UdEwEB/wQCMAAwHQYD
VR0OBBYEFHEoKOCmTJCgVExHhNc46yL75l6OMB8GA1UdIwQYMBaAFFHMKilkoln0
NMq7NTe3fMiS0+mgMAoGCCqGSM49BAMCA0cAMEQCICJ/uM+a5MWU4YAjoNa3qeRy
v0G5kWQYspPICQ+JDts1AiABkgbqNauuuvWzANd5OniLY3jql12J9zJUGX2/poYJ
zw==
-----END CERTIFICATE-----
";

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    fn expiry(pem: &str) -> Option<u64> {
        not_after(&der(pem)).map(|time| time.as_secs())
    }

    /// §14.5: the notAfter of both time forms, with and without a version
    /// field, as `date -u -d … +%s` gives them.
    #[test]
    fn a_certificates_expiry_is_read_from_its_validity() {
        assert_eq!(expiry(UTC_TIME), Some(2_087_901_296));
        assert_eq!(expiry(GENERALIZED_TIME), Some(2_876_860_800));
        assert_eq!(expiry(VERSION_3), Some(946_684_799));
    }

    /// Bytes from a file never panic the walk: every truncation and every
    /// single-byte change of a certificate gives a time or `None`.
    #[test]
    fn damaged_certificates_give_no_expiry_and_no_panic() {
        let certificate = der(VERSION_3);
        for length in 0..certificate.len() {
            let _ = not_after(&certificate[..length]);
        }
        assert_eq!(not_after(&certificate[..40]), None);
        for index in 0..certificate.len() {
            for byte in [0x00, 0x1f, 0x30, 0x7f, 0x80, 0x84, 0x85, 0xff] {
                let mut changed = certificate.clone();
                changed[index] = byte;
                let _ = not_after(&changed);
            }
        }
        // An indefinite length (not DER) and a length past the end.
        assert_eq!(not_after(&[0x30, 0x80, 0x00, 0x00]), None);
        assert_eq!(not_after(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(not_after(&[]), None);
    }

    #[test]
    fn times_are_checked_and_counted_from_the_epoch() {
        assert_eq!(time_of(1970, b"0101000000Z"), Some(0));
        assert_eq!(time_of(2000, b"0301000000Z"), Some(951_868_800));
        assert_eq!(time_of(2000, b"0229235959Z"), Some(951_868_799));
        assert_eq!(time_of(2024, b"1301000000Z"), None, "month 13");
        assert_eq!(time_of(2024, b"0101000000"), None, "no Z");
        assert_eq!(time_of(2024, b"0101000000+0100"), None, "not UTC");
        assert_eq!(time_of(2024, b"01010000006Z"), None);
        assert_eq!(time_of(1969, b"1231235959Z"), None, "before the epoch");
        assert_eq!(digits(b"2x", 2), None);
    }

    #[test]
    fn times_are_written_as_rfc_3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(2_087_901_296), "2036-02-29T12:34:56Z");
        assert_eq!(rfc3339(2_876_860_800), "2061-03-01T00:00:00Z");
        assert_eq!(rfc3339(946_684_799), "1999-12-31T23:59:59Z");
        for seconds in (0..5_000_000_000u64).step_by(86_399 * 37) {
            let text = rfc3339(seconds);
            let (year, rest) = digits(text.as_bytes(), 4).unwrap();
            let rest: Vec<u8> = rest.iter().copied().filter(u8::is_ascii_digit).collect();
            let mut rest = rest;
            rest.push(b'Z');
            assert_eq!(time_of(year, &rest), Some(seconds), "{text}");
        }
    }
}
