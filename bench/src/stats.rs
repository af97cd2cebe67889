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

/// The spread of `values` as [`Spread::show`] shows it, or `None` when
/// there are none (a figure that this run did not measure).
pub fn shown(values: &[f64], scale: f64, digits: usize) -> Option<String> {
    Spread::of(values).map(|spread| spread.show(scale, digits))
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

    /// The distribution of the rounds together, their quantiles pooled and
    /// taken again: each round weighs the same when each kept
    /// [`CDF_POINTS`], as every round of thousands of calls does.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cdf_keeps_evenly_ranked_quantiles() {
        let values: Vec<f64> = (1..=10_000).rev().map(f64::from).collect();
        let cdf = Cdf::of(&values);
        assert_eq!(cdf.quantiles.len(), CDF_POINTS);
        assert!(cdf.quantiles.is_sorted(), "quantiles ascend");
        // Quantile i sits at rank (i + 0.5) / 500 of 10 000 values.
        assert_eq!(cdf.quantiles[0], 11.0);
        assert_eq!(cdf.quantiles[249], 4991.0);
        assert_eq!(cdf.quantiles[CDF_POINTS - 1], 9991.0);
        let (first, last) = (cdf.points().next(), cdf.points().last());
        assert_eq!(first, Some((11.0, 0.001)));
        assert_eq!(last, Some((9991.0, 0.999)));
    }

    #[test]
    fn a_short_series_keeps_every_value_and_none_gives_an_empty_cdf() {
        assert_eq!(Cdf::of(&[3.0, 1.0, 2.0]).quantiles, [1.0, 2.0, 3.0]);
        assert!(Cdf::of(&[]).quantiles.is_empty());
    }

    #[test]
    fn pooled_rounds_weigh_the_same() {
        let fast = Cdf::of(&vec![1.0; 10_000]);
        let slow = Cdf::of(&vec![3.0; 600]);
        let pooled = Cdf::pooled([&fast, &slow]);
        assert_eq!(pooled.quantiles.len(), CDF_POINTS);
        // The round of 600 calls fills half of the curve, not 6% of it.
        let fast_share = pooled.quantiles.iter().filter(|&&v| v == 1.0).count();
        assert_eq!(fast_share, CDF_POINTS / 2);
    }
}
