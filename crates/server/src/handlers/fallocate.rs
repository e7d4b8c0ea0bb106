//! `Fallocate`: fallocate(2) on one datafile's share of a file range.

use pvfs_proto::message::falloc;
use pvfs_proto::{req, rights, Changed, Request};

use pvfs_storage::DataBackend;

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::copies;
use crate::handlers::write::check_stripe;
use crate::op::{Access, Answer, Cx, Handler};

/// The file bytes `offset .. offset + len` that datafile `index` holds form one run
/// of local bytes (a datafile's stripe units follow each other locally): from its
/// share of a file of `offset` bytes to its share of a file of `offset + len` bytes.
/// That run gets fallocate(2) with `mode`; without `KEEP_SIZE` the datafile's local
/// size then reaches the run's end, which gives the file its new size on the
/// datafile holding its last byte.
impl Handler for req::Fallocate {
    fn access(&self) -> Access<'_> {
        // Passed down a chain of copies: between servers.
        if self.copies.hop > 0 {
            return Access::Peer;
        }
        Access::Capability {
            cap: self.cap.as_ref(),
            handle: self.handle,
            rights: rights::WRITE,
            copies: &self.copies.servers,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let req::Fallocate {
            handle,
            stripe,
            index,
            offset,
            len,
            mode,
            ref copies,
            ..
        } = self;
        let place = copies::check_place(ctx, handle, copies)?;
        check_stripe(stripe, index)?;
        falloc::check(mode, offset, len).map_err(|(e, why)| OpError::invalid(e, why))?;
        let start = stripe.local_size(u64::from(index), offset);
        let end = stripe.local_size(u64::from(index), offset + len);
        let onward = |copies| {
            Request::Fallocate(req::Fallocate {
                cap: None,
                copies,
                ..self.clone()
            })
        };
        let work = move |data: &dyn DataBackend| {
            if end > start {
                data.fallocate(handle, mode, start, end - start)?;
            }
            Ok(())
        };
        Ok(copies::change(
            ctx,
            handle,
            place,
            &self.copies,
            (0, u64::MAX),
            onward,
            work,
        )
        .await?
        .into())
    }
}
