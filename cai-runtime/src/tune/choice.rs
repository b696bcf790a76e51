//! What a measurement is, and which candidate wins: the fastest by median, ties within
//! noise to the one declared first, so that every process and every run choose alike.

use serde::{Deserialize, Serialize};

/// A candidate's time per launch, in microseconds, over several samples (each the mean of
/// a batch of back-to-back launches between two events).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// Samples taken, and launches per sample.
    pub samples: usize,
    pub batch: usize,
}

impl Timing {
    /// Of per-launch samples (microseconds); `None` for none.
    pub fn of(mut samples: Vec<f64>, batch: usize) -> Option<Timing> {
        samples.retain(|s| s.is_finite());
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 { samples[n / 2] } else { (samples[n / 2 - 1] + samples[n / 2]) / 2.0 };
        Some(Timing { median_us: median, min_us: samples[0], max_us: samples[n - 1], samples: n, batch })
    }

    /// The relative spread of the samples around the median: (max - min) / median.
    pub fn spread(&self) -> f64 {
        if self.median_us > 0.0 {
            (self.max_us - self.min_us) / self.median_us
        } else {
            0.0
        }
    }
}

/// What became of one candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Trial {
    Timed(Timing),
    /// It could not be compiled or launched (too many registers, too much shared memory, a
    /// template argument its source refuses): why.
    Failed(String),
}

/// Medians closer than this (relative) are a tie, decided by declaration order.
pub const NOISE: f64 = 0.02;

/// The winning trial: the smallest median, where medians within [`NOISE`] of the smallest
/// count as equal and the first declared of them wins. `None` when none was timed.
pub fn choose(trials: &[Trial]) -> Option<usize> {
    let timed = || trials.iter().enumerate().filter_map(|(i, t)| if let Trial::Timed(t) = t { Some((i, t.median_us)) } else { None });
    let best = timed().map(|(_, m)| m).min_by(f64::total_cmp)?;
    timed().find(|&(_, m)| m <= best * (1.0 + NOISE)).map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(median: f64) -> Trial {
        Trial::Timed(Timing { median_us: median, min_us: median, max_us: median, samples: 5, batch: 1 })
    }

    #[test]
    fn the_fastest_wins_and_ties_go_to_the_first_declared() {
        assert_eq!(choose(&[timed(5.0), timed(4.0), timed(6.0)]), Some(1));
        assert_eq!(choose(&[timed(4.05), timed(4.0)]), Some(0), "within noise: the first declared");
        assert_eq!(choose(&[timed(4.2), timed(4.0)]), Some(1));
        assert_eq!(choose(&[Trial::Failed("too many registers".into()), timed(9.0)]), Some(1));
        assert_eq!(choose(&[Trial::Failed("x".into())]), None);
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn timings_are_medians_of_their_samples() {
        let t = Timing::of(vec![3.0, 1.0, 2.0, 10.0, f64::NAN], 4).unwrap();
        assert_eq!((t.median_us, t.min_us, t.max_us, t.samples, t.batch), (2.5, 1.0, 10.0, 4, 4));
        assert!((t.spread() - 3.6).abs() < 1e-9);
        assert_eq!(Timing::of(vec![], 1), None);
    }
}
