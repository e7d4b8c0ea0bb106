//! The gate every request passes before its handler runs: its kind's
//! [`Access`], checked against who the request acts as.

use pvfs_proto::Errno;

use crate::caps::Caps;
use crate::error::{OpError, OpResult};
use crate::op::{Access, Tickets};
use crate::session::Caller;

/// Fails unless `caller` may send a request of kind `op` that needs `access`:
/// requests between servers and admin scans only from key-holding nodes; a data
/// operation only with a capability granting what it does; a step with a ticket
/// from anyone without the key.
pub fn check_access(caps: &Caps, caller: &Caller, access: Access<'_>, op: &str) -> OpResult<()> {
    match access {
        Access::Client => Ok(()),
        Access::Peer | Access::Admin if caller.trusted => Ok(()),
        Access::Peer | Access::Admin => Err(OpError::denied(
            Errno::EPERM,
            format!("{op} is only accepted from servers and nodes holding the file system's key"),
        )),
        Access::Capability {
            cap,
            handle,
            rights,
            copies,
        } => caps.check_copies(cap, handle, copies, rights, caller, false),
        Access::Ticket { .. } if caller.trusted => Ok(()),
        Access::Ticket {
            tickets: Tickets::One(ticket, handle),
            rights,
        } => caps.check(ticket, handle, rights, caller, false),
        Access::Ticket {
            tickets: Tickets::Each(tickets, handles),
            rights,
        } => handles.iter().try_for_each(|&h| {
            let ticket = tickets.iter().find(|t| t.handle == h);
            caps.check(ticket, h, rights, caller, false)
        }),
    }
}
