//! A Zipf-like sampler over ranks `0..n`: rank `k` is drawn with probability proportional to
//! `1 / (k + 1)^s`. A precomputed CDF and a binary search: O(log n) per draw, no allocation.

/// Zipf(n, s) over `0..n`.
#[derive(Debug, Clone)]
pub(super) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `0..n` (n ≥ 1) with exponent `s` (1.0 is classic Zipf; 0 is uniform).
    pub(super) fn new(n: usize, s: f64) -> Self {
        assert!(n >= 1, "Zipf needs at least one rank");
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 0..n {
            total += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Self { cdf }
    }

    /// The rank for a uniform `u` in `[0, 1)`.
    pub(super) fn sample(&self, u: f64) -> usize {
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }

    /// Probability of rank `k`.
    pub(super) fn probability(&self, k: usize) -> f64 {
        self.cdf[k] - if k == 0 { 0.0 } else { self.cdf[k - 1] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn frequencies_follow_one_over_rank() {
        let z = Zipf::new(100, 1.0);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut counts = [0u32; 100];
        let draws = 200_000;
        for _ in 0..draws {
            counts[z.sample(rng.random::<f64>())] += 1;
        }
        // H(100) ≈ 5.187: rank 0 ≈ 19.3 %, rank 1 ≈ 9.6 %, rank 9 ≈ 1.9 %.
        let share = |k: usize| f64::from(counts[k]) / f64::from(draws);
        assert!((share(0) - z.probability(0)).abs() < 0.005);
        assert!((share(1) - z.probability(1)).abs() < 0.005);
        assert!((share(9) - z.probability(9)).abs() < 0.003);
        assert!((z.probability(0) / z.probability(1) - 2.0).abs() < 1e-9);
        assert!(counts.iter().all(|&c| c > 0), "every rank is drawn");
    }

    #[test]
    fn edges_stay_in_range() {
        let z = Zipf::new(10, 1.0);
        assert_eq!(z.sample(0.0), 0);
        assert_eq!(z.sample(0.999_999_999), 9);
        assert_eq!(z.sample(1.0), 9);
        let one = Zipf::new(1, 1.0);
        assert_eq!(one.sample(0.5), 0);
    }
}
