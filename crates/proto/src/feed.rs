//! What servers and mounts agree on about the change feeds (`Request::Changes`).

use std::time::Duration;

/// A follower's lease on a server's change feed. A server waits before it answers
/// a change until every other client following its feed has asked again from past
/// it (the follower then dropped what the change made stale), but for no follower
/// longer than this after its last poll arrived: one that did not ask again by then
/// is dropped, and told at its next poll that it lost changes. A follower whose
/// poll has gone unanswered for half of this stops trusting what it cached first.
pub const FEED_LEASE: Duration = Duration::from_secs(4);

/// The longest a server holds a poll with nothing to answer (so a follower that is
/// alive is heard from well within [`FEED_LEASE`]).
pub const FEED_HEARTBEAT: Duration = Duration::from_secs(1);
