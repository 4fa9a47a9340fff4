//! The one random generator of the CLI's measurements.

/// A seeded xorshift64 generator: fast and repeatable, for spreading a measurement's reads over a
/// file, nothing else.
pub(crate) struct XorShift(u64);

impl XorShift {
    /// A generator whose sequence `seed` decides (any seed, 0 included, gives a full period).
    pub(crate) fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x % n
    }
}

#[cfg(test)]
mod tests {
    use super::XorShift;

    #[test]
    fn rng_is_seeded_and_spreads_its_draws() {
        let draw = |seed| {
            let mut r = XorShift::new(seed);
            (0..1000).map(|_| r.below(100)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7), "one seed, one sequence");
        assert_ne!(draw(7), draw(8), "another seed, another sequence");
        let mut seen = [0u32; 100];
        draw(0).into_iter().for_each(|x| seen[x as usize] += 1);
        assert!(seen.iter().all(|&c| (1..=30).contains(&c)), "every value drawn, none far too often: {seen:?}");
    }
}
