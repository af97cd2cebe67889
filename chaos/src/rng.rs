//! A small seeded generator (SplitMix64): the harness needs reproducible
//! schedules, not cryptographic quality, and takes no new dependency for it.

/// SplitMix64 (Steele, Lea, Flood 2014): every seed, zero included, gives a
/// full-period stream, and `fork` derives independent streams from one seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), by multiply-shift: no modulo bias worth
    /// the name for the small ranges used here.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `low..high` (`low` < `high`).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len() as u64) as usize)
        }
    }

    /// An independent stream for `stream`, so that adding draws to one part
    /// of the harness does not shift the schedule of another.
    pub fn fork(seed: u64, stream: u64) -> Rng {
        let mut mixer = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        Rng(mixer.next_u64())
    }
}
