//! How long a connection waits before dialing again: capped exponential
//! backoff with jitter, reset by a stream that lived long enough.

use std::time::Duration;

/// The first reconnect delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The longest reconnect delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A stream that lived this long resets the backoff.
pub(super) const HEALTHY_SESSION: Duration = Duration::from_secs(10);

/// A delay in `[d/2, d]`, spread by a cheap random source.
pub(super) fn jitter(d: Duration, seed: &mut u64) -> Duration {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let half = d / 2;
    let nanos = half.as_nanos().max(1) as u64;
    half + Duration::from_nanos(*seed % nanos)
}

/// The next reconnect delay after `current`.
pub fn next_backoff(current: Duration) -> Duration {
    (current * 2).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitter_stays_within_half() {
        let mut d = INITIAL_BACKOFF;
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(d);
            d = next_backoff(d);
        }
        assert_eq!(seen[0], Duration::from_millis(100));
        assert_eq!(seen[3], Duration::from_millis(800));
        assert_eq!(*seen.last().unwrap(), MAX_BACKOFF);
        let mut seed = 42;
        let draws: Vec<Duration> = (0..100)
            .map(|_| jitter(Duration::from_secs(2), &mut seed))
            .collect();
        assert!(
            draws
                .iter()
                .all(|j| *j >= Duration::from_secs(1) && *j <= Duration::from_secs(2))
        );
        assert!(
            draws.iter().collect::<HashSet<_>>().len() > 50,
            "spread, not constant"
        );
    }
}
