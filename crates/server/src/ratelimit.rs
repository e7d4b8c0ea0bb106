//! Log lines that an outsider can provoke (refused handshakes, bad frames) are
//! rate-limited per kind and source, so a flood cannot fill the disk or drown the log.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sources remembered at most (beyond it, the memory starts over).
const MAX_KEYS: usize = 4096;

/// At most one line per key per interval; the next line says how many were dropped.
pub struct LogLimit {
    every: Duration,
    seen: Mutex<HashMap<String, (Instant, u64)>>,
}

impl LogLimit {
    /// One line per key per `every`.
    pub fn new(every: Duration) -> LogLimit {
        LogLimit {
            every,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether to log a line for `key` now: `Some(dropped)` with the number of lines
    /// held back since the last one, or `None` to stay quiet.
    pub fn allow(&self, key: &str) -> Option<u64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_KEYS && !seen.contains_key(key) {
            seen.clear();
        }
        match seen.get_mut(key) {
            Some((last, dropped)) if now.duration_since(*last) < self.every => {
                *dropped += 1;
                None
            }
            Some((last, dropped)) => {
                let n = *dropped;
                *last = now;
                *dropped = 0;
                Some(n)
            }
            None => {
                seen.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_then_the_count() {
        let l = LogLimit::new(Duration::from_millis(50));
        assert_eq!(l.allow("a"), Some(0));
        assert_eq!(l.allow("a"), None);
        assert_eq!(l.allow("a"), None);
        assert_eq!(l.allow("b"), Some(0));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(l.allow("a"), Some(2));
    }
}
