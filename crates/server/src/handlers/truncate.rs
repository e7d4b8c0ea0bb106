//! `Truncate`: datafile `index` keeps exactly its share of a file of `size` bytes.

use pvfs_proto::{req, rights, Changed, Errno, Request};

use pvfs_storage::DataBackend;

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::copies;
use crate::handlers::write::check_stripe;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::Truncate {
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
        let req::Truncate {
            handle,
            stripe,
            index,
            size,
            ref copies,
            ..
        } = self;
        let place = copies::check_place(ctx, handle, copies)?;
        check_stripe(stripe, index)?;
        if size > pvfs_proto::layout::MAX_FILE_SIZE {
            return Err(OpError::invalid(
                Errno::EFBIG,
                format!("size {size} too large"),
            ));
        }
        let local = stripe.local_size(u64::from(index), size);
        let onward = |copies| {
            Request::Truncate(req::Truncate {
                cap: None,
                copies,
                ..self.clone()
            })
        };
        let work = move |data: &dyn DataBackend| data.truncate(handle, local);
        Ok(copies::change(
            ctx,
            handle,
            place,
            &self.copies,
            (local, u64::MAX),
            onward,
            work,
        )
        .await?
        .into())
    }
}
