//! Medians, percentiles and their spread over rounds.

/// The `p`-th percentile (0–100) of `values`, by nearest rank.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    assert!(!values.is_empty(), "a percentile of no values");
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

/// One figure over the rounds of a run: the median of the per-round values
/// and their range.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub median: f64,
    pub low: f64,
    pub high: f64,
    pub rounds: usize,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        Some(Spread {
            median: median(values),
            low: values.iter().copied().fold(f64::INFINITY, f64::min),
            high: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            rounds: values.len(),
        })
    }

    /// `median (low–high)` with `digits` decimals, each value divided by
    /// `scale`.
    pub fn show(&self, scale: f64, digits: usize) -> String {
        if self.rounds == 1 {
            return format!("{:.digits$}", self.median / scale);
        }
        format!(
            "{:.digits$} ({:.digits$}–{:.digits$})",
            self.median / scale,
            self.low / scale,
            self.high / scale
        )
    }
}

/// Nanoseconds to microseconds, for display.
pub const MICROS: f64 = 1e3;
/// Nanoseconds to milliseconds, for display.
pub const MILLIS: f64 = 1e6;

/// Points kept of a distribution for its picture: a curve drawn through
/// 500 quantiles is smooth at a figure's width (some 500 pixels a panel),
/// and a round's calls (up to a few hundred thousand) need not be kept.
pub const CDF_POINTS: usize = 500;

/// A distribution kept as [`CDF_POINTS`] quantiles, evenly spaced in rank:
/// quantile `i` is the value below which a fraction `(i + 0.5) / len` of
/// the values lie.
#[derive(Clone, Debug, Default)]
pub struct Cdf {
    pub quantiles: Vec<f64>,
}

impl Cdf {
    pub fn of(values: &[f64]) -> Cdf {
        if values.is_empty() {
            return Cdf::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let points = CDF_POINTS.min(sorted.len());
        let quantiles = (0..points)
            .map(|i| {
                let rank = (i as f64 + 0.5) / points as f64 * sorted.len() as f64;
                sorted[(rank as usize).min(sorted.len() - 1)]
            })
            .collect();
        Cdf { quantiles }
    }

    /// The distribution of the rounds together, each round weighing the
    /// same (their quantiles pooled and taken again).
    pub fn pooled<'a>(rounds: impl IntoIterator<Item = &'a Cdf>) -> Cdf {
        let all: Vec<f64> = rounds
            .into_iter()
            .flat_map(|cdf| cdf.quantiles.iter().copied())
            .collect();
        Cdf::of(&all)
    }

    /// `(value, fraction of values at or below it)` along the curve.
    pub fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        let len = self.quantiles.len() as f64;
        self.quantiles
            .iter()
            .enumerate()
            .map(move |(i, &value)| (value, (i as f64 + 0.5) / len))
    }
}
