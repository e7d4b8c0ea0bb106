//! What a request kind is to the server, declared once, in the handler's own file.
//!
//! The protocol declares each kind's wire form, its [`pvfs_proto::Effect`] (how it may
//! be retried) and its [`pvfs_proto::Flow`] in the table of `pvfs_proto::Request`. The
//! server adds, per kind, an `impl Handler for req::Kind` beside the code that does it:
//! who may send it and what it must show ([`Access`]), what it changes for the caches
//! of other clients ([`Handler::changes`]), and how it is done ([`Handler::run`]).
//! Every item is required, so a new kind that forgets a fact does not compile.
//! [`crate::dispatch`] checks the access, keeps retries of one mutation apart
//! (`crate::once`), runs the handler and records its changes, the same way for every
//! kind.

use std::future::Future;
use std::sync::Arc;

use pvfs_proto::{Capability, Changed, Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::once::Once;
use crate::reply::{Data, Reply};
use crate::session::{Caller, Session};

/// One request kind, as the server handles it.
pub trait Handler: pvfs_proto::Op + Send + 'static {
    /// Who may send it, and the capability or ticket it must show: checked before
    /// [`Handler::run`] starts.
    fn access(&self) -> Access<'_>;

    /// What clients caching names and attributes must forget once it succeeded here
    /// (nothing for a kind that changes nothing they cache).
    fn changes(&self) -> Vec<Changed>;

    /// Whether its answer waits until every other client following this server's
    /// change feed dropped what [`Handler::changes`] names (`crate::feed`): a change
    /// is seen everywhere when its call returns. The data path does not wait: a
    /// file's bytes are coherent between clients by locks (lock to unlock).
    const AWAITS_CACHES: bool = true;

    /// Does it. A kind whose effect is `Once` makes its change through
    /// [`Once::commit`] (`cx.once`), which records the answer with it.
    fn run(self, cx: Cx<'_>) -> impl Future<Output = OpResult<Answer>> + Send;

    /// Answers a retry of a request that was done here (a `Once` kind whose answer
    /// was recorded): dispatch finds the record before anything is checked — the
    /// first run may have made its own checks false (the object a rename replaced is
    /// gone) — and calls this instead of [`Handler::run`]. The recorded answer as it
    /// is, unless the kind has a step after its commit that a retry must repeat
    /// (taking a link at another server: the step's own key makes it happen once).
    fn replayed(
        self,
        cx: Cx<'_>,
        recorded: Response,
    ) -> impl Future<Output = OpResult<Answer>> + Send {
        let _ = cx;
        std::future::ready(Ok(Answer::Reply(recorded)))
    }
}

/// Who may send a request, and what it must show.
#[derive(Clone, Copy, Debug)]
pub enum Access<'a> {
    /// Any authenticated caller: the handler checks the user's permissions.
    Client,
    /// Any caller showing a capability that grants `rights` on `handle`: the data
    /// servers' operations (they know no permissions; a metadata server granted it).
    Capability {
        /// The capability shown.
        cap: Option<&'a Capability>,
        /// The object it must be for.
        handle: Handle,
        /// What it must grant (`pvfs_proto::rights`).
        rights: u32,
        /// The servers of the datafile's copies the request names (empty: one
        /// copy); the capability must have been granted for them.
        copies: &'a [u32],
    },
    /// A step of an operation that spans servers: key-holding nodes, or a caller
    /// showing a ticket (a capability a server granted for the step) that grants
    /// `rights` on each object.
    Ticket {
        /// The tickets shown, and the objects they must be for.
        tickets: Tickets<'a>,
        /// What each must grant.
        rights: u32,
    },
    /// Between servers only (pools, cache invalidation, link counts, deadlock
    /// checks, change feeds): key-holding nodes.
    Peer,
    /// Whole-server scans and repairs (`pvfs fsck`): key-holding nodes.
    Admin,
}

/// The tickets a [`Access::Ticket`] step shows.
#[derive(Clone, Copy, Debug)]
pub enum Tickets<'a> {
    /// One ticket, for one object.
    One(Option<&'a Capability>, Handle),
    /// One ticket for each of `handles`, among `tickets` in any order.
    Each(&'a [Capability], &'a [Handle]),
}

/// What a handler leaves for dispatch to send (moved once, from the handler to
/// dispatch: its size does not matter).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    /// One answer frame.
    Reply(Response),
    /// The handler sent its whole answer itself (a streamed read).
    Streamed,
}

impl From<Response> for Answer {
    fn from(r: Response) -> Answer {
        Answer::Reply(r)
    }
}

/// The answer `Done`.
pub fn done() -> OpResult<Answer> {
    Ok(Answer::Reply(Response::Done {}))
}

/// What one request's handler gets besides the request: the server, who asks, the
/// connection, the at-most-once wrapper and the request's data.
pub struct Cx<'a> {
    /// The server.
    pub ctx: &'a Arc<Ctx>,
    /// Who the request acts as.
    pub caller: &'a Caller,
    /// The connection it came on.
    pub session: &'a Session,
    /// Where its answer goes (a streamed read sends its frames there).
    pub reply: &'a Reply,
    /// The request's at-most-once wrapper (its retry key, if it has one).
    pub once: Once,
    /// The data that came with the request, and the stream of the frames that
    /// follow it (a write).
    pub input: Input,
}

/// The bulk data of a request whose flow is `DataIn`.
pub struct Input {
    /// The data in the request's own frame.
    pub first: Data,
    /// The later data frames, when the request frame was not its last.
    pub rest: Option<tokio::sync::mpsc::Receiver<Data>>,
}
