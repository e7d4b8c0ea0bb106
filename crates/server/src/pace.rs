//! The pace of the copies a server makes for itself, catching up or refilling
//! (`[replication] rebuild_bandwidth`): each copy step waits until the bytes copied
//! so far fit the bandwidth, so foreground I/O keeps the rest.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Paces bytes to at most `per_sec` a second, over every copy of the server.
pub struct Pace {
    per_sec: u64,
    /// When the bytes paced so far have had their time (None: nothing paced yet).
    next: Mutex<Option<Instant>>,
}

impl Pace {
    /// A pace of `per_sec` bytes a second (0: no limit).
    pub fn new(per_sec: u64) -> Pace {
        Pace {
            per_sec,
            next: Mutex::new(None),
        }
    }

    /// `bytes` were copied by a step that began at `began`: waits until they fit
    /// the bandwidth, counting from the later of the step's start and the end of
    /// the time the bytes before them took (the step's own time counts; a pause
    /// before it does not).
    pub async fn spent(&self, bytes: u64, began: Instant) {
        if self.per_sec == 0 || bytes == 0 {
            return;
        }
        let until = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let from = next.map_or(began, |t| t.max(began));
            let until = from + Duration::from_secs_f64(bytes as f64 / self.per_sec as f64);
            *next = Some(until);
            until
        };
        tokio::time::sleep_until(until).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn copies_take_the_time_their_bytes_need_at_the_bandwidth() {
        let pace = Pace::new(10 << 20);
        let start = Instant::now();
        for _ in 0..20 {
            pace.spent(1 << 20, Instant::now()).await;
        }
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "20 MiB at 10 MiB/s"
        );
        // A pause between copies is not made up for by a burst after it.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let again = Instant::now();
        pace.spent(5 << 20, again).await;
        assert_eq!(again.elapsed(), Duration::from_millis(500));
        // The step's own time counts: one that took 300 ms to copy 5 MiB waits
        // 200 ms more, not 500.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let began = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        pace.spent(5 << 20, began).await;
        assert_eq!(began.elapsed(), Duration::from_millis(500));
        // Without a limit nothing waits.
        let free = Pace::new(0);
        let t = Instant::now();
        free.spent(u64::MAX, t).await;
        assert_eq!(t.elapsed(), Duration::ZERO);
    }
}
