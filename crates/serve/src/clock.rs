//! The server's notion of "how long since": the idle timer of `--keep-alive` reads it. The
//! real clock is `Instant::now()`; a manual clock is the real one plus an offset that only
//! its owner moves, so a test can make a model idle (or keep it fresh) without sleeping and
//! without depending on how long the machine takes between two requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// Nanoseconds added to the real time; `None` for the real clock.
    offset: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// `Instant::now()`.
    pub fn real() -> Self {
        Self::default()
    }

    /// The real clock plus an offset moved by [`Clock::advance`] (clones share it).
    pub fn manual() -> Self {
        Self {
            offset: Some(Arc::new(AtomicU64::new(0))),
        }
    }

    pub fn now(&self) -> Instant {
        match &self.offset {
            None => Instant::now(),
            Some(o) => Instant::now() + Duration::from_nanos(o.load(Ordering::SeqCst)),
        }
    }

    /// Move a manual clock forward by `d`; a real clock cannot be moved (returns false).
    pub fn advance(&self, d: Duration) -> bool {
        match &self.offset {
            None => false,
            Some(o) => {
                let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                o.fetch_add(ns, Ordering::SeqCst);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;
    use std::time::Duration;

    #[test]
    fn a_manual_clock_moves_when_advanced_and_clones_share_it() {
        let c = Clock::manual();
        let seen = c.clone();
        let before = seen.now();
        assert!(c.advance(Duration::from_secs(3600)));
        assert!(seen.now().duration_since(before) >= Duration::from_secs(3600));
        assert!(!Clock::real().advance(Duration::from_secs(1)));
    }
}
