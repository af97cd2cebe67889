//! A strict reading of an OpenMetrics exposition (SPEC.md §13.5), shared by
//! the command's unit tests and tests/command/cli.rs.
//!
//! The text is parsed by `nom-openmetrics`, an OpenMetrics parser written
//! from the specification's grammar by others (it requires the final
//! `# EOF`, a newline after every line and nothing after the end), and what
//! the grammar leaves to the rest of the specification is checked here: one
//! `TYPE` and one `HELP` per family, naming it, before its samples; family
//! names unique; a counter's samples named `<family>_total`, a gauge's the
//! family's own name; counter values neither negative nor NaN; no two samples
//! of one family with the same labels.
//!
//! Why this parser: `prometheus-parse` reads the older Prometheus text format
//! (it takes `# EOF` for a comment and does not relate a counter's samples to
//! `_total`); `openmetrics-parser` checks both but is LGPL-3.0 and has not
//! changed since 2024; `nom-openmetrics` is MIT, maintained, and parses the
//! OpenMetrics line grammar up to the final `# EOF`, leaving the rules above
//! to its caller.

use std::collections::{BTreeMap, BTreeSet};

use nom_openmetrics::{MetricDescriptor, MetricType, parser};

/// One sample: its name, and its labels in the order written.
pub type SampleKey = (String, Vec<(String, String)>);

/// Reads `text`, panicking with what is wrong, and returns every sample's
/// value.
pub fn read(text: &str) -> BTreeMap<SampleKey, f64> {
    let (rest, families) = match parser::openmetrics(text) {
        Ok(parsed) => parsed,
        Err(error) => panic!("not OpenMetrics: {error:?}\n{text}"),
    };
    assert!(rest.is_empty(), "text after # EOF: {rest:?}");
    let mut names = BTreeSet::new();
    let mut samples = BTreeMap::new();
    for family in &families {
        let [
            MetricDescriptor::Type {
                metric: typed,
                r#type,
            },
            MetricDescriptor::Help {
                metric: helped,
                help,
            },
        ] = &family.descriptors[..]
        else {
            panic!(
                "a family needs exactly a TYPE then a HELP: {:?}",
                family.descriptors
            );
        };
        assert_eq!(typed, helped, "TYPE and HELP name one family");
        assert!(!help.is_empty(), "{typed} has an empty HELP");
        assert!(names.insert(typed.to_string()), "{typed} appears twice");
        let sample_name = match r#type {
            MetricType::Counter => {
                assert!(
                    !typed.ends_with("_total"),
                    "a counter family is named without _total: {typed}"
                );
                format!("{typed}_total")
            }
            MetricType::Gauge => typed.to_string(),
            other => panic!("{typed} is a {other}: only counters and gauges are written"),
        };
        for sample in &family.samples {
            assert_eq!(sample.name(), sample_name, "a sample of {typed}");
            if *r#type == MetricType::Counter {
                assert!(
                    sample.number() >= 0.0,
                    "{sample_name} counts {}",
                    sample.number()
                );
            }
            let labels: Vec<(String, String)> = sample
                .labels()
                .iter()
                .map(|label| (label.name.to_owned(), label.value.clone()))
                .collect();
            let key = (sample_name.clone(), labels);
            assert!(
                samples.insert(key.clone(), sample.number()).is_none(),
                "{key:?} appears twice"
            );
        }
    }
    samples
}

/// The value of the sample `name` whose labels are `labels`.
pub fn value(samples: &BTreeMap<SampleKey, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let key = (
        name.to_owned(),
        labels
            .iter()
            .map(|(label, value)| (label.to_string(), value.to_string()))
            .collect(),
    );
    match samples.get(&key) {
        Some(value) => *value,
        None => panic!("no sample {key:?} among {:?}", samples.keys()),
    }
}
