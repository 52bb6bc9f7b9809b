//! How long an agent waits before it asks a peer again after an attempt
//! that got no answer: exponential backoff with full jitter. The bound
//! doubles with each failed attempt from [`BASE`] up to [`CAP`], and the
//! wait is drawn uniformly below it, so thousands of agents that failed
//! together (a busy head at a large job's start) come back spread out
//! rather than all at once.
use std::time::Duration;

use rand::Rng;

/// The bound of the first wait (after the first failed attempt).
pub const BASE: Duration = Duration::from_millis(100);
/// No wait is longer: a head that comes up is found within this (plus an
/// attempt) by agents that have been failing for a while.
pub const CAP: Duration = Duration::from_secs(1);

/// The bound of the wait after failed attempt `attempt` (0: the first):
/// `BASE * 2^attempt`, at most `CAP`.
pub fn bound(attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
    BASE.saturating_mul(factor).min(CAP)
}

/// The wait after failed attempt `attempt`: uniform in `[0, bound(attempt)]`.
pub fn delay(attempt: u32, rng: &mut impl Rng) -> Duration {
    rng.gen_range(Duration::ZERO..=bound(attempt))
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_bound_starts_at_the_base_and_doubles_with_each_failed_attempt() {
        assert_eq!(bound(0), BASE);
        assert_eq!(bound(1), BASE * 2);
        assert_eq!(bound(2), BASE * 4);
        assert_eq!(bound(3), BASE * 8);
    }

    #[test]
    fn the_bound_stops_at_the_cap_and_never_overflows() {
        assert_eq!(bound(4), CAP, "100 ms * 16 is past the 1 s cap");
        for attempt in [5, 31, 32, 64, 1000, u32::MAX] {
            assert_eq!(bound(attempt), CAP, "attempt {attempt}");
        }
    }

    #[test]
    fn every_delay_is_within_zero_and_its_attempts_bound() {
        let mut rng = StdRng::seed_from_u64(1);
        for attempt in 0..40 {
            for _ in 0..200 {
                let d = delay(attempt, &mut rng);
                assert!(d <= bound(attempt), "attempt {attempt}: {d:?} > {:?}", bound(attempt));
            }
        }
    }

    /// Full jitter: the waits cover the whole range below the bound (their
    /// mean near half of it), not a narrow band around one value that
    /// agents failing together would share.
    #[test]
    fn delays_are_spread_over_the_whole_range_below_the_bound() {
        let mut rng = StdRng::seed_from_u64(7);
        let n = 10_000u32;
        let draws: Vec<Duration> = (0..n).map(|_| delay(10, &mut rng)).collect();
        let (lo, hi) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        let mean = draws.iter().sum::<Duration>() / n;
        assert!(*lo < CAP / 50 && *hi > CAP * 49 / 50, "range {lo:?}..{hi:?}");
        assert!(mean > CAP * 45 / 100 && mean < CAP * 55 / 100, "mean {mean:?}");
    }

    #[test]
    fn the_same_random_source_gives_the_same_delays() {
        let a: Vec<Duration> = (0..20).map(|i| delay(i, &mut StdRng::seed_from_u64(3))).collect();
        let b: Vec<Duration> = (0..20).map(|i| delay(i, &mut StdRng::seed_from_u64(3))).collect();
        assert_eq!(a, b);
    }
}
