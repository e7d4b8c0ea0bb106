//! `Truncate`: datafile `index` keeps exactly its share of a file of `size` bytes.

use pvfs_proto::{req, rights, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::datafiles::check_handles;
use crate::handlers::write::check_stripe;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::Truncate {
    fn access(&self) -> Access<'_> {
        Access::Capability {
            cap: self.cap.as_ref(),
            handle: self.handle,
            rights: rights::WRITE,
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
            ..
        } = self;
        check_handles(ctx, &[handle])?;
        check_stripe(stripe, index)?;
        if size > pvfs_proto::layout::MAX_FILE_SIZE {
            return Err(OpError::invalid(
                Errno::EFBIG,
                format!("size {size} too large"),
            ));
        }
        let local = stripe.local_size(u64::from(index), size);
        let data = ctx.data.clone();
        let stat = ctx
            .blocking(move || {
                data.truncate(handle, local)?;
                Ok(data.stat(handle)?)
            })
            .await?;
        Ok(Response::Written {
            bytes: 0,
            stat,
            verifier: ctx.data.verifier(),
        }
        .into())
    }
}
