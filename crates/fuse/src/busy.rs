//! The directories this mount is changing now, for the change feeds (`feed.rs`): the
//! kernel holds a directory's lock while the mount serves a change in it, so it can
//! drop no name there until that change is answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fuser::INodeNo;

/// The directories this mount serves a request in that the kernel holds the
/// directory's lock for and whose answer may wait for other mounts (a change of a
/// name in it, or of its attributes or extended attributes): the kernel can drop no
/// name in them until the request is answered.
#[derive(Default)]
pub(crate) struct BusyDirs {
    dirs: Mutex<HashMap<INodeNo, usize>>,
}

/// A request in progress in some directories ([`BusyDirs::enter`]).
pub(crate) struct Busy {
    dirs: Arc<BusyDirs>,
    inos: Vec<INodeNo>,
}

impl BusyDirs {
    /// Marks `inos` busy until the guard is dropped (after the request's answer).
    pub(crate) fn enter(self: &Arc<Self>, inos: &[INodeNo]) -> Busy {
        let mut d = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        for ino in inos {
            *d.entry(*ino).or_default() += 1;
        }
        Busy {
            dirs: self.clone(),
            inos: inos.to_vec(),
        }
    }

    pub(crate) fn is_busy(&self, ino: INodeNo) -> bool {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&ino)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut d = self.dirs.dirs.lock().unwrap_or_else(|p| p.into_inner());
        for ino in &self.inos {
            if let Some(n) = d.get_mut(ino) {
                *n -= 1;
                if *n == 0 {
                    d.remove(ino);
                }
            }
        }
    }
}
