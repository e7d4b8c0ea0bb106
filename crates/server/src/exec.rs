//! Where a server runs blocking storage work: the runner every subsystem that touches
//! a disk takes (the handlers through `Ctx::blocking`, the lock table to write its
//! mark, the supervisor to reopen a failed store), so none of them needs the whole
//! server to do it.

use pvfs_proto::Errno;

use crate::error::{OpError, OpResult};

/// Where a server runs blocking storage work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// On tokio's blocking threads, so the async threads never wait for a disk.
    Threads,
    /// On the calling thread: for a simulation that runs every server on one thread
    /// (its storage in memory), where another thread would make runs differ.
    Inline,
}

impl Exec {
    /// Starts blocking work here: on a blocking thread, or as a task of the runtime
    /// that runs it when first polled.
    pub fn spawn<R, F>(self, f: F) -> tokio::task::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        match self {
            Exec::Threads => tokio::task::spawn_blocking(f),
            Exec::Inline => tokio::spawn(async move { f() }),
        }
    }

    /// Runs blocking storage work off the async threads (or right here, with
    /// [`Exec::Inline`]) and returns its result; a task that died is EIO.
    pub async fn run<R, F>(self, f: F) -> OpResult<R>
    where
        F: FnOnce() -> OpResult<R> + Send + 'static,
        R: Send + 'static,
    {
        if self == Exec::Inline {
            return f();
        }
        match self.spawn(f).await {
            Ok(r) => r,
            Err(e) => Err(OpError::internal(
                Errno::EIO,
                format!("storage task failed: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_where_asked_and_a_dead_task_is_an_error() {
        let caller = std::thread::current().id();
        let thread_of = |exec: Exec| exec.run(|| Ok(std::thread::current().id()));
        let inline = thread_of(Exec::Inline).await.unwrap();
        assert_eq!(inline, caller, "inline work runs on the caller's thread");
        let threaded = thread_of(Exec::Threads).await.unwrap();
        assert_ne!(threaded, caller, "threaded work runs on a blocking thread");
        let died = Exec::Threads
            .run(|| -> OpResult<()> { panic!("a storage call panicked") })
            .await
            .unwrap_err();
        assert_eq!(died.errno, Errno::EIO);
        assert!(died.message.contains("storage task failed"), "{died}");
    }
}
