//! The Zipf draw of conversations: rank `k` of `0..n` with probability proportional to
//! `1 / (k + 1)^s`. The sampling is `rand_distr::Zipf` (which draws `1..=n` as a float); here
//! only the 0-based rank and the probabilities the report prints.

use rand::Rng;
use rand::distr::Distribution;

/// Zipf(n, s) over the ranks `0..n`.
#[derive(Debug, Clone)]
pub(super) struct Ranks {
    dist: rand_distr::Zipf<f64>,
    n: usize,
    /// `sum over k in 1..=n of k^-s` (the generalized harmonic number), for [`Ranks::probability`].
    harmonic: f64,
    s: f64,
}

impl Ranks {
    /// The distribution over `0..n` with exponent `s` (1.0 is classic Zipf; 0 is uniform).
    /// Errors: `n` is 0, or `s` is negative or NaN.
    pub(super) fn new(n: usize, s: f64) -> anyhow::Result<Self> {
        let dist = rand_distr::Zipf::new(n as f64, s)
            .map_err(|e| anyhow::anyhow!("Zipf over {n} conversations, s = {s}: {e}"))?;
        let harmonic = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        Ok(Self {
            dist,
            n,
            harmonic,
            s,
        })
    }

    /// A rank in `0..n`.
    pub(super) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        // `Zipf` yields whole numbers in 1..=n; the clamp guards the float's edge.
        (self.dist.sample(rng) as usize).clamp(1, self.n) - 1
    }

    /// Probability of rank `k` (0-based).
    pub(super) fn probability(&self, k: usize) -> f64 {
        ((k + 1) as f64).powf(-self.s) / self.harmonic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn frequencies_follow_one_over_rank() {
        let z = Ranks::new(100, 1.0).unwrap();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut counts = [0u32; 100];
        let draws = 200_000;
        for _ in 0..draws {
            counts[z.sample(&mut rng)] += 1;
        }
        // H(100) ≈ 5.187: rank 0 ≈ 19.3 %, rank 1 ≈ 9.6 %, rank 9 ≈ 1.9 %.
        assert!((z.probability(0) - 0.192_79).abs() < 1e-4);
        let share = |k: usize| f64::from(counts[k]) / f64::from(draws);
        assert!((share(0) - z.probability(0)).abs() < 0.005, "{}", share(0));
        assert!((share(1) - z.probability(1)).abs() < 0.005, "{}", share(1));
        assert!((share(9) - z.probability(9)).abs() < 0.003, "{}", share(9));
        assert!((z.probability(0) / z.probability(1) - 2.0).abs() < 1e-9);
        assert!(counts.iter().all(|&c| c > 0), "every rank is drawn");
    }

    #[test]
    fn the_top_conversation_of_10000_gets_about_a_tenth_of_the_sends() {
        // H(10,000) ≈ 9.7876: what the `--zipf-s` help promises.
        let z = Ranks::new(10_000, 1.0).unwrap();
        assert!((z.probability(0) - 0.102_17).abs() < 1e-4);
        let uniform = Ranks::new(10_000, 0.0).unwrap();
        assert!((uniform.probability(0) - 1e-4).abs() < 1e-12);
    }

    #[test]
    fn draws_stay_in_range_and_bad_parameters_are_refused() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let one = Ranks::new(1, 1.0).unwrap();
        assert!((0..1000).all(|_| one.sample(&mut rng) == 0));
        let ten = Ranks::new(10, 1.0).unwrap();
        assert!((0..10_000).all(|_| ten.sample(&mut rng) < 10));
        assert!(Ranks::new(0, 1.0).is_err());
        assert!(Ranks::new(10, -0.5).is_err());
        assert!(Ranks::new(10, f64::NAN).is_err());
    }
}
